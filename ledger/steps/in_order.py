"""The `in-order` step (issue 37 part 4): files whose failures at both revisions come from
shards that did not run them in the project's own order are run in that order at both
revisions, each revision in one process, every file that precedes them first
(`domain/order.py`), and recorded as `InOrderRecorded`."""

from __future__ import annotations

from release_ledger.domain import events as ev
from release_ledger.domain.observed import in_order_fields, kept
from release_ledger.domain.run_state import RunState
from release_ledger.domain.timing import known_seconds
from release_ledger.ledger.steps.context import StepContext
from release_ledger.ledger.steps.environments import environment_events
from release_ledger.ledger.steps.parallel import run_parallel
from release_ledger.projections.next_step import Step

LABEL = "running in the project's order"


def in_order(ctx: StepContext, state: RunState, step: Step) -> None:
    room = int(max(ctx.options.budget_mb, ctx.options.isolation_budget_mb))
    known = known_seconds(state)
    runs = [
        ctx.alone(f"in-order-{revision}", revision, files, known).model_copy(
            update={"memory_limit_mb": room}
        )
        for revision, files, _ in step.in_order
    ]
    confirms = {revision: judged for revision, _, judged in step.in_order}
    ctx.measuring.prepare(sorted({run.commit for run in runs}))
    ctx.observer.begin(LABEL, len(runs))
    for run, o in run_parallel(ctx, ctx.measuring, runs, LABEL, retry_infrastructure=True):
        k = kept(o, ctx.options.max_report_mb)
        environment, env_artifacts = environment_events(ctx, run, k.observation)
        recorded = ctx.ledger.make(
            ev.InOrderRecorded, ctx.run_id, revision=run.revision, files=list(run.files),
            confirms=list(confirms[run.revision]), **in_order_fields(k),
        )  # fmt: skip
        ctx.ledger.append(
            ctx.run_id, [*environment, recorded], artifacts=k.artifacts | env_artifacts
        )
    ctx.observer.end(LABEL)
