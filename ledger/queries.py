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

    records = ledger.read(run_id)
    events = [r.event for r in records]
    return timeline([(r.position, r.event) for r in records], ledger.artifacts_for(events))


def run_timeline_grouped(ledger: Ledger, run_id: str) -> list[TimelineLine | TimelineGroup]:
    from projections.timeline import grouped_timeline

    records = ledger.read(run_id)
    events = [r.event for r in records]
    return grouped_timeline([(r.position, r.event) for r in records], ledger.artifacts_for(events))


def run_verdict(ledger: Ledger, run_id: str) -> dict[str, Any] | None:
    """The verdict under the run's own rule, once the run has started (for `ledger show`),
    with how much of the base was measured afresh and how much reused."""
    from domain.rules import get_rule
    from projections.verdict_view import base_reuse

    state = read_side.project(ledger, run_id)
    if state.started is None or not state.discovered:
        return None
    document = get_rule(state.started.rule).decide(state).as_dict()
    document["base_reuse"] = base_reuse(state)
    return document
