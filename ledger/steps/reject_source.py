"""The `reject-source` step (issue 37 part 5): every shard of a revision stopped before running
a test in the environment a declared source made (`domain/unrunnable.py`): `SourceRejected`
records it with a shard's log tail and the line that says why; the revision's shards then run
again with the next declared source (`ShardRun.skip_sources`, from `skipped_sources`)."""

from __future__ import annotations

from release_ledger.domain import events as ev
from release_ledger.domain.run_state import RunState
from release_ledger.domain.unrunnable import Unrunnable, error_line
from release_ledger.ledger.service import Ledger
from release_ledger.ledger.steps.context import StepContext
from release_ledger.projections.next_step import Step


def reject(ctx: StepContext, state: RunState, step: Step) -> None:
    """No test ran at a revision in its declared source: record it, so its shards run
    again in the next source."""
    assert step.rejection is not None
    u = step.rejection
    line = reject_source(ctx.ledger, ctx.run_id, ctx.commit(u.revision), u)
    ctx.observer.notice(
        f"{u.revision}: no test ran in {u.source} ({u.reason}{': ' + line if line else ''});"
        " trying the next declared source"
    )


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
        reused_dropped=list(rejection.reused),
    )  # fmt: skip
    return line
