"""Time limits from measurements: a file is given `factor` times what it is known to take, at
least `floor` seconds, never more than `--timeout`; a hang is named in seconds, not waited
out for `--timeout` per round.

What a file is known to take is the most any evidence in this run says: its measurement (the
planner's content key: this run's `FileMeasured`, or one reused from an earlier gate) and the
plugin's figures of this run's base attempts and isolations (a head attempt whose files are
not all known before its round waits for its shard's base attempt, so it has them, unless it
is a long pole that waiting would leave to end the round alone: `ledger/steps/run.py`). A
file with no known figure gets no limit of its own: the shard's `--timeout` bounds it. The
gate's pytest plugin enforces the limits and, when it ends a run, prints the line
`parse_time_limit` reads, naming the test that was running. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from release_ledger.domain.junit import Report
    from release_ledger.domain.run_state import RunState

# Defaults: x10 of the known time and at least 10 s. Measured noise between base and head of
# the same code on five real suites was at most x1.31 (x3.8 on a 6 ms file), so a normal file
# is never cut; a hang is killed at 10 s where `--timeout` waited 1200 s.
DEFAULT_TIME_FACTOR = 10.0
TIMEOUT = "timeout"  # a hang's outcome, and its finding's name
DEFAULT_FILE_FLOOR_S = 10.0
# The plugin's line: `release-ledger: time-limit FILE TEST after 10.1 s (limit 10 s)`.
_KILLED = re.compile(
    r"^release-ledger: time-limit (?P<file>\S+) (?P<test>.+?) after (?P<after>[\d.]+) s "
    r"\(limit (?P<limit>[\d.]+) s\)\s*$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class TimeLimitKill:
    """A run the plugin ended because its running file ran past the file's limit."""

    file: str
    test: str  # the node id that was running ("-" when none had started)
    after_s: float
    limit_s: float


def parse_time_limit(log_tail: str, files: Sequence[str]) -> TimeLimitKill | None:
    """The plugin's time-limit line in a run's log, for one of the run's files (the last one
    when several; None without)."""
    found = None
    for match in _KILLED.finditer(log_tail):
        if match.group("file") in files:
            found = match
    if found is None:
        return None
    return TimeLimitKill(
        found.group("file"),
        found.group("test"),
        float(found.group("after")),
        float(found.group("limit")),
    )


TIME_LIMIT_EXIT = 124  # the plugin's exit code when it ends a session at a file's limit
SIGKILL = 9  # under xdist the plugin ends the whole process group with it


def time_limit_doubt(
    kill: TimeLimitKill,
    *,
    exit_code: int | None,
    signal: int | None,
    seconds: float,
    limits: Mapping[str, float],
) -> str | None:
    """Why a time-limit line is not believed, or None when the supervisor saw the run end
    as the plugin ends one (exit 124, or SIGKILL under xdist) at or after the limit the gate
    gave that file. The line is the suite's output: a conftest can print one for any test."""
    given = limits.get(kill.file)
    said = f"a time-limit line named {kill.test} ({kill.file})"
    if exit_code != TIME_LIMIT_EXIT and signal != SIGKILL:
        ended = f"signal {signal}" if signal is not None else f"exit {exit_code}"
        return f"{said}, but the run ended with {ended}, not as the plugin ends one"
    if given is None:
        return f"{said}, a file the gate gave no time limit"
    if abs(kill.limit_s - given) > 0.05:
        return f"{said} with a limit of {kill.limit_s:g} s; the gate gave it {given:g} s"
    if seconds + 0.05 < given:
        return f"{said}, but the run ended after {seconds:g} s, before the {given:g} s limit"
    return None


def file_limits(
    files: Iterable[str],
    known: Mapping[str, float],
    *,
    timeout_s: float,
    factor: float = DEFAULT_TIME_FACTOR,
    floor_s: float = DEFAULT_FILE_FLOOR_S,
) -> dict[str, float]:
    """Each file's limit with a known figure: max(floor, factor x known), at most timeout."""
    return {
        file: round(min(timeout_s, max(floor_s, factor * known[file])), 1)
        for file in files
        if file in known
    }


# Beyond its files' limits, a shard has the runner's start and collection (not in any file's
# figure) and this much again: the plugin, which names the test, ends a hang first.
SHARD_START_S = 60.0


def shard_timeout(
    files: Sequence[str], limits: Mapping[str, float], timeout_s: float
) -> float:
    """A shard's limit when every file has one: twice their sum and `SHARD_START_S`, so the
    plugin's file limit (which names the test) always comes first; else `--timeout`; never
    more than `--timeout`."""
    if files and all(f in limits for f in files):
        return min(timeout_s, round(2 * sum(limits[f] for f in files) + SHARD_START_S, 1))
    return timeout_s


def known_seconds(state: RunState) -> dict[str, float]:
    """What each file is known to take: the most its measurement and this run's base
    attempts and isolations (the plugin's per-file figures) say."""
    from release_ledger.domain.run_state import BASE

    known = {file: seconds for file, (_, seconds, _) in state.measured.items()}

    def note(figures: Mapping[str, object]) -> None:
        for file, f in figures.items():
            seconds = float(getattr(f, "seconds", 0.0))
            known[file] = max(known.get(file, 0.0), seconds)

    for shard in state.shards.values():
        for attempt in shard.attempts[BASE]:
            report = attempt.assessment.report
            if report is not None and report.plugin:
                note(report.figures)
    for isolation in state.isolations.values():
        report = isolation.assessment.report
        if report is not None and report.plugin:
            note(report.figures)
    return known


def estimated_seconds(state: RunState, files: Iterable[str], known: Mapping[str, float]) -> float:
    """What a run of `files` is expected to take, so a round starts its longest runs first:
    each file's known figure (`known_seconds`), else the plan's estimate of it (its measured
    cost, else the nominal one from discovery: `domain/planning.nominal_cost`)."""
    from release_ledger.domain.planning import nominal_cost

    total = 0.0
    for file in files:
        if file in known:
            total += known[file]
        elif file in state.costs:
            total += state.costs[file].seconds
        else:
            size = state.discovered_sizes.get(file, 0)
            total += nominal_cost(size, state.nominal_tests(file)).seconds
    return total


@dataclass(frozen=True)
class Hang:
    """A test its file's time limit ended at head when the file ran alone (confirmed): at
    head only (`introduced`), or at base too."""

    test: str
    killed_at_s: float  # how long its file had run at head when ended
    limit_s: float
    base_s: float | None  # the test's own time at base (None: it hung at base too)

    @property
    def at_both(self) -> bool:
        return self.base_s is None

    def as_dict(self) -> dict[str, object]:
        return {"test": self.test, "killed_at_s": self.killed_at_s, "limit_s": self.limit_s,
                "base_s": self.base_s}  # fmt: skip

    def line(self) -> str:
        """`tests/x.py::test_y hung at head (killed at 60 s; 0.01 s at base)`."""
        if self.at_both:
            return f"{self.test} hung at head and at base (killed at {self.killed_at_s:g} s)"
        return (
            f"{self.test} hung at head (killed at {self.killed_at_s:g} s; "
            f"{self.base_s:g} s at base)"
        )


def hangs(state: RunState, base_times: Mapping[str, float]) -> tuple[Hang, ...]:
    """The tests head's isolation ended at their file's limit, with base's evidence: its
    isolation ended on the same test (at both), or the test's time at base (`base_times`,
    the measured base reports' case times)."""
    from release_ledger.domain.run_state import BASE, HEAD

    found = []
    for (file, revision), isolation in sorted(state.isolations.items()):
        if revision != HEAD or not isolation.killed_test:
            continue
        test = isolation.killed_test
        at_base = state.isolations.get((file, BASE))
        limit = isolation.time_limit_s or 0.0
        if at_base is not None and at_base.killed_test == test:
            found.append(Hang(test, round(isolation.seconds, 1), limit, None))
            continue
        base_s = _passed_in(at_base.assessment.report if at_base else None, test)
        if base_s is None and base_times.get(test) is not None:
            base_s = base_times[test]
        if base_s is not None:
            found.append(Hang(test, round(isolation.seconds, 1), limit, round(base_s, 3)))
    return tuple(found)


def _passed_in(report: Report | None, test: str) -> float | None:
    """The test's own time in a report where it passed (None: absent, or not passed)."""
    from release_ledger.domain.junit import test_id

    for case in report.cases if report is not None else ():
        if test_id(case) == test and case.outcome == "passed":
            return case.time or 0.0
    return None
