"""A run's projected state and verdict, read from the ledger (the read side's one entry).

Kept apart from the gate's process manager so that replaying a verdict imports only what a
replay needs: the ledger, the fold and the rules.
"""

from __future__ import annotations

from domain.rules import get_rule
from domain.run_state import RunState, fold
from domain.verdict import Verdict
from ledger.gc_pause import gc_paused
from ledger.service import Ledger


def project(ledger: Ledger, run_id: str) -> RunState:
    """The run's state from the ledger: its events and the artifacts they reference."""
    with gc_paused():
        records = ledger.store.read_events(run_id)
        return fold(records, ledger.artifacts_for([event for _, event in records]))


def verdict_of(state: RunState, rule: str | None = None) -> Verdict:
    """The verdict under `rule`, or under the rule the run was started with."""
    name = rule or (state.started.rule if state.started else "default")
    return get_rule(name).decide(state)
