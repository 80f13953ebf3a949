"""The verdict as people and machines read it: one JSON document, one summary."""

from __future__ import annotations

from typing import Any

from domain.run_state import RunState
from domain.verdict import Verdict

EXIT_CODES = {"passed": 0, "failed": 1, "unmeasured": 3, "awaiting": 4, "parked": 4}


def verdict_document(run_id: str, state: RunState, verdict: Verdict) -> dict[str, Any]:
    """The `ledger gate --json` / `ledger verdict --json` shape (sorted keys on output)."""
    started = state.started
    document = verdict.as_dict()
    document.update(
        {
            "run_id": run_id,
            "head": started.head if started else None,
            "base": started.base if started else None,
            "head_ref": started.head_ref if started else None,
            "base_ref": started.base_ref if started else None,
            "baseline_reused": sorted(
                {
                    a.reused_from
                    for s in state.shards.values()
                    for a in s.attempts["base"]
                    if a.reused_from
                }
            ),
            "completed": state.completed,
        }
    )
    return document


def exit_code(status: str) -> int:
    return EXIT_CODES.get(status, 3)
