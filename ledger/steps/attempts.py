"""One shard attempt recorded: `ShardAttemptRecorded` (with its content keys, so its results
are cached), the environment it ran in, a pod failure where the machinery broke, and the
files' figures when the gate measures in place."""

from __future__ import annotations

from release_ledger.domain import events as ev
from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.domain.memory import shard_measurements
from release_ledger.domain.observed import (
    attempt_fields,
    is_machine_failure,
    kept,
    pod_failed_fields,
)
from release_ledger.domain.run_state import HEAD, attempt_assessment
from release_ledger.ledger.steps.context import StepContext
from release_ledger.ledger.steps.environments import environment_events
from release_ledger.ledger.steps.keys import attempt_keys, measurement_keys


def record_attempt(ctx: StepContext, run: ShardRun, o: Observation) -> None:
    k = kept(o, ctx.options.max_report_mb)
    o = k.observation
    member = o.member or run.member or ctx.executor.name
    events, env_artifacts = environment_events(ctx, run, o)
    artifacts = k.artifacts | env_artifacts
    # A failure of the machinery on a remote executor is also a fact about its member.
    if is_machine_failure(o) and ctx.capabilities.infrastructure_failures:
        failed = pod_failed_fields(run, o, member)
        events.append(ctx.ledger.make(ev.PodFailed, ctx.run_id, **failed))
    attempt = ctx.ledger.make(
        ev.ShardAttemptRecorded,
        ctx.run_id,
        **attempt_fields(run, k, member),
        **attempt_keys(ctx, run),
    )
    events.append(attempt)
    if k.too_large is None:
        events += _measured_in_place(ctx, run, attempt, artifacts, o.rss_mb)
    ctx.ledger.append(ctx.run_id, events, artifacts=artifacts)


def _measured_in_place(
    ctx: StepContext,
    run: ShardRun,
    attempt: ev.ShardAttemptRecorded,
    artifacts: dict[str, bytes],
    peak_mb: float,
) -> list[ev.Event]:
    """Per-file figures of a head attempt, from the gate's pytest plugin (seconds and the
    memory model's split) or, for other runners, the report's `time` attributes (seconds)
    with the shard's peak shared out: the next plan's measurements, at no extra run. The
    report is read through the fold's memoised assessment (read once for all three)."""
    if run.revision != HEAD or ctx.options.measure != "inplace":
        return []
    report = attempt_assessment(attempt, artifacts).report
    if report is None:
        return []  # nothing trustworthy to learn from a rejected report
    keys = measurement_keys(ctx, run.files)
    events: list[ev.Event] = []
    for file, measured in shard_measurements(report, run.files, peak_mb).items():
        blob, key = keys.get(file, (None, None))
        events.append(
            ctx.ledger.make(
                ev.FileMeasured,
                ctx.run_id,
                file=file,
                rss_mb=measured.rss_mb,
                seconds=measured.seconds,
                empty=measured.empty,
                source="shard",
                shard=run.shard_id,
                attempt=run.attempt,
                commit=run.commit,
                blob=blob,
                key=key,
                **measured.terms,
            )
        )
    return events
