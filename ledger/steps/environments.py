"""`EnvironmentPrepared`, once per revision, machine, key and outcome: what a run's report
says of the environment its tests ran in, recorded beside the run's own event."""

from __future__ import annotations

from release_ledger.domain import events as ev
from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.domain.observed import environment_fields
from release_ledger.ledger.steps.context import StepContext
from release_ledger.projections.timeline import describe


def environment_events(
    ctx: StepContext, run: ShardRun, o: Observation
) -> tuple[list[ev.Event], dict[str, bytes]]:
    """`EnvironmentPrepared` for an environment this run has not recorded yet (once per
    revision, machine, key and outcome), with its package list and log as artifacts."""
    report = o.environment
    if report is None:
        return [], {}
    seen = (run.revision, report.where, report.key, report.status)
    if seen in ctx.environments:
        return [], {}
    ctx.environments.add(seen)
    fields, artifacts = environment_fields(report, run.revision, run.commit)
    event = ctx.ledger.make(ev.EnvironmentPrepared, ctx.run_id, **fields)
    for line in describe(event, {}).splitlines():  # each source tried on a line
        ctx.observer.notice(line)
    for warning in report.warnings:
        ctx.observer.notice(f"warning: {run.revision} environment: {warning}")
    return [event], artifacts
