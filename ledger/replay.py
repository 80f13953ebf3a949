"""Replaying a recorded run under other rules: answers from the ledger alone, never appends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from release_ledger.adapters.gc_pause import gc_paused
from release_ledger.domain.rules import REGISTRY, get_rule

if TYPE_CHECKING:  # the fold and its projections load when a run is replayed, not for `rules`
    from release_ledger.ledger.service import Ledger

__all__ = ["compare_rules", "exit_code", "rules", "verdict_for"]


def exit_code(status: str) -> int:
    from release_ledger.domain.statuses import exit_code as code

    return code(status)


def compare_rules(ledger: Ledger, run_id: str, rule: str | None, compare: str) -> dict[str, Any]:
    """The run's verdict under `rule` (default: its own) and under `compare`, with the tests
    and shards whose classification differs."""
    from release_ledger.ledger.read_side import project, verdict_of
    from release_ledger.projections.rule_comparison import comparison_document

    get_rule(compare)
    if rule is not None:
        get_rule(rule)
    with gc_paused():
        state = project(ledger, run_id)
        first = verdict_of(state, rule)
        second = verdict_of(state, compare)
        return comparison_document(run_id, state, first, second)


def verdict_for(ledger: Ledger, run_id: str, rule: str | None = None) -> dict[str, Any]:
    """The run's verdict document, replayed from its events under `rule`; under its own
    rule, the reading kept for its events when there is one (`ledger.kept_readings`)."""
    from release_ledger.ledger.read_side import project, run_reading, verdict_of

    if rule is None:
        document: dict[str, Any] = run_reading(ledger, run_id)["verdict"]
        return document
    from release_ledger.projections.verdict_view import verdict_document

    with gc_paused():
        state = project(ledger, run_id)
        return verdict_document(run_id, state, verdict_of(state, rule))


def rules() -> list[dict[str, Any]]:
    return [
        {"name": r.name, "version": r.version, "description": r.description}
        for r in sorted(REGISTRY.values(), key=lambda r: r.name)
    ]
