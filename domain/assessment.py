"""Is one shard attempt a measurement? The honest reading of what a run left behind.

An attempt is measured only when the process exited 0 or 1 with no signal, the JUnit report
is valid and covers exactly the files run, the exit code agrees with the report, and the
pytest summary line (where present) agrees with the report's counts. Anything else is
unmeasured, with a reason from a fixed vocabulary, so retries and bisection can act on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from release_ledger.domain.failures import failure_kind
from release_ledger.domain.junit import (
    Rejection,
    Report,
    read_report,
    report_from_data,
    report_to_data,
)
from release_ledger.domain.versions import READER_VERSION as READER_VERSION

# Reasons a shard (or a file) could not be measured.
SIGNAL = "signal"
TIMEOUT = "timeout"
OOM = "oom"
NO_OUTPUT = "no-output"
INCOMPLETE = "incomplete"
UNATTRIBUTED = "unattributed"
JOB_FAILED = "job-failed"
REPORT_TOO_LARGE = "report-too-large"  # over --max-report-mb: only its head was kept
# Not culprit reasons: no pool member could take the shard, or the revision's environment
# could not be built; bisecting cannot help with either.
UNPLACED = "unplaced"
ENV_SETUP = "env-setup"
# The tests changed tracked files of their checkout (outside the suite's declared outputs).
CHECKOUT_MODIFIED = "checkout-modified"

NO_TESTS_COLLECTED = 5  # pytest's exit code when a run collected no test

# READER_VERSION (`domain.versions`): the version of the reading of an attempt (the JUnit
# reader and this assessment); bump it when the same report could read differently.

REASONS = (
    SIGNAL, TIMEOUT, OOM, NO_OUTPUT, INCOMPLETE, UNATTRIBUTED, JOB_FAILED, REPORT_TOO_LARGE,
    UNPLACED, ENV_SETUP, CHECKOUT_MODIFIED,
)  # fmt: skip

# The unmeasured reason each executor failure kind gives (the rest are `job-failed`).
_KIND_REASONS = {
    "oom": OOM,
    "timeout": TIMEOUT,
    "signal": SIGNAL,
    "unplaced": UNPLACED,
    "env-setup": ENV_SETUP,
    "checkout-modified": CHECKOUT_MODIFIED,
}


@dataclass(frozen=True)
class Assessment:
    measured: bool
    reason: str | None = None
    detail: str = ""
    report: Report | None = None
    # Files of the run that the evidence itself names as the cause (a rejection that names a
    # missing file, or the file that collected a case of another file): deterministic faults,
    # so no retry, and their shard goes straight to them instead of bisecting.
    culprits: tuple[str, ...] = ()

    @property
    def failing(self) -> bool:
        return self.report is not None and any(
            c.outcome in ("failed", "error") for c in self.report.cases
        )


_SUMMARY = re.compile(r"^=+ (?P<body>[^=]*?) in [0-9.]+s(?: \([^)]*\))? =+\s*$", re.MULTILINE)
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)")


def pytest_summary(log_tail: str) -> dict[str, int] | None:
    """Counts from pytest's last summary line (`=== 1 failed, 2 passed in 0.1s ===`)."""
    matches = list(_SUMMARY.finditer(log_tail))
    if not matches:
        return None
    counts: dict[str, int] = {}
    for number, word in _COUNT.findall(matches[-1].group("body")):
        key = {"error": "errors", "warning": "warnings"}.get(word, word)
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def summary_disagreement(summary: dict[str, int], report: Report) -> str | None:
    failed = summary.get("failed", 0)
    if failed != report.failures:
        return f"pytest reported {failed} failed but the report holds {report.failures} failures"
    ran = sum(summary.get(k, 0) for k in ("passed", "failed", "skipped", "xfailed", "xpassed"))
    # pytest counts failed subtests as failed, but passed ones apart ("9 subtests passed") or,
    # in quiet modes, not at all: the plugin's subtest cases may go beyond what it counts.
    if ran > report.tests or ran + summary.get("errors", 0) + report.subtests < report.tests:
        return f"pytest reported {ran} tests run but the report holds {report.tests} test cases"
    return None


_STARTED_FILE = re.compile(r"^(?P<file>[\w./\\-]+\.py)(?:::\S+)? ", re.MULTILINE)


_PLUGIN_MARKER = re.compile(r"^release-ledger: (?P<what>start|end) (?P<file>.+?)\s*$", re.MULTILINE)


def plugin_running_file(log_tail: str, files: Sequence[str]) -> str | None:
    """The file the gate's pytest plugin said it started and did not say it ended, among the
    files run: the exact file that was running when the shard died (None when the log holds
    no such marker, e.g. another runner, or the start fell out of the log's tail; None too
    when several files were running at once, as under pytest-xdist, where which of them
    killed the shard is not known)."""
    running: dict[str, None] = {}  # started and not ended, in order
    for match in _PLUGIN_MARKER.finditer(log_tail):
        file = match.group("file")
        if match.group("what") == "start":
            running[file] = None
        else:
            running.pop(file, None)
    if len(running) != 1:
        return None
    [file] = running
    return file if file in set(files) else None


def last_started_file(log_tail: str, files: Sequence[str]) -> str | None:
    """The last test file pytest's progress output shows starting, among the files run."""
    known = set(files)
    last = None
    for match in _STARTED_FILE.finditer(log_tail):
        if match.group("file") in known:
            last = match.group("file")
    return last


def assess(
    *,
    exit_code: int | None,
    signal: int | None,
    timed_out: bool,
    oom: bool,
    infrastructure_failure: str | None,
    report: bytes | None,
    log_tail: bytes,
    files: Sequence[str],
    infrastructure_detail: str = "",
    kind: str | None = None,
    report_too_large: int | None = None,
) -> Assessment:
    """Judge one attempt from its facts alone (pure: the same facts give the same answer).

    `infrastructure_failure` is the executor's own word for a run it could not finish and
    `kind` its place in the closed vocabulary (`domain.failures`; older events have none).
    `report_too_large` is the size of a report over the limit (`report` is then its head).
    """
    resolved = failure_kind(kind, infrastructure_failure)
    if resolved is not None and infrastructure_failure:
        reason = _KIND_REASONS.get(resolved, JOB_FAILED)
        detail = infrastructure_failure
        if infrastructure_detail:
            detail += f": {infrastructure_detail}"
        return Assessment(False, reason, detail)
    if timed_out:
        return Assessment(False, TIMEOUT, "the shard ran past its timeout and was killed")
    if oom:
        return Assessment(False, OOM, "the shard went over its memory limit and was killed")
    if signal is not None:
        return Assessment(False, SIGNAL, f"the process died of signal {signal}")
    if report_too_large is not None:
        kept = len(report) if report is not None else 0
        return Assessment(
            False,
            REPORT_TOO_LARGE,
            f"the JUnit report is {report_too_large} bytes, over the limit; "
            f"its first {kept} bytes are kept as evidence",
        )
    if report is None:
        return Assessment(False, NO_OUTPUT, f"exit {exit_code} and no JUnit report")
    parsed = read_report(report, expected_files=list(files))
    if isinstance(parsed, Rejection):
        if exit_code == NO_TESTS_COLLECTED and len(files) == 1 and parsed.code == "no-tests":
            # One file, and pytest says it holds no test at this revision (e.g. at base, before
            # its first test was written): an empty measurement, not a culprit.
            return Assessment(True, detail="the file holds no test", report=Report(()))
        named = tuple(f for f in parsed.files if f in set(files))
        return Assessment(False, INCOMPLETE, str(parsed), culprits=named)
    if exit_code == NO_TESTS_COLLECTED and 0 < parsed.tests == parsed.skipped:
        # pytest ran no test because every file skipped itself (a module-level skip, such as
        # `importorskip` of a missing dependency): the skips are the measurement.
        return Assessment(True, detail="every case is skipped", report=parsed)
    if exit_code == NO_TESTS_COLLECTED and parsed.plugin and parsed.tests == parsed.skipped:
        # The gate's plugin accounted for every file and none collected a test to run (e.g.
        # modules `--doctest-modules` collects that hold no doctest): measured, and empty.
        return Assessment(True, detail="no file holds a test to run", report=parsed)
    if exit_code not in (0, 1):
        return Assessment(False, JOB_FAILED, f"exit code {exit_code} is neither 0 nor 1", parsed)
    failing = parsed.failures + parsed.errors
    if exit_code == 0 and failing:
        return Assessment(
            False, UNATTRIBUTED, f"exit 0 but the report holds {failing} failures", parsed
        )
    if exit_code == 1 and not failing:
        return Assessment(False, UNATTRIBUTED, "exit 1 but the report holds no failure", parsed)
    summary = pytest_summary(log_tail.decode("utf-8", "replace"))
    if summary is not None:
        disagreement = summary_disagreement(summary, parsed)
        if disagreement:
            return Assessment(False, UNATTRIBUTED, disagreement, parsed)
    return Assessment(True, report=parsed)


# The stored form of `assessment_to_json` (part of every kept assessment's key).
ASSESSMENT_FORMAT = 1


def assessment_to_json(assessment: Assessment) -> str:
    """An assessment as canonical JSON, report included (`assessment_from_json` reads it
    back equal): what the read models keep by content so a rebuild need not read every
    report again. Only valid under the `READER_VERSION` it was made with."""
    report = assessment.report
    return json.dumps(
        [
            assessment.measured,
            assessment.reason,
            assessment.detail,
            list(assessment.culprits),
            None if report is None else report_to_data(report),
        ],
        separators=(",", ":"),
        ensure_ascii=False,
    )


def assessment_from_json(text: str | bytes) -> Assessment:
    """The assessment `assessment_to_json` wrote; ValueError when the text is not one."""
    try:
        measured, reason, detail, culprits, report = json.loads(text)
        return Assessment(
            bool(measured),
            None if reason is None else str(reason),
            str(detail),
            None if report is None else report_from_data(report),
            tuple(str(f) for f in culprits),
        )
    except (KeyError, TypeError, IndexError, AttributeError) as error:
        raise ValueError(f"not a stored assessment: {error}") from error
