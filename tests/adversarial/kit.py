"""Shared pieces of the adversarial tests: a failed run stored in a ledger, raw edits."""

from __future__ import annotations

from release_ledger.domain.chain import chain_hash
from release_ledger.ledger.service import Ledger
from tests.runbuilder import RunBuilder


def failed_run(ledger: Ledger, run_id: str = "a" * 32) -> str:
    """A completed run whose verdict is `failed` (tests/test_a.py::test_a introduced)."""
    b = RunBuilder(run_id=run_id)
    b.discover(["tests/test_a.py"])
    b.plan({"s1": ["tests/test_a.py"]})
    b.attempt("s1", "head", ["tests/test_a.py"], {"tests/test_a.py::test_a": "failed"})
    b.attempt("s1", "base", ["tests/test_a.py"], {"tests/test_a.py::test_a": "passed"})
    b.isolation("tests/test_a.py", "head", {"tests/test_a.py::test_a": "failed"})
    b.isolation("tests/test_a.py", "base", {"tests/test_a.py::test_a": "passed"})
    from release_ledger.domain import events as ev

    b.add(ev.RunCompleted)
    ledger.append(run_id, b.events, artifacts=b.artifacts)
    return run_id


def ph(ledger: Ledger) -> str:
    return "?" if ledger.store.dialect == "sqlite" else "%s"


def state_at(ledger: Ledger, run: str, position: int) -> bytes:
    p = ph(ledger)
    rows = ledger.store._query(
        f"SELECT state FROM ledger_events WHERE originator_id = {p} AND originator_version = {p}",
        (run, position),
    )
    return bytes(rows[0][0])


def set_state(ledger: Ledger, run: str, position: int, state: bytes) -> None:
    p = ph(ledger)
    ledger.store.execute_raw(
        f"UPDATE ledger_events SET state = {p} WHERE originator_id = {p} "
        f"AND originator_version = {p}",
        (state, run, position),
    )


def rehash_from(ledger: Ledger, run: str, position: int) -> None:
    """Recompute the chain headers from `position` on, as a careful forger would (the run
    index's tip is left alone: that is what still gives the forgery away)."""
    prev = state_at(ledger, run, position - 1).split(b"\n", 1)[0][10:74].decode()
    length = len(ledger.store._query(
        f"SELECT 1 FROM ledger_events WHERE originator_id = {ph(ledger)}", (run,)
    ))  # fmt: skip
    for p in range(position, length + 1):
        payload = state_at(ledger, run, p).split(b"\n", 1)[1]
        digest = chain_hash(prev, payload)
        header = f'{{"hash": "{digest}", "prev": "{prev}"}}'.encode()
        set_state(ledger, run, p, header + b"\n" + payload)
        prev = digest
