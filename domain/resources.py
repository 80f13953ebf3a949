"""Resource regressions: test files that need much more memory or time at head than at base.

Read from the figures the gate's pytest plugin records inside every shard run at both
revisions (`domain/memory.file_terms`, the same terms the planner uses): a file is `heavier`
when its peak alone at head is over `factor` times base's *and* more than `floor` above it,
`slower` likewise for its wall seconds. Both the factor and the floor must be crossed, so a
10 ms file taking 40 ms, or noise on a big file, is not a finding. The thresholds are recorded
in `RunStarted` (`resources`), so a replay judges as the gate did. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `ledger show` formats a change without loading the fold
    from release_ledger.domain.junit import Report
    from release_ledger.domain.rerun_views import IsolationView
    from release_ledger.domain.run_state import AttemptView, RunState, ShardView

HEAVIER = "heavier"
SLOWER = "slower"
# Defaults from the noise measured between base and head of the same code (a commit that
# changes no Python file) on five real suites, 68 files, on a loaded 2-core machine: at most
# x1.01 and +0.6 MB of memory, x1.31 and 0.5 s of time; a one-line change in parso showed
# x3.8 on a 6 ms file. Factors alone are noise on small files; the floors are 160x and 10x
# the largest difference seen.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "memory_factor": 2.0,
    "memory_floor_mb": 100.0,
    "time_factor": 2.0,
    "time_floor_s": 5.0,
}


@dataclass(frozen=True)
class ResourceChange:
    """One file's figure at both revisions, over the thresholds."""

    file: str
    what: str  # heavier (MB) or slower (s)
    base: float
    head: float

    @property
    def unit(self) -> str:
        return "MB" if self.what == HEAVIER else "s"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "base": self.base, "head": self.head, "unit": self.unit}

    def line(self) -> str:
        """`tests/x.py: 41 MB at base, 10315 MB at head (x251.6)`."""
        return change_line(self.as_dict())


def change_line(change: dict[str, Any]) -> str:
    """One change as a line, from its `as_dict` (so a verdict document renders the same)."""
    base, head, unit = change["base"], change["head"], change["unit"]
    ratio = head / base if base else float("inf")
    return f"{change['file']}: {base:g} {unit} at base, {head:g} {unit} at head (x{ratio:.1f})"


def thresholds(state: RunState) -> dict[str, float]:
    """The run's thresholds: as `RunStarted` recorded them, the defaults for the rest."""
    recorded = state.option("resources", {})
    given = recorded if isinstance(recorded, dict) else {}
    return {name: float(given.get(name, value)) for name, value in DEFAULT_THRESHOLDS.items()}


def _figures(report: Report | None, files: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """(peak MB alone, seconds) of each file the plugin measured in the report."""
    from release_ledger.domain.memory import shard_measurements

    if report is None or not report.plugin:
        return {}
    measured = shard_measurements(report, files, 0.0)
    return {f: (m.rss_mb, m.seconds) for f, m in measured.items() if f in report.figures}


def _base_report(shard: ShardView, file: str) -> Report | None:
    """The report base's figures of `file` come from: this run's, or the earlier run's its
    base results were reused from."""
    from release_ledger.domain.run_state import BASE

    if file in shard.reused:
        return shard.reused[file].source.report
    latest = shard.latest(BASE)
    return latest.assessment.report if latest and latest.assessment.measured else None


def resource_changes(state: RunState) -> tuple[tuple[ResourceChange, ...], ...]:
    """(heavier, slower): the files over the run's thresholds, sorted by file. Computed once
    per state (every rule reads them alike, as `classify`'s classification)."""
    from release_ledger.domain.run_state import HEAD

    cached = state.cache.get("resources")
    if isinstance(cached, tuple):
        return cached
    limits = thresholds(state)
    heavier: list[ResourceChange] = []
    slower: list[ResourceChange] = []
    doubted = {doubt.shard for doubt in doubts(state) if doubt.shard}
    for shard in state.leaves():
        head = shard.latest(HEAD)
        if head is None or not head.assessment.measured or shard.id in doubted:
            continue
        at_head = _figures(head.assessment.report, shard.files)
        for file, (head_mb, head_s) in sorted(at_head.items()):
            base_report = _base_report(shard, file)
            files = tuple(f for f in shard.files if base_report and f in base_report.figures)
            at_base = _figures(base_report, files or shard.files).get(file)
            if at_base is None:
                continue
            base_mb, base_s = at_base
            if _over(base_mb, head_mb, limits["memory_factor"], limits["memory_floor_mb"]):
                heavier.append(ResourceChange(file, HEAVIER, base_mb, head_mb))
            if _over(base_s, head_s, limits["time_factor"], limits["time_floor_s"]):
                slower.append(ResourceChange(file, SLOWER, round(base_s, 2), round(head_s, 2)))
    found = (tuple(heavier), tuple(slower))
    state.cache["resources"] = found
    return found


def _over(base: float, head: float, factor: float, floor: float) -> bool:
    return head > base * factor and head - base > floor


@dataclass(frozen=True)
class OutOfMemory:
    """A file killed over its memory limit alone at head (confirmed by its isolation) that ran
    within it alone at base: introduced, whatever its tests' outcomes were elsewhere."""

    file: str
    head_mb: float  # its peak when killed at head
    base_mb: float  # its peak alone at base

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "head_mb": self.head_mb, "base_mb": self.base_mb}

    def line(self) -> str:
        return (
            f"{self.file} ran out of memory at head (killed at {self.head_mb:g} MB alone; "
            f"{self.base_mb:g} MB at base)"
        )


def out_of_memory(state: RunState) -> tuple[OutOfMemory, ...]:
    """Files whose isolation at head was killed over its limit and whose isolation at base
    was measured: the memory blow-up is head's."""
    from release_ledger.domain.run_state import BASE, HEAD

    found = []
    for (file, revision), isolation in sorted(state.isolations.items()):
        if revision != HEAD or not isolation.oom:
            continue
        at_base = state.isolations.get((file, BASE))
        if at_base is None or at_base.oom or not at_base.assessment.measured:
            continue
        found.append(OutOfMemory(file, round(isolation.rss_mb), round(at_base.rss_mb)))
    return tuple(found)


# --- figures the supervisor does not bear out -------------------------------------------------

FIGURES_NOT_BELIEVED = "figures-not-believed"
# The supervisor's seconds are rounded to the millisecond and include the interpreter's start:
# a report may claim at most this much more than it measured before its figures are doubted.
OVER_TOLERANCE_S = 1.0


@dataclass(frozen=True)
class Doubt:
    """A run whose report or log says what the supervisor's own figures do not bear out: not
    evidence for `slower` or `hung` (the suite's code can slow or speed the clock the plugin
    reads, or print any line)."""

    where: str  # `s1 at head`, `tests/x.py alone at head`
    why: str
    shard: str = ""  # the shard whose figures are not believed ("" for an isolation)

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.where, "why": self.why}

    def line(self) -> str:
        return f"{self.where}: {self.why}"


def _claimed(report: Report) -> float:
    return sum(f.seconds for f in report.figures.values())


def _claims_more(report: Report, seconds: float) -> str | None:
    """A report whose files took longer than the supervisor measured for the whole run (on
    as many workers as it says ran them)."""
    claimed = _claimed(report)
    if claimed <= seconds * report.workers + OVER_TOLERANCE_S:
        return None
    on = f" on {report.workers} workers" if report.workers > 1 else ""
    return (
        f"the report's files took {claimed:.2f} s, more than the {seconds:.2f} s the "
        f"supervisor measured for the whole run{on}"
    )


def _unaccounted(report: Report, seconds: float) -> float:
    """What of the run's wall time no file's figure accounts for (start, collection, and
    whatever a slowed clock hid)."""
    return max(0.0, seconds - _claimed(report) / report.workers)


def _hidden(
    head: tuple[Report, float], base: tuple[Report, float], limits: dict[str, float]
) -> str | None:
    """Head's run took time no file's figure accounts for, much more than base's did: the
    files' seconds do not add up to what the supervisor measured."""
    at_head, at_base = _unaccounted(*head), _unaccounted(*base)
    if not _over(at_base, at_head, limits["time_factor"], limits["time_floor_s"]):
        return None
    return (
        f"the supervisor measured {head[1]:.1f} s, of which the report's files account for "
        f"{_claimed(head[0]):.2f} s ({at_head:.1f} s unaccounted, {at_base:.1f} s at base): "
        "the report's seconds do not add up"
    )


def _figures_of(view: AttemptView | IsolationView | None) -> tuple[Report, float] | None:
    if view is None or not view.assessment.measured:
        return None
    report = view.assessment.report
    return (report, view.seconds) if report is not None and report.plugin and view.seconds else None


def _pair(
    where: str,
    shard: str,
    head: tuple[Report, float] | None,
    base: tuple[Report, float] | None,
    limits: dict[str, float],
) -> list[Doubt]:
    found = []
    for revision, figures in (("head", head), ("base", base)):
        why = _claims_more(*figures) if figures else None
        if why:
            found.append(Doubt(f"{where} at {revision}", why, shard))
    if head and base and not found:
        why = _hidden(head, base, limits)
        if why:
            found.append(Doubt(f"{where} at head", why, shard))
    return found


def doubts(state: RunState) -> tuple[Doubt, ...]:
    """Every run of this state whose figures are not believed: a report's seconds that do not
    add up to the supervisor's clock for its run (shards and files run alone, each at head
    checked against base), and time-limit lines the supervisor did not see the run end by."""
    from release_ledger.domain.run_state import BASE, HEAD

    cached = state.cache.get("doubts")
    if isinstance(cached, tuple):
        return cached
    if state.harness_changed is None:
        # Recorded before the gate checked figures (the same version began comparing
        # harnesses at discovery): read as it was then. Its xdist reports say nothing of
        # their workers, so their files' seconds would look like more than the run took.
        state.cache["doubts"] = ()
        return ()
    limits = thresholds(state)
    found: list[Doubt] = []
    for shard in state.leaves():
        head, base = shard.latest(HEAD), shard.latest(BASE)
        found += _pair(shard.id, shard.id, _figures_of(head), _figures_of(base), limits)
        for view in (head, base):
            if view is not None and view.time_limit_not_believed:
                found.append(Doubt(f"{shard.id} at {view.revision}", view.time_limit_not_believed))
    for (file, revision), isolation in sorted(state.isolations.items()):
        if revision == HEAD:
            found += _pair(f"{file} alone", "", _figures_of(isolation),
                           _figures_of(state.isolations.get((file, BASE))), limits)  # fmt: skip
        if isolation.time_limit_not_believed:
            found.append(Doubt(f"{file} alone at {revision}", isolation.time_limit_not_believed))
    result = tuple(found)
    state.cache["doubts"] = result
    return result
