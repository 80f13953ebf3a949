"""The `isolate` step: each file with new failures (or ended at its limit) run alone at head
and at base (`IsolationRecorded`): a failure that does not reproduce alone is flaky."""

from __future__ import annotations

from release_ledger.domain import events as ev
from release_ledger.domain.observed import isolation_fields, kept
from release_ledger.domain.run_state import RunState
from release_ledger.domain.timing import known_seconds
from release_ledger.ledger.steps.context import StepContext
from release_ledger.ledger.steps.environments import environment_events
from release_ledger.ledger.steps.parallel import run_parallel
from release_ledger.projections.next_step import Step

LABEL = "isolating new failures"


def isolate(ctx: StepContext, state: RunState, step: Step) -> None:
    known = known_seconds(state)
    runs = [
        ctx.alone(f"isolate-{index}", revision, (file,), known)
        for index, (file, revision) in enumerate(step.isolations)
    ]
    ctx.measuring.prepare(sorted({run.commit for run in runs}))
    ctx.observer.begin(LABEL, len(runs))
    for run, o in run_parallel(ctx, ctx.measuring, runs, LABEL, retry_infrastructure=True):
        k = kept(o, ctx.options.max_report_mb)
        environment, env_artifacts = environment_events(ctx, run, k.observation)
        isolation = ctx.ledger.make(ev.IsolationRecorded, ctx.run_id, **isolation_fields(run, k))
        ctx.ledger.append(
            ctx.run_id, [*environment, isolation], artifacts=k.artifacts | env_artifacts
        )
    ctx.observer.end(LABEL)
