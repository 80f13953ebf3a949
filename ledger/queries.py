"""Read-side use cases: list runs, a run's timeline, its status."""

from __future__ import annotations

from typing import Any

from domain.rules import get_rule
from ledger import read_side
from ledger.service import Ledger
from projections.timeline import TimelineGroup, TimelineLine, grouped_timeline, timeline
from projections.verdict_view import base_reuse


def list_runs(
    ledger: Ledger, limit: int | None = read_side.DEFAULT_PAGE, offset: int = 0
) -> list[dict[str, Any]]:
    """A page of runs, newest first, with their status (the ledger's run index)."""
    return read_side.list_runs(ledger, limit, offset)


def run_count(ledger: Ledger) -> int:
    return read_side.run_count(ledger)


def run_timeline(ledger: Ledger, run_id: str) -> list[TimelineLine]:
    records = ledger.read(run_id)
    events = [r.event for r in records]
    return timeline([(r.position, r.event) for r in records], ledger.artifacts_for(events))


def run_timeline_grouped(ledger: Ledger, run_id: str) -> list[TimelineLine | TimelineGroup]:
    records = ledger.read(run_id)
    events = [r.event for r in records]
    return grouped_timeline([(r.position, r.event) for r in records], ledger.artifacts_for(events))


def run_verdict(ledger: Ledger, run_id: str) -> dict[str, Any] | None:
    """The verdict under the run's own rule, once the run has started (for `ledger show`),
    with how much of the base was measured afresh and how much reused."""
    state = read_side.project(ledger, run_id)
    if state.started is None or not state.discovered:
        return None
    document = get_rule(state.started.rule).decide(state).as_dict()
    document["base_reuse"] = base_reuse(state)
    return document
