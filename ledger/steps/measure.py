"""The `measure` step (solo modes): each file alone at head before the plan, its peak memory
and seconds recorded (`FileMeasured`), or why it could not be (`MeasurementFailed`);
measurements of the same content from earlier runs are reused instead."""

from __future__ import annotations

from release_ledger.domain import events as ev
from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.domain.memory import file_terms
from release_ledger.domain.observed import (
    assess_observation,
    bounded,
    measured_fields,
    measurement_failed_fields,
)
from release_ledger.domain.run_state import NO_TESTS_COLLECTED, RunState
from release_ledger.ledger.steps.context import StepContext
from release_ledger.ledger.steps.environments import environment_events
from release_ledger.ledger.steps.keys import measurement_keys
from release_ledger.ledger.steps.parallel import run_parallel
from release_ledger.ledger.steps.reuse import reuse_measurements
from release_ledger.projections.next_step import Step

LABEL = "measuring files"


def measure(ctx: StepContext, state: RunState, step: Step) -> None:
    files = list(step.files)
    if ctx.options.measure != "always":
        reused = reuse_measurements(ctx, files)
        if reused:
            ctx.ledger.append(ctx.run_id, reused)
            ctx.observer.notice(f"reused {len(reused)} measurements from earlier runs")
            done = {e.file for e in reused if isinstance(e, ev.MeasurementReused)}
            files = [f for f in files if f not in done]
    if not files or ctx.options.measure == "never":
        return
    requests = [
        ShardRun(
            run_id=ctx.run_id,
            shard_id=f"measure-{index}",
            attempt=1,
            revision="head",
            commit=ctx.started.head,
            files=(file,),
            command=tuple(ctx.started.command),
            timeout_s=ctx.options.timeout_s,
            memory_limit_mb=int(ctx.options.isolation_budget_mb),  # a file alone
        )
        for index, file in enumerate(files)
    ]
    ctx.measuring.prepare([ctx.started.head])
    ctx.observer.begin(LABEL, len(requests))
    for request, observation in run_parallel(ctx, ctx.measuring, requests, LABEL):
        if observation.failure_kind == "cancelled":
            continue  # interrupted: measured again on resume
        record_measurement(ctx, request, observation)
    ctx.observer.end(LABEL)


def record_measurement(ctx: StepContext, run: ShardRun, o: Observation) -> None:
    file = run.files[0]
    o, too_large = bounded(o, ctx.options.max_report_mb)
    assessment = assess_observation(o, [file], too_large)
    # A file that holds no test is measured all the same (the plan leaves it out: a shard
    # report could never cover it).
    empty = o.exit_code == NO_TESTS_COLLECTED and o.signal is None
    empty = empty and not (o.timed_out or o.oom)
    # A file that only skips itself (module-level `importorskip`) exits 5 too, but its
    # report holds the skip: it is measured and planned like any file, so its tests can
    # be seen lost at head.
    report = assessment.report
    skipped_only = empty and report is not None and report.tests > 0
    empty = empty and not skipped_only
    dies = too_large is not None or (
        not empty
        and not skipped_only
        and (
            o.timed_out
            or o.oom
            or o.signal is not None
            or o.report is None
            or o.exit_code not in (0, 1)
            or o.failure_kind is not None
        )
    )
    environment, artifacts = environment_events(ctx, run, o)
    if dies:
        reason = assessment.reason or "job-failed"
        fields, tail = measurement_failed_fields(file, o, reason, assessment.detail)
        failed = ctx.ledger.make(ev.MeasurementFailed, ctx.run_id, **fields)
        ctx.ledger.append(ctx.run_id, [*environment, failed], artifacts=artifacts | tail)
        return
    blob, key = measurement_keys(ctx, [file]).get(file, (None, None))
    split: dict[str, float | None] = {}
    if report is not None and report.plugin and file in report.figures:
        split = file_terms(report, file, first=True)  # alone: its process's first
    measured = ctx.ledger.make(
        ev.FileMeasured,
        ctx.run_id,
        **measured_fields(file, o, empty),
        commit=ctx.started.head,
        blob=blob,
        key=key,
        baseline_mb=split.get("baseline_mb"),
        retained_mb=split.get("retained_mb"),
        transient_mb=split.get("transient_mb"),
        shared_mb=split.get("shared_mb"),
        ceiling_mb=split.get("ceiling_mb"),
    )
    ctx.ledger.append(ctx.run_id, [*environment, measured], artifacts=artifacts)
