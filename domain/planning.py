"""Shard planning (DESIGN.md step 3): pack measured test files into shards, pure and deterministic.

A shard runs as ONE test process over its files, one after another. Its memory is planned by
the memory model (`domain/memory.py`: `planned_memory` of the files' `FileCost`s); its wall
time is the sum of the files' seconds.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence

from release_ledger.domain.errors import BadInput
from release_ledger.domain.events import PlannedShard
from release_ledger.domain.memory import (
    DEFAULT_BASELINE_MB,
    FileCost,
    planned_memory,
    shared_imports_mb,
)

NOMINAL_SECONDS_PER_TEST = 0.02
NOMINAL_SECONDS_PER_FILE = 0.05
NOMINAL_RETAINED_MB = 2.0  # a test module and its fixtures, before any measurement
NOMINAL_RETAINED_MB_PER_KB = 0.05  # per kB of source: bigger modules import more
# A shard attempt costs about a quarter of a second beyond its tests (a resident worker's
# fork and pytest session, the gate's bookkeeping), and each shard run at once needs a worker
# of its own (half a second to start): docs/benchmarks.md, "Every core busy". A shard of the
# default count carries at least ten times that, so a small suite is not cut into shards that
# cost more than running them side by side saves.
SHARD_FLOOR_S = 2.5


def nominal_cost(size_bytes: int, tests: int) -> FileCost:
    """A file never measured: a cost from what discovery read (its size and test functions),
    small, so the first plan spreads files by their likely time and the watchdog and
    bisection protect the budget until shard runs have measured them."""
    seconds = NOMINAL_SECONDS_PER_FILE + NOMINAL_SECONDS_PER_TEST * max(0, tests)
    retained = NOMINAL_RETAINED_MB + NOMINAL_RETAINED_MB_PER_KB * max(0, size_bytes) / 1024
    return FileCost(
        rss_mb=DEFAULT_BASELINE_MB + retained,
        seconds=seconds,
        retained_mb=retained,
        transient_mb=0.0,
    )


def fitted_shard_count(costs: Iterable[FileCost], most: int) -> int:
    """The default shard count for files of these costs: `most` (twice the jobs), fewer when
    that would plan less than `SHARD_FLOOR_S` a shard; never less than one."""
    planned = sum(cost.seconds for cost in costs)
    return max(1, min(most, int(planned // SHARD_FLOOR_S)))


def plan_shards(
    files: Mapping[str, FileCost],
    budget_mb: float,
    count: int,
    *,
    baseline_mb: float = DEFAULT_BASELINE_MB,
    alone_budget_mb: float | None = None,
    rss_first: bool = False,
    collection: Sequence[str] = (),
) -> list[PlannedShard]:
    """Pack `files` into `count` shards (more when the budget needs more) whose planned memory
    (`planned_memory`) stays within `budget_mb`.

    Each file, in order, goes to the shard with the least planned seconds that it fits in
    (ties: the earliest shard); a new shard is opened while fewer than `count` exist, or when
    the file fits in none. A file that needs more than `budget_mb` alone gets a shard of its
    own when it fits `alone_budget_mb` (the isolation reservation); over that, `BadInput`
    names it and its memory.

    Order: longest seconds first, then largest memory, then name (LPT): seconds lead because
    memory limits only where a file may go (makespan within 1.0014x of the lower bound in
    bench/planner.py; the DESIGN.md order, `rss_first=True`, reaches 1.4x). Ids are `s01`,
    `s02`, ... in order of creation; files inside a shard are sorted, or in the project's own
    `collection` order when given (each shard then runs its files as the project would);
    no shard is empty.
    """
    _check_budget_and_count(budget_mb, count)
    if not (math.isfinite(baseline_mb) and baseline_mb >= 0):
        raise BadInput(f"the memory baseline must be a finite number of MB, got {baseline_mb}")
    alone = max(budget_mb, alone_budget_mb if alone_budget_mb is not None else budget_mb)
    shared = shared_imports_mb(files.values())
    _check_costs(files, alone, baseline_mb, shared, budget_mb)
    if rss_first:
        order = sorted(files.items(), key=lambda it: (-it[1].rss_mb, -it[1].seconds, it[0]))
    else:
        order = sorted(files.items(), key=lambda it: (-it[1].seconds, -it[1].rss_mb, it[0]))

    members: list[list[str]] = []
    retained: list[float] = []
    transient: list[float] = []
    alone_mb: list[float] = []  # a shard's figure while it holds one file: its cold need
    seconds: list[float] = []
    least_loaded: list[tuple[float, int]] = []  # (planned seconds, shard index) heap

    def shard_mb(i: int) -> float:
        growth = alone_mb[i] if len(members[i]) == 1 else retained[i] + transient[i]
        return baseline_mb + shared + growth

    for name, cost in order:
        r, t = cost.growth(baseline_mb, shared)
        index = None
        if len(members) >= count:
            skipped = []
            while least_loaded:
                candidate = heapq.heappop(least_loaded)
                i = candidate[1]
                if baseline_mb + shared + retained[i] + r + max(transient[i], t) <= budget_mb:
                    index = i
                    break
                skipped.append(candidate)
            for candidate in skipped:
                heapq.heappush(least_loaded, candidate)
        if index is None:
            index = len(members)
            members.append([name])
            retained.append(r)
            transient.append(t)
            alone_mb.append(cost.cold_or_growth(baseline_mb, shared))
            seconds.append(cost.seconds)
        else:
            members[index].append(name)
            retained[index] += r
            transient[index] = max(transient[index], t)
            seconds[index] += cost.seconds
        if shard_mb(index) <= budget_mb:
            heapq.heappush(least_loaded, (seconds[index], index))
        # else: a file over the shard budget keeps its shard to itself

    rank = {name: index for index, name in enumerate(collection)}
    width = max(2, len(str(max(count, len(members)))))
    return [
        PlannedShard(
            id=f"s{i + 1:0{width}d}",
            files=sorted(names, key=lambda n: (rank.get(n, len(rank)), n)),
            rss_mb=shard_mb(i),
            seconds=seconds[i],
        )
        for i, names in enumerate(members)
    ]


def makespan(shards: Sequence[PlannedShard]) -> float:
    """Planned wall time of the slowest shard: what the parallel run waits for."""
    return max((shard.seconds for shard in shards), default=0.0)


def makespan_lower_bound(files: Mapping[str, FileCost], count: int) -> float:
    """No plan over `count` shards finishes before max(total / count, the longest file)."""
    total = math.fsum(cost.seconds for cost in files.values())
    longest = max((cost.seconds for cost in files.values()), default=0.0)
    return max(total / count, longest) if count > 0 else 0.0


def in_project_order(files: Iterable[str], order: Sequence[str] = ()) -> list[str]:
    """The files in the project's own collection order (`order`, as discovery recorded it),
    those it does not name after them by name: one order whatever the caller's."""
    rank = {file: index for index, file in enumerate(order)}
    return sorted(files, key=lambda file: (rank.get(file, len(rank)), file))


def split_in_halves(
    files: Sequence[str], order: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """Bisection step: the files in the project's order (`in_project_order`) cut in two, the
    first half taking the odd file out, so each half runs its files as the project's own run
    does (an order-coupled file keeps what precedes it), and a replay splits alike.
    """
    if len(files) < 2:
        raise ValueError(f"cannot split {len(files)} file(s) in halves; need at least 2")
    ordered = in_project_order(files, order)
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


def _check_costs(
    files: Mapping[str, FileCost],
    budget_mb: float,
    baseline_mb: float,
    shared_mb: float,
    shard_mb: float,
) -> None:
    """Reject unusable measurements, then files over the budget alone (the largest is named)."""
    for name, cost in files.items():
        values = [("RSS", cost.rss_mb), ("seconds", cost.seconds)]
        values += [("retained", v) for v in (cost.retained_mb,) if v is not None]
        values += [("transient", v) for v in (cost.transient_mb,) if v is not None]
        values += [("shared", v) for v in (cost.shared_mb,) if v is not None]
        values += [("ceiling", v) for v in (cost.ceiling_mb,) if v is not None]
        for what, value in values:
            if not (math.isfinite(value) and value >= 0):
                raise BadInput(f"{name} has an unusable {what} measurement: {value}")
    alone = {name: planned_memory([cost], baseline_mb, shared_mb) for name, cost in files.items()}
    over = [(need, name) for name, need in alone.items() if need > budget_mb]
    if over:
        rss_mb, name = min(over, key=lambda item: (-item[0], item[1]))
        more = f" (and {len(over) - 1} more file(s) over it)" if len(over) > 1 else ""
        which = "shard budget" if budget_mb == shard_mb else "isolation budget"
        raise BadInput(
            f"{name} needs {_mb(rss_mb)} MB, over the {which} of {_mb(budget_mb)} MB{more}"
        )


def _mb(value: float) -> str:
    """MB for a message: whole numbers without a fraction, others to two decimals."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text
