"""Read-side use cases: list runs, a run's timeline, its status."""

from __future__ import annotations

from typing import Any

from release_ledger.ledger import read_side
from release_ledger.ledger.service import Ledger


def list_runs(
    ledger: Ledger, limit: int | None = read_side.DEFAULT_PAGE, offset: int = 0
) -> list[dict[str, Any]]:
    """A page of runs, newest first, with their status (the ledger's run index)."""
    return read_side.list_runs(ledger, limit, offset)


def run_count(ledger: Ledger) -> int:
    return read_side.run_count(ledger)


def run_reading(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """`ledger show`: the run's timeline (`events`: every event; `grouped`: long runs of one
    kind summarised) and its conclusion under its own rule (`conclusion`, with how much of
    the base was reused; None before tests were discovered), from the reading kept for its
    events or one read of its stream."""
    return read_side.run_reading(ledger, run_id)
