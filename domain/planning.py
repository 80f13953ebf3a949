"""Shard planning (DESIGN.md step 3): pack measured test files into shards, pure and deterministic.

A shard runs as ONE test process over its files, one file after another, so its peak memory is
about the largest RSS among its files (the max, not the sum: memory of a finished file is
reused by the next one), while its wall time is the sum of its files' seconds.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from domain.errors import BadInput
from domain.events import PlannedShard


@dataclass(frozen=True, slots=True)
class FileCost:
    """What one test file costs when run alone: peak RSS (MB) and wall seconds."""

    rss_mb: float
    seconds: float


def plan_shards(
    files: Mapping[str, FileCost], budget_mb: float, count: int, *, rss_first: bool = False
) -> list[PlannedShard]:
    """Pack `files` into at most `count` shards whose planned RSS stays within `budget_mb`.

    Each file, in order, goes to the shard with the least planned seconds (ties: the earliest
    shard); a new shard is opened while fewer than `count` exist. A shard's planned RSS is the
    max of its files' RSS (one process runs them in turn), so every file within the budget fits
    every shard: the only impossible input is a file over the budget, which raises `BadInput`
    naming it and its RSS, and the count is always respected.

    Order: longest seconds first, then largest RSS, then name (LPT). DESIGN.md step 3 sorts by
    RSS first; under max semantics RSS never decides where a file may go, and RSS-first lets a
    long file land late on a loaded shard (makespan up to 1.4x the lower bound in
    bench/planner.py), so seconds lead. `rss_first=True` gives the DESIGN.md order, for
    comparison. Ids are `s01`, `s02`, ... in order of creation (zero padded so they sort as
    created); files inside a shard are sorted; empty shards are omitted.
    """
    _check_budget_and_count(budget_mb, count)
    _check_costs(files, budget_mb)
    if rss_first:
        order = sorted(files.items(), key=lambda it: (-it[1].rss_mb, -it[1].seconds, it[0]))
    else:
        order = sorted(files.items(), key=lambda it: (-it[1].seconds, -it[1].rss_mb, it[0]))

    members: list[list[str]] = []
    rss: list[float] = []
    seconds: list[float] = []
    least_loaded: list[tuple[float, int]] = []  # (planned seconds, shard index) heap
    for name, cost in order:
        if len(members) < count:
            index = len(members)
            members.append([name])
            rss.append(cost.rss_mb)
            seconds.append(cost.seconds)
        else:
            _, index = heapq.heappop(least_loaded)
            members[index].append(name)
            rss[index] = max(rss[index], cost.rss_mb)
            seconds[index] += cost.seconds
        heapq.heappush(least_loaded, (seconds[index], index))

    width = max(2, len(str(count)))
    return [
        PlannedShard(id=f"s{i + 1:0{width}d}", files=sorted(names), rss_mb=rss[i], seconds=secs)
        for i, (names, secs) in enumerate(zip(members, seconds, strict=True))
    ]


def makespan(shards: Sequence[PlannedShard]) -> float:
    """Planned wall time of the slowest shard: what the parallel run waits for."""
    return max((shard.seconds for shard in shards), default=0.0)


def makespan_lower_bound(files: Mapping[str, FileCost], count: int) -> float:
    """No plan over `count` shards finishes before max(total / count, the longest file)."""
    total = math.fsum(cost.seconds for cost in files.values())
    longest = max((cost.seconds for cost in files.values()), default=0.0)
    return max(total / count, longest) if count > 0 else 0.0


def split_in_halves(files: Sequence[str]) -> tuple[list[str], list[str]]:
    """Bisection step: the sorted files cut in two, the first half taking the odd file out.

    Sorting first makes the split independent of the caller's order, so a replay splits alike.
    """
    if len(files) < 2:
        raise ValueError(f"cannot split {len(files)} file(s) in halves; need at least 2")
    ordered = sorted(files)
    middle = (len(ordered) + 1) // 2
    return ordered[:middle], ordered[middle:]


def child_shard_ids(parent: str, n: int) -> list[str]:
    """Ids of the `n` children of a split shard: `s03` -> `s03.1`, `s03.2`, ..."""
    if n < 1:
        raise ValueError(f"a split needs at least one child, got {n}")
    return [f"{parent}.{i}" for i in range(1, n + 1)]


def _check_budget_and_count(budget_mb: float, count: int) -> None:
    if not (math.isfinite(budget_mb) and budget_mb > 0):
        raise BadInput(f"the shard budget must be a positive number of MB, got {budget_mb}")
    if count < 1:
        raise BadInput(f"the shard count must be at least 1, got {count}")


def _check_costs(files: Mapping[str, FileCost], budget_mb: float) -> None:
    """Reject unusable measurements, then files over the budget (the largest is named)."""
    for name, cost in files.items():
        for what, value in (("RSS", cost.rss_mb), ("seconds", cost.seconds)):
            if not (math.isfinite(value) and value >= 0):
                raise BadInput(f"{name} has an unusable {what} measurement: {value}")
    over = [(cost.rss_mb, name) for name, cost in files.items() if cost.rss_mb > budget_mb]
    if over:
        rss_mb, name = min(over, key=lambda item: (-item[0], item[1]))
        more = f" (and {len(over) - 1} more file(s) over it)" if len(over) > 1 else ""
        raise BadInput(
            f"{name} needs {_mb(rss_mb)} MB, over the shard budget of {_mb(budget_mb)} MB{more}"
        )


def _mb(value: float) -> str:
    """MB for a message: whole numbers without a fraction, others to two decimals."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text
