"""Shard planning (DESIGN.md step 3): pack measured test files into shards, pure and deterministic.

A shard runs as ONE test process over its files, one after another. Its memory is modelled
from what the gate's pytest plugin measures inside shard runs (`FileFigures`):

    planned = baseline + shared imports + sum(retained growth of each file)
                                        + max(transient peak of any file)

and a file alone at no less than its cold need (below).

`baseline` is the interpreter and runner before any test module is imported; a file's retained
growth is what importing it and running its tests leaves resident (a long-lived process
rarely gives memory back); its transient peak is how far it rose above what it retained. The
max of solo peaks (this module's first model) undercounts what a process keeps; the reference
design's sum of solo peaks counts the baseline once per file. A measurement without the split
(a solo peak only, or another runner) is taken as retained whole, which is the safe side.
Wall time is the sum of the files' seconds.

Imports the files share (the package under test) are paid by whichever file a process
collects first, so a file's retained growth depends on where it ran. The plugin's figures for
a shard's first file therefore keep its collection apart (`shared_mb`); the planner takes the
median of those as what every shard pays once (`shared_imports_mb`, added to the baseline)
and gives each first file back only what it paid above that median. Without it, a shard
whose files were never first is planned without the package's import (networkx: 15 MB, a
shard 12 % over its plan).

State a file fills lazily on first use (a parser's grammar tables, a cache built by the
first call) is paid the same way, by whichever file of a process used it first, and is not
an import: a file measured warm, after others had filled what it needs, is planned too low
when it later runs cold, alone or first (parso: a file planned alone at 47 MB held 59 MB). A
file's `ceiling_mb` is its own collection plus how far its process's test runs had grown by
the file's end: everything it could have relied on was filled by then, so it bounds from above
what the file holds cold. A file planned alone (nothing runs before it) is planned at its
cold need: ceiling and transient. Other files' collections are left out of the ceiling: the
imports files share are the median's. The ceiling also holds what predecessors kept of their
own (networkx: a test keeping a 93 MB graph raised the ceiling of every later file of its
process to 168 MB), which one observation cannot tell from a cache the file used, so it is
not applied to a shard of several files, whose sum carries what its members filled where they
were measured (applied to every member, networkx's plans came to 1.61x what its shards used,
over the 1.5x target). Every observation's ceiling is a valid bound, so a reused measurement
takes the lowest seen for the same content (`ledger/gate.py`): it tightens as files are seen
in other places.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from domain.errors import BadInput
from domain.events import PlannedShard

DEFAULT_BASELINE_MB = 64.0  # interpreter + pytest + plugins before any measurement says
NOMINAL_SECONDS_PER_TEST = 0.02
NOMINAL_SECONDS_PER_FILE = 0.05
NOMINAL_RETAINED_MB = 2.0  # a test module and its fixtures, before any measurement
NOMINAL_RETAINED_MB_PER_KB = 0.05  # per kB of source: bigger modules import more


@dataclass(frozen=True, slots=True)
class FileCost:
    """What one test file costs: wall seconds and memory.

    `rss_mb` is the file's peak as if run alone (baseline included); `retained_mb` and
    `transient_mb` split its growth when the plugin measured them (None: unknown, and the whole
    growth over the baseline counts as retained).
    """

    rss_mb: float
    seconds: float
    retained_mb: float | None = None
    transient_mb: float | None = None
    # Collecting it as its process's first file: the imports every file of a shard shares,
    # and its own (None: it was not first, or the runner did not say).
    shared_mb: float | None = None
    # Its own collection plus how far its process's runs had grown by its end (None: not
    # known): an upper bound of what it holds run cold, whatever its predecessors filled.
    ceiling_mb: float | None = None

    def growth(self, baseline_mb: float, shared_mb: float = 0.0) -> tuple[float, float]:
        """(retained, transient) MB above `baseline_mb` plus the shared imports `shared_mb`:
        a first file keeps what its collection took beyond what every shard pays."""
        if self.retained_mb is None or self.transient_mb is None:
            return max(0.0, self.rss_mb - baseline_mb - shared_mb), 0.0
        own = max(0.0, (self.shared_mb or 0.0) - shared_mb)
        return self.retained_mb + own, self.transient_mb

    def cold_or_growth(self, baseline_mb: float, shared_mb: float = 0.0) -> float:
        """MB above `baseline_mb` and the shared imports it may need run alone: its ceiling
        (at least its retained growth), what a first file imported beyond the shared, and its
        transient peak on top; without a ceiling, its growth as measured."""
        retained, transient = self.growth(baseline_mb, shared_mb)
        if self.ceiling_mb is None or self.retained_mb is None:
            return retained + transient
        own = max(0.0, (self.shared_mb or 0.0) - shared_mb)
        return max(retained, self.ceiling_mb + own) + transient


def shared_imports_mb(costs: Iterable[FileCost]) -> float:
    """What every shard pays once for the imports its files share: the median of what the
    first file of each measured process took to collect (robust to a first file that imports
    something heavy of its own, or nothing of the package); 0 when none was measured."""
    firsts = [cost.shared_mb for cost in costs if cost.shared_mb is not None]
    return float(statistics.median(firsts)) if firsts else 0.0


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


def planned_memory(costs: Sequence[FileCost], baseline_mb: float, shared_mb: float = 0.0) -> float:
    """The model: baseline and shared imports + the files' retained growth + the largest
    transient above it; a file alone, its cold need."""
    if len(costs) == 1:
        return baseline_mb + shared_mb + costs[0].cold_or_growth(baseline_mb, shared_mb)
    retained = transient = 0.0
    for cost in costs:
        r, t = cost.growth(baseline_mb, shared_mb)
        retained += r
        transient = max(transient, t)
    return baseline_mb + shared_mb + retained + transient


def plan_shards(
    files: Mapping[str, FileCost],
    budget_mb: float,
    count: int,
    *,
    baseline_mb: float = DEFAULT_BASELINE_MB,
    alone_budget_mb: float | None = None,
    rss_first: bool = False,
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
    `s02`, ... in order of creation; files inside a shard are sorted; no shard is empty.
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

    width = max(2, len(str(max(count, len(members)))))
    return [
        PlannedShard(
            id=f"s{i + 1:0{width}d}",
            files=sorted(names),
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
