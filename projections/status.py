"""A run's lifecycle status, folded from its events."""

from __future__ import annotations

from collections.abc import Sequence

from release_ledger.domain import events as ev


def run_status(events: Sequence[ev.Event]) -> str:
    """`running`, `interrupted` or `completed` from the lifecycle events alone."""
    status = "running"
    for event in events:
        if isinstance(event, ev.RunInterrupted):
            status = "interrupted"
        elif isinstance(event, ev.RunResumed):
            status = "running"
        elif isinstance(event, ev.RunCompleted):
            status = "completed"
    return status
