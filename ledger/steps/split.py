"""The `split` step: shards still unmeasured after their rounds are split (`ShardSplit`), the
files the evidence names each alone, otherwise in halves (`projections/next_step.py`)."""

from __future__ import annotations

from release_ledger.domain import events as ev
from release_ledger.domain.run_state import RunState
from release_ledger.ledger.steps.context import StepContext
from release_ledger.projections.next_step import Step


def split(ctx: StepContext, state: RunState, step: Step) -> None:
    events: list[ev.Event] = [
        ctx.ledger.make(
            ev.ShardSplit,
            ctx.run_id,
            parent=s.parent,
            children=[ev.ChildShard(id=cid, files=list(files)) for cid, files in s.children],
            reason=s.reason,
        )
        for s in step.splits
    ]
    ctx.ledger.append(ctx.run_id, events)
    ctx.observer.notice("bisecting " + ", ".join(f"{s.parent} ({s.reason})" for s in step.splits))
