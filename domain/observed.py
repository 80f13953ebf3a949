"""What one run of tests left behind, as the fields of the events that record it.

The one place an executor's `Observation` becomes event fields (a shard attempt, a file run
alone, a measurement, a pod failure, a prepared environment) and the keywords `assess` reads,
so no step of the gate copies an observation keyword by keyword. Pure: bytes in, fields and
content-addressed artifacts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from release_ledger.domain.assessment import Assessment, assess
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.events import EnvironmentPrepared
from release_ledger.domain.execution import EnvironmentReport, Observation, ShardRun
from release_ledger.domain.timing import parse_time_limit, time_limit_doubt

REPORT_HEAD_BYTES = 64 * 1024  # what is kept of a report over the limit

# Failure kinds that are the run's own outcome or the gate's doing, never a fact about the
# machine it ran on (every other kind is also recorded as `PodFailed` where the executor says
# its infrastructure fails that way).
_NOT_THE_MACHINE = (None, "cancelled", "unplaced", "env-setup", "checkout-modified")


def bounded(o: Observation, max_report_mb: float) -> tuple[Observation, int | None]:
    """The observation as the gate may keep it: a report over `--max-report-mb` is cut to its
    head (evidence of what it was, never parsed); returns its full size when so."""
    if o.report is None or len(o.report) <= max_report_mb * 1024 * 1024:
        return o, None
    return o.model_copy(update={"report": o.report[:REPORT_HEAD_BYTES]}), len(o.report)


def evidence(o: Observation) -> tuple[dict[str, bytes], str | None, str | None]:
    """The report and log tail as content-addressed artifacts, with their hashes."""
    artifacts: dict[str, bytes] = {}
    report_hash = log_hash = None
    if o.report is not None:
        report_hash = sha256_hex(o.report)
        artifacts[report_hash] = o.report
    if o.log_tail:
        log_hash = sha256_hex(o.log_tail)
        artifacts[log_hash] = o.log_tail
    return artifacts, report_hash, log_hash


def ended(o: Observation, run: ShardRun) -> dict[str, Any]:
    """How a run ended in time, as its event records it: timed out, and when the gate's
    pytest plugin ended it at a file's limit, the test that was running and the limit. A
    time-limit line the supervisor's figures do not bear out is recorded as not believed."""
    killed = parse_time_limit(o.log_tail.decode("utf-8", "replace"), run.files)
    doubt = None
    if killed is not None:
        doubt = time_limit_doubt(killed, exit_code=o.exit_code, signal=o.signal,
                                 seconds=o.seconds, limits=run.file_limits)  # fmt: skip
        if doubt is not None:
            killed = None
    return {
        "timed_out": o.timed_out or killed is not None,
        "killed_test": killed.test if killed else None,
        "time_limit_s": killed.limit_s if killed else None,
        "time_limit_not_believed": doubt,
    }


@dataclass(frozen=True)
class Kept:
    """An observation as it is recorded: its report bounded (`too_large`: the full size of
    one cut to its head) and its evidence as artifacts, referenced by hash."""

    observation: Observation
    too_large: int | None
    artifacts: dict[str, bytes]
    report_hash: str | None
    log_hash: str | None


def kept(o: Observation, max_report_mb: float) -> Kept:
    """`bounded`, then `evidence`: what every run's event is recorded from."""
    o, too_large = bounded(o, max_report_mb)
    artifacts, report_hash, log_hash = evidence(o)
    return Kept(o, too_large, artifacts, report_hash, log_hash)


def run_ended_fields(k: Kept) -> dict[str, Any]:
    """`RunEnded`'s fields (`domain/events/outcome.py`), which every recorded run has: its
    exit, its evidence by hash, its time."""
    o = k.observation
    return {
        "exit_code": o.exit_code,
        "signal": o.signal,
        "timed_out": o.timed_out,
        "report_hash": k.report_hash,
        "log_tail_hash": k.log_hash,
        "seconds": o.seconds,
        "report_too_large": k.too_large,
    }


def outcome_fields(k: Kept, run: ShardRun) -> dict[str, Any]:
    """What a shard attempt and a file run alone both record of how the run went: its end
    at a file's time limit included."""
    o = k.observation
    return {
        **run_ended_fields(k),
        **ended(o, run),
        "oom": o.oom,
        "rss_mb": o.rss_mb,
        "sandbox": o.sandbox,
        "worker": o.worker,
    }


def attempt_fields(run: ShardRun, k: Kept, member: str) -> dict[str, Any]:
    """`ShardAttemptRecorded`'s fields of one shard run (its content keys aside)."""
    o = k.observation
    return {
        "shard": run.shard_id,
        "attempt": run.attempt,
        "revision": run.revision,
        "files": list(run.files),
        "member": member,
        **outcome_fields(k, run),
        "infrastructure_failure": o.failure_reason,
        "infrastructure_detail": o.failure_detail if o.failure_reason else "",
        "failure_kind": o.failure_kind,
        "modified_files": list(o.modified_files),
    }


def isolation_fields(run: ShardRun, k: Kept) -> dict[str, Any]:
    """`IsolationRecorded`'s fields of one file run alone."""
    return {"file": run.files[0], "revision": run.revision, **outcome_fields(k, run)}


def in_order_fields(k: Kept) -> dict[str, Any]:
    """`InOrderRecorded`'s fields of how a run in the project's order went."""
    o = k.observation
    return {
        **run_ended_fields(k),
        "oom": o.oom,
        "rss_mb": o.rss_mb,
        "infrastructure_failure": o.failure_reason,
        "failure_kind": o.failure_kind,
    }


def attribution_fields(k: Kept) -> dict[str, Any]:
    """`AttributionRecorded`'s fields of head's failures run with base's package set: what
    the run did, or, when its environment could not be made, why (and nothing else)."""
    o, environment = k.observation, k.observation.environment
    if environment is not None and environment.status != "ready":
        error = environment.error or "the environment could not be prepared"
        return {"environment_key": environment.key, "environment_error": error}
    return {
        "environment_key": environment.key if environment is not None else "",
        **run_ended_fields(k),
        "failure_kind": o.failure_kind,
        "failure_reason": o.failure_reason,
        "sandbox": o.sandbox,
        "worker": o.worker,
    }


def is_machine_failure(o: Observation) -> bool:
    """The machinery failed under the run (a dropped connection, an evicted pod): on an
    executor whose infrastructure can fail, also a fact about its member (`PodFailed`)."""
    return o.failure_kind not in _NOT_THE_MACHINE


def pod_failed_fields(run: ShardRun, o: Observation, member: str) -> dict[str, Any]:
    """`PodFailed`'s fields: the member and the executor's own word for what failed."""
    return {
        "member": member,
        "shard": run.shard_id,
        "attempt": run.attempt,
        "revision": run.revision,
        "reason": o.failure_reason,
        "detail": o.failure_detail,
        "failure_kind": o.failure_kind,
    }


def assessed_fields(o: Observation) -> dict[str, Any]:
    """The keywords `domain.assessment.assess` reads of an observation not yet recorded."""
    return {
        "exit_code": o.exit_code,
        "signal": o.signal,
        "timed_out": o.timed_out,
        "oom": o.oom,
        "infrastructure_failure": o.failure_reason,
        "infrastructure_detail": o.failure_detail,
        "kind": o.failure_kind,
        "report": o.report,
        "log_tail": o.log_tail,
    }


def assess_observation(
    o: Observation, files: Sequence[str], report_too_large: int | None = None
) -> Assessment:
    """`assess` of what an executor just observed, before it is recorded."""
    return assess(**assessed_fields(o), files=files, report_too_large=report_too_large)


def measurement_failed_fields(
    file: str, o: Observation, reason: str, detail: str
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """`MeasurementFailed`'s fields of a file that could not be measured alone, with its log
    tail as an artifact."""
    tail = {sha256_hex(o.log_tail): o.log_tail} if o.log_tail else {}
    return {
        "file": file,
        "reason": reason,
        "exit_code": o.exit_code,
        "signal": o.signal,
        "rss_mb": o.rss_mb,
        "seconds": o.seconds,
        "log_tail_hash": next(iter(tail), None),
        "infrastructure_failure": o.failure_reason,
        "failure_kind": o.failure_kind,
        "detail": detail,
    }, tail


def measured_fields(file: str, o: Observation, empty: bool) -> dict[str, Any]:
    """`FileMeasured`'s fields of a file measured alone (its keys and memory terms aside)."""
    return {
        "file": file,
        "rss_mb": o.rss_mb,
        "seconds": o.seconds,
        "exit_code": o.exit_code,
        "signal": o.signal,
        "empty": empty,
    }


# The fields an environment's report and its `EnvironmentPrepared` share by name and meaning;
# the rest are kept as artifacts (packages, logs) or counted.
_NOT_COPIED = {"packages", "log_tail", "tried"}


def environment_fields(
    report: EnvironmentReport, revision: str, commit: str
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """`EnvironmentPrepared`'s fields of an environment's report, with its package list and
    logs as artifacts."""
    artifacts: dict[str, bytes] = {}
    packages_hash = log_hash = None
    if report.packages:
        data = report.packages.encode()
        packages_hash = sha256_hex(data)
        artifacts[packages_hash] = data
    if report.status != "ready" and report.log_tail:
        data = report.log_tail.encode("utf-8", "replace")
        log_hash = sha256_hex(data)
        artifacts[log_hash] = data
    tried = []
    for source in report.tried:
        tail_hash = None
        if source.log_tail:
            data = source.log_tail.encode("utf-8", "replace")
            tail_hash = sha256_hex(data)
            artifacts[tail_hash] = data
        tried.append(source.model_dump(exclude={"log_tail"}) | {"log_tail_hash": tail_hash})
    copied = {
        name: getattr(report, name)
        for name in type(report).model_fields
        if name in EnvironmentPrepared.model_fields and name not in _NOT_COPIED
    }
    return copied | {
        "revision": revision,
        "commit": commit,
        "packages_hash": packages_hash,
        "packages": len([line for line in report.packages.splitlines() if line.strip()]),
        "log_tail_hash": log_hash,
        "tried": tried,
    }, artifacts
