"""The memory model, in one place: every figure a shard's memory is planned, limited and
reserved by, from the plugin's measurements to a pod's request.

The figures (MB), in the order they arise:

- `baseline_mb`: the interpreter and runner before any test module is imported (the plugin's
  `baseline_kb`; `DEFAULT_BASELINE_MB` until one is measured);
- per file (`file_terms`, from the plugin's figures inside a shard run): `retained_mb`, what
  importing and running it left resident; `transient_mb`, how far it rose above that;
  `shared_mb`, a first file's collection (the imports every file of a shard shares);
  `ceiling_mb`, a bound of what it holds run cold. The terms of a file's peak alone
  (`PEAK_TERMS`) sum to its `rss_mb`;
- `planned_memory`: a shard's plan from its files' `FileCost`s (below);
- `attempt_limit_mb`: the memory limit of one attempt (the watchdog's, an SSH host's, a pod's
  limit), from the plan with headroom, the shard budget or the isolation budget;
- `pod_request_mb`: what a pool reserves for a pod, in whole GiB of at least 4.

A shard runs as ONE test process over its files, one after another. Its memory is modelled
from what the gate's pytest plugin measures inside shard runs (`FileFigures`):

    planned = baseline + shared imports + sum(retained growth of each file)
                                        + max(transient peak of any file)

and a file alone at no less than its cold need (below).

`baseline` is the interpreter and runner before any test module is imported; a file's retained
growth is what importing it and running its tests leaves resident (a long-lived process
rarely gives memory back); its transient peak is how far it rose above what it retained. The
max of solo peaks (the planner's first model) undercounts what a process keeps; the reference
design's sum of solo peaks counts the baseline once per file. A measurement without the split
(a solo peak only, or another runner: `shared_out`) is taken as retained whole, which is the
safe side.

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

The attempt limit is one figure for the local watchdog, the SSH host's watchdog and the
Kubernetes request and limit (and the pool placement that reserves it). A shard whose files
all have measured costs gets its planned memory with headroom, capped at the shard budget; a
shard planned from nominal costs, or one whose lineage was already killed over its memory,
gets the whole budget, so an estimate that was wrong costs one split rather than the run. A
single file split off by bisection (or alone in a shard that was killed) runs with the larger
isolation budget, so a heavy file is measured rather than killed again; a pool that has no
room for that reservation places it with the shard budget instead (`ledger/steps/placement.py`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from release_ledger.domain.assessment import Assessment
from release_ledger.domain.errors import PlacementError
from release_ledger.domain.junit import Report

DEFAULT_BASELINE_MB = 64.0  # interpreter + pytest + plugins before any measurement says
KB_PER_MB = 1024.0


# The split's terms a file's peak alone is the sum of (`ceiling_mb` is a bound, not a term).
PEAK_TERMS = ("baseline_mb", "retained_mb", "transient_mb", "shared_mb")


def baseline_mb(report: Report) -> float:
    """The runner's baseline the plugin measured, or the default."""
    return report.baseline_kb / KB_PER_MB if report.baseline_kb else DEFAULT_BASELINE_MB


def first_module(report: Report, files: Sequence[str]) -> str | None:
    """The module the process collected first (pytest collects its arguments in the order
    given): the one whose import paid for what every file of the shard imports."""
    return next((f for f in files if f.endswith(".py") and f in report.figures), None)


def file_terms(report: Report, file: str, first: bool = False) -> dict[str, float | None]:
    """The memory model's terms for one file from the plugin's figures (MB): what importing
    and running it left resident, and how far it rose above that. Where the peak could not be
    reset at the file's start, a peak the file did not raise bounds its transient from above.
    The first module's collection is kept apart as `shared_mb`."""
    f = report.figures[file]
    collected = 0 if first else f.collect_kb
    report_share = report_share_kb(report, file)
    retained = collected + max(0, f.end_rss_kb - f.start_rss_kb) + report_share
    if f.reset or f.end_peak_kb > f.start_peak_kb:
        transient = max(0, f.end_peak_kb - f.end_rss_kb)
    else:
        transient = max(0, f.start_peak_kb - f.end_rss_kb)
    # Its own collection and all the process's runs had grown by the file's end (what earlier
    # files filled lazily included): the most the file can need run cold, beyond the imports
    # every shard pays. Other files' collections are left out: imports are `shared_mb`'s.
    runs_start_kb = min(figures.start_rss_kb for figures in report.figures.values())
    ceiling = max(retained, collected + max(0, f.end_rss_kb - runs_start_kb) + report_share)
    return {
        "baseline_mb": round(baseline_mb(report), 1),
        "retained_mb": round(retained / KB_PER_MB, 1),
        "transient_mb": round(transient / KB_PER_MB, 1),
        "shared_mb": round(f.collect_kb / KB_PER_MB, 1) if first else None,
        "ceiling_mb": round(ceiling / KB_PER_MB, 1),
    }


def report_share_kb(report: Report, file: str) -> int:
    """A file's share, by its cases, of what writing the shard's report took: the report
    grows with every file's cases and is built while all of them are resident."""
    if not report.finish_kb or not report.tests:
        return 0
    cases = sum(1 for case in report.cases if case.file == file)
    return report.finish_kb * cases // report.tests


def shared_out(
    report: Report, files: Sequence[str], peak_mb: float
) -> dict[str, tuple[dict[str, float | None], float]]:
    """Other runners: each file's seconds from its cases' `time`, and the shard's growth over
    the nominal baseline shared out evenly as retained memory (their sum is the shard's peak,
    so the same files planned together are planned at what they used)."""
    seconds: dict[str, float] = {}
    for case in report.cases:
        seconds[case.file] = seconds.get(case.file, 0.0) + (case.time or 0.0)
    present = [file for file in files if file in seconds]
    if not present:
        return {}
    growth = max(0.0, peak_mb - DEFAULT_BASELINE_MB) / len(present)
    split: dict[str, float | None] = {
        "baseline_mb": DEFAULT_BASELINE_MB, "retained_mb": round(growth, 1), "transient_mb": 0.0
    }  # fmt: skip
    return {file: (dict(split), seconds[file]) for file in present}


@dataclass(frozen=True, slots=True)
class FileMeasurement:
    """One file's figures from a shard run, as its `FileMeasured` event records them."""

    terms: dict[str, float | None]  # baseline_mb, retained_mb, transient_mb, shared_mb, ...
    seconds: float
    rss_mb: float  # its peak alone: the sum of its `PEAK_TERMS`
    empty: bool  # a file with no test (its collection shared among the others)


def shard_measurements(
    report: Report, files: Sequence[str], peak_mb: float
) -> dict[str, FileMeasurement]:
    """Each file's figures from one shard run: the plugin's split where it measured the file,
    nothing for an empty file, else the shard's peak shared out (`shared_out`)."""
    shared = shared_out(report, files, peak_mb)
    first = first_module(report, files) if report.plugin else None
    found: dict[str, FileMeasurement] = {}
    for file in files:
        empty = file in report.empty_files
        terms: dict[str, float | None]
        if report.plugin and file in report.figures:
            terms = file_terms(report, file, first=file == first)
            seconds = report.figures[file].seconds
        elif empty or file not in shared:
            terms = {"baseline_mb": baseline_mb(report), "retained_mb": 0.0, "transient_mb": 0.0}
            seconds = 0.0
        else:
            terms, seconds = shared[file]
        rss = sum(terms.get(term) or 0.0 for term in PEAK_TERMS)
        found[file] = FileMeasurement(terms, round(seconds, 3), round(rss, 1), empty)
    return found



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


HEADROOM = 1.25  # planned x 1.25 ...
HEADROOM_MIN_MB = 256.0  # ... or planned + 256 MB, whichever is larger


# What the model reads of a run's state (`domain/run_state.RunState` is one), declared here so
# that the fold imports the memory model and never the other way round (no import circle).
class _Attempt(Protocol):
    @property
    def assessment(self) -> Assessment: ...


class _Shard(Protocol):
    @property
    def files(self) -> tuple[str, ...]: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def depth(self) -> int: ...
    @property
    def attempts(self) -> Mapping[str, Sequence[_Attempt]]: ...


class RunMemory(Protocol):
    """A run's state as the memory model reads it: each file's latest cost, the largest
    runner baseline measured, and the shards with their lineage and attempts."""

    @property
    def costs(self) -> Mapping[str, FileCost]: ...
    @property
    def baseline_mb(self) -> float | None: ...
    @property
    def shards(self) -> Mapping[str, _Shard]: ...


def _oom_in_lineage(state: RunMemory, shard: _Shard) -> bool:
    current: _Shard | None = shard
    while current is not None:
        for attempts in current.attempts.values():
            if any(a.assessment.reason == "oom" for a in attempts):
                return True
        current = state.shards.get(current.parent) if current.parent else None
    return False


def planned_shard_mb(state: RunMemory, files: tuple[str, ...]) -> float | None:
    """The model's figure for these files from their measured costs (None: one is unknown)."""
    costs = [state.costs.get(file) for file in files]
    known = [cost for cost in costs if cost is not None]
    if len(known) != len(costs) or not known:
        return None
    shared = shared_imports_mb(state.costs.values())  # the run's, as its plan took them
    return planned_memory(known, state.baseline_mb or DEFAULT_BASELINE_MB, shared)


def attempt_limit_mb(
    state: RunMemory, shard_id: str, budget_mb: float, isolation_mb: float
) -> int:
    """The memory limit (MB) of an attempt of `shard_id` (see the module's docstring)."""
    shard = state.shards.get(shard_id)
    if shard is None:
        return int(budget_mb)
    alone = len(shard.files) == 1
    killed = _oom_in_lineage(state, shard)
    if alone and (shard.depth > 0 or killed):
        return int(isolation_mb)  # a file alone: measure it rather than kill it again
    planned = planned_shard_mb(state, shard.files)
    if killed or planned is None:
        return int(budget_mb)
    # A file measured over the shard budget was planned alone: it may have its figure.
    cap = isolation_mb if alone and planned > budget_mb else budget_mb
    return math.ceil(min(cap, max(planned * HEADROOM, planned + HEADROOM_MIN_MB)))


MIN_POD_REQUEST_MB = 4096
GIB_MB = 1024


def pod_request_mb(rss_mb: float) -> int:
    """Memory a shard's pod requests: max(4 GiB, its RSS rounded up to whole GiB), in MB."""
    if not (math.isfinite(rss_mb) and rss_mb >= 0):
        raise PlacementError(f"a shard's RSS must be a finite number of MB >= 0, got {rss_mb}")
    return max(MIN_POD_REQUEST_MB, math.ceil(rss_mb / GIB_MB) * GIB_MB)


