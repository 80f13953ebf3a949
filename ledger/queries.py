"""Read-side use cases: list runs, a run's timeline, its status."""

from __future__ import annotations

from typing import Any

from domain.errors import BrokenRun
from domain.rules import get_rule
from domain.run_state import fold
from ledger.service import Ledger
from projections.status import run_status
from projections.timeline import TimelineGroup, TimelineLine, grouped_timeline, timeline


def list_runs(ledger: Ledger) -> list[dict[str, Any]]:
    rows = []
    for row in ledger.runs():
        try:
            events = ledger.events(row.run_id)
        except BrokenRun:
            events, status = [], "broken"  # `ledger verify` names where
        else:
            status = run_status(events)
        if events and (status == "completed" or any(e.kind == "QuestionAsked" for e in events)):
            state = fold(events, ledger.artifacts_for(events))
            if state.started is not None:
                status = get_rule(state.started.rule).decide(state).status
        rows.append(
            {
                "run_id": row.run_id,
                "started_at": row.started_at,
                "repo": row.repo,
                "head": row.head,
                "base": row.base,
                "head_ref": row.head_ref,
                "base_ref": row.base_ref,
                "status": status,
                "events": row.length,
            }
        )
    return rows


def run_timeline(ledger: Ledger, run_id: str) -> list[TimelineLine]:
    records = ledger.read(run_id)
    events = [r.event for r in records]
    return timeline([(r.position, r.event) for r in records], ledger.artifacts_for(events))


def run_timeline_grouped(ledger: Ledger, run_id: str) -> list[TimelineLine | TimelineGroup]:
    records = ledger.read(run_id)
    events = [r.event for r in records]
    return grouped_timeline([(r.position, r.event) for r in records], ledger.artifacts_for(events))


def run_verdict(ledger: Ledger, run_id: str) -> dict[str, Any] | None:
    """The verdict under the run's own rule, once the run has started (for `ledger show`)."""
    events = ledger.events(run_id)
    state = fold(events, ledger.artifacts_for(events))
    if state.started is None or not state.discovered:
        return None
    return get_rule(state.started.rule).decide(state).as_dict()
