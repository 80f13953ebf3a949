"""The gate's confirmations before it concludes (issue 37, parts 4 and 5).

- `reject_source`: every shard of a revision stopped before running a test in the
  environment a declared source made (`domain/unrunnable.py`): `SourceRejected` records it
  with a shard's log tail and the line that says why; the revision's shards then run again
  with the next declared source (`ShardRun.skip_sources`, from `skipped_sources`).
- `run_in_order`: files whose failures at both revisions come from shards that did not run
  them in the project's own order are run in that order at both revisions, each revision in
  one process (`domain/order.py`), and recorded as `InOrderRecorded`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from release_ledger.domain import events as ev
from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.domain.run_state import RunState
from release_ledger.domain.unrunnable import Unrunnable, error_line
from release_ledger.ledger.service import Ledger


def skipped_sources(state: RunState, revision: str) -> tuple[tuple[str, str], ...]:
    """The declared sources rejected at `revision`, with why, for the executor to pass by."""
    return tuple(
        (r.source, f"installed, but no test could run in it ({r.reason}: {r.error or 'see log'})")
        for r in state.rejected_sources.get(revision, [])
    )


def reject_source(ledger: Ledger, run_id: str, commit: str, rejection: Unrunnable) -> str:
    """Record the rejected source; returns the line it was rejected for."""
    log = ledger.artifact(rejection.log_tail_hash) if rejection.log_tail_hash else None
    line = error_line(log.decode("utf-8", "replace")) if log else ""
    ledger.record(
        run_id, ev.SourceRejected, revision=rejection.revision, commit=commit,
        where=rejection.where, source=rejection.source, detail=rejection.detail,
        key=rejection.key, reason=rejection.reason, error=line,
        log_tail_hash=rejection.log_tail_hash, stopped_shards=list(rejection.shards),
    )  # fmt: skip
    return line


Evidence = Callable[[Observation], tuple[dict[str, bytes], str | None, str | None]]
Environments = Callable[[ShardRun, Observation], tuple[list[ev.Event], dict[str, bytes]]]


def record_in_order(
    ledger: Ledger,
    run_id: str,
    results: Iterator[tuple[ShardRun, Observation]],
    confirms: dict[str, Sequence[str]],
    *,
    bounded: Callable[[Observation], tuple[Observation, int | None]],
    evidence: Evidence,
    environments: Environments,
) -> None:
    """Append each in-order run's result as it lands (`confirms`: by revision, the files it
    judges), with the environment it ran in when not recorded yet."""
    for run, observation in results:
        o, too_large = bounded(observation)
        artifacts, report_hash, log_hash = evidence(o)
        environment, env_artifacts = environments(run, o)
        fields: dict[str, Any] = {
            "exit_code": o.exit_code, "signal": o.signal, "timed_out": o.timed_out,
            "report_hash": report_hash, "log_tail_hash": log_hash, "seconds": o.seconds,
            "report_too_large": too_large, "oom": o.oom, "rss_mb": o.rss_mb,
            "infrastructure_failure": o.failure_reason, "failure_kind": o.failure_kind,
        }  # fmt: skip
        recorded = ledger.make(
            ev.InOrderRecorded, run_id, revision=run.revision, files=list(run.files),
            confirms=list(confirms[run.revision]), **fields,
        )  # fmt: skip
        ledger.append(run_id, [*environment, recorded], artifacts=artifacts | env_artifacts)
