"""The ledger's own indexes answer exactly what a fold of every run would, and are rebuilt
from the events alone: the run list's status, open questions, run-id prefixes."""

from __future__ import annotations

import random
from typing import Any

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.errors import BadInput, BrokenRun
from release_ledger.domain.rules import get_rule
from release_ledger.domain.run_state import fold
from release_ledger.ledger import owner, read_side
from release_ledger.ledger.service import Ledger
from release_ledger.projections.status import run_status
from tests.ledgerkit import open_ledger
from tests.synthetic_runs import synthetic_run


def _fill(ledger: Ledger) -> list[str]:
    rng = random.Random(11)
    ids = []
    for index in range(14):
        run = synthetic_run(rng, f"{index:02x}" * 16, files=4, questions=2,
                            rule=("strict", "default", "zero-failures")[index % 3],
                            complete=index % 5 != 0)  # fmt: skip
        ledger.append(run.run_id, run.events, artifacts=run.artifacts)
        ids.append(run.run_id)
    ledger.record(ids[1], ev.RunInterrupted, reason="test")
    return ids


def _folded_status(ledger: Ledger, run_id: str) -> str:
    """The run list's status as it was computed before the index: a fold of the run."""
    try:
        events = ledger.events(run_id)
    except BrokenRun:
        return "broken"
    status = run_status(events)
    if status == "completed" or any(e.kind == "QuestionAsked" for e in events):
        state = fold(events, ledger.artifacts_for(events))
        if state.started is not None:
            status = get_rule(state.started.rule).decide(state).status
    return status


def _folded_questions(ledger: Ledger) -> list[dict[str, Any]]:
    found = []
    for row in ledger.runs():
        found += owner.pending_questions(ledger, row.run_id)
    found.sort(key=lambda d: (d["asked_at"], d["run_id"], d["position"]), reverse=True)
    return found


def test_the_run_list_and_the_questions_equal_a_fold_of_every_run(ledger_url: str) -> None:
    ledger = open_ledger(ledger_url)
    try:
        ids = _fill(ledger)
        listed = read_side.list_runs(ledger, None)
        assert sorted(r["run_id"] for r in listed) == sorted(ids)
        for row in listed:
            assert row["status"] == _folded_status(ledger, row["run_id"]), row
        indexed = owner.pending_questions(ledger)
        assert indexed == _folded_questions(ledger)
        assert indexed  # the synthetic runs leave some undecided
        # An answer takes its question off the list at once.
        q = indexed[0]
        owner.answer(ledger, q["run_id"], q["id"], q["options"][0]["name"], "owner")
        assert owner.pending_questions(ledger) == _folded_questions(ledger)
        assert q["id"] not in {
            (d["id"]) for d in owner.pending_questions(ledger) if d["run_id"] == q["run_id"]
        }
        page = read_side.list_runs(ledger, 5, 3)
        assert [r["run_id"] for r in page] == [r["run_id"] for r in listed[3:8]]
    finally:
        ledger.close()


def test_a_reindex_from_the_events_gives_the_maintained_rows(ledger_url: str) -> None:
    ledger = open_ledger(ledger_url)
    try:
        _fill(ledger)
        maintained = list(ledger.store.index_rows())
        ledger.reindex()
        assert list(ledger.store.index_rows()) == maintained
    finally:
        ledger.close()


def test_a_ledger_from_before_the_indexes_is_indexed_when_opened(sqlite_url: str) -> None:
    ledger = open_ledger(sqlite_url)
    try:
        ids = _fill(ledger)
        maintained = list(ledger.store.index_rows())
        for table in ("ledger_index", "ledger_questions", "ledger_status"):
            ledger.store.execute_raw(f"DELETE FROM {table}")
        ledger.store.execute_raw("DELETE FROM ledger_meta WHERE key = 'index_format'")
    finally:
        ledger.close()
    again = open_ledger(sqlite_url)
    try:
        assert list(again.store.index_rows()) == maintained
        assert len(read_side.list_runs(again, None)) == len(ids)
    finally:
        again.close()


def test_run_prefixes_resolve_by_range(sqlite_url: str) -> None:
    ledger = open_ledger(sqlite_url)
    try:
        for run_id in ("ab" * 16, "abc" + "0" * 29, "cd" * 16):
            ledger.record(run_id, ev.RunCompleted)
        assert ledger.resolve("cd") == "cd" * 16
        assert ledger.resolve("abab") == "ab" * 16
        with pytest.raises(BadInput, match="ambiguous: 2 runs"):
            ledger.resolve("ab")
        with pytest.raises(BadInput, match="unknown run"):
            ledger.resolve("ef")
    finally:
        ledger.close()


def test_a_read_only_ledger_from_before_the_indexes_still_lists_by_folding(
    sqlite_url: str,
) -> None:
    ledger = open_ledger(sqlite_url)
    try:
        _fill(ledger)
        expected = read_side.list_runs(ledger, None)
        questions = owner.pending_questions(ledger)
        ledger.store.execute_raw("DELETE FROM ledger_meta WHERE key = 'index_format'")
    finally:
        ledger.close()
    again = open_ledger(sqlite_url)
    try:
        again.store.execute_raw("DELETE FROM ledger_meta WHERE key = 'index_format'")
        again.store.set_index_format = _refuse  # type: ignore[method-assign]
        again.indexed = True
        again.ensure_indexed()
        assert not again.indexed
        assert read_side.list_runs(again, None) == expected
        assert owner.pending_questions(again) == questions
    finally:
        again.close()


def _refuse(value: str) -> None:
    raise PermissionError("read-only")
