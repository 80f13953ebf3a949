"""Renderings of one run for people and CI: the HTML page and the head's JUnit file."""

from __future__ import annotations

from pathlib import Path

from release_ledger.adapters.bounded_files import writable_target
from release_ledger.domain.errors import BadInput
from release_ledger.domain.rules import get_rule
from release_ledger.ledger.projection import project, verdict_of
from release_ledger.ledger.service import Ledger
from release_ledger.projections.html_report import html_report
from release_ledger.projections.junit_out import head_junit


def html_page(ledger: Ledger, run_id: str, rule: str | None = None) -> str:
    """The run's self-contained HTML page under `rule` (default: the run's own)."""
    records = ledger.store.read_events(run_id)
    artifacts = ledger.artifacts_for([e for _, e in records])
    started = ledger.started(run_id)
    try:
        return html_report(records, artifacts, get_rule(rule or started.rule).decide)
    except ValueError as error:
        raise BadInput(str(error)) from None


def junit_bytes(ledger: Ledger, run_id: str, rule: str | None = None) -> bytes:
    state = project(ledger, run_id)
    if state.started is None:
        raise BadInput(f"run {run_id} has no RunStarted event")
    return head_junit(state, verdict_of(state, rule))


def writable(path: str, option: str) -> Path:
    """A file path an output may be written to (`ledger/outputs.py`); checked before
    anything is run or written."""
    return writable_target(path, option)
