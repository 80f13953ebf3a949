"""Read-side use cases: list runs, a run's timeline, its status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ledger import read_side
from ledger.service import Ledger

if TYPE_CHECKING:
    from projections.timeline import TimelineGroup, TimelineLine


def list_runs(
    ledger: Ledger, limit: int | None = read_side.DEFAULT_PAGE, offset: int = 0
) -> list[dict[str, Any]]:
    """A page of runs, newest first, with their status (the ledger's run index)."""
    return read_side.list_runs(ledger, limit, offset)


def run_count(ledger: Ledger) -> int:
    return read_side.run_count(ledger)


def run_timeline(ledger: Ledger, run_id: str) -> list[TimelineLine]:
    from projections.timeline import timeline

    records = ledger.store.read_events(run_id)
    return timeline(records, ledger.artifacts_for([e for _, e in records]))


def run_timeline_grouped(ledger: Ledger, run_id: str) -> list[TimelineLine | TimelineGroup]:
    return run_story(ledger, run_id, grouped=True)[0]


def run_story(
    ledger: Ledger, run_id: str, *, grouped: bool
) -> tuple[list[TimelineLine | TimelineGroup], dict[str, Any] | None]:
    """`ledger show`: the run's timeline and its verdict (with how much of the base was
    reused), from one read of its stream."""
    from domain.rules import get_rule
    from domain.run_state import fold
    from ledger.gc_pause import gc_paused
    from projections.timeline import grouped_timeline, timeline
    from projections.verdict_view import base_reuse

    with gc_paused():
        records = ledger.store.read_events(run_id)
        artifacts = ledger.artifacts_for([e for _, e in records])
        lines: list[TimelineLine | TimelineGroup] = (
            grouped_timeline(records, artifacts) if grouped else list(timeline(records, artifacts))
        )
        state = fold(records, artifacts)
        if state.started is None or not state.discovered:
            return lines, None
        document = get_rule(state.started.rule).decide(state).as_dict()
        document["base_reuse"] = base_reuse(state)
        return lines, document


def run_verdict(ledger: Ledger, run_id: str) -> dict[str, Any] | None:
    """The verdict under the run's own rule, once the run has started (for `ledger show`),
    with how much of the base was measured afresh and how much reused."""
    return run_story(ledger, run_id, grouped=False)[1]
