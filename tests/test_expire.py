"""`ledger expire`: passed deadlines recorded once, by whoever gets there first, and runs
that can conclude completed; `ledger questions` shows the time left."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from release_ledger.adapters.clock import FixedClock
from release_ledger.domain import events as ev
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.expire import expire
from release_ledger.ledger.service import Ledger
from tests.gatekit import ledger_url, run_ledger
from tests.runbuilder import RunBuilder

A = "tests/test_a.py"
NOW = datetime(2026, 1, 2, tzinfo=UTC)


def awaiting(impact: str, deadline: datetime) -> RunBuilder:
    """A run measured to the end, waiting on one question (flaky: high; unmeasured: critical)."""
    run = RunBuilder().release().discover([A]).plan({"s01": [A]})
    first = run.events[0]
    assert isinstance(first, ev.RunStarted)
    run.events[0] = first.model_copy(update={"options": {"rounds": 0}})
    if impact == "high":
        run.attempt("s01", "head", [A], {f"{A}::t": "failed"})
        run.isolation(A, "head", {f"{A}::t": "passed"})
        run.isolation(A, "base", {f"{A}::t": "passed"})
        qid, topic, options, recommended = "q-flaky-1", "flaky", ["allow", "block"], "allow"
        subject = [f"{A}::t"]
    else:
        run.attempt("s01", "head", [A], None, signal=9)
        qid, topic, options = "q-unmeasured-1", "unmeasured", ["block", "waive-culprits"]
        recommended = "block"
        subject = [A]
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    run.add(ev.QuestionAsked, question_id=qid, topic=topic, text="?", options=options,
            recommended=recommended, impact=impact, deadline=deadline, subject=subject)  # fmt: skip
    return run


def kinds(ledger: Ledger, run_id: str) -> list[str]:
    return [r.event.kind for r in ledger.read(run_id)]


def test_expire_takes_the_recommendation_and_completes_the_run(sqlite_url: str) -> None:
    ledger = open_ledger(sqlite_url, clock=FixedClock(NOW))
    run = awaiting("high", NOW - timedelta(minutes=1))
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    result = expire(ledger)
    assert result["observed"] == 2 and result["concluded"] == [run.run_id]
    assert kinds(ledger, run.run_id)[-3:] == [
        "QuestionExpired", "RecommendationTaken", "RunCompleted",
    ]  # fmt: skip
    length = len(ledger.read(run.run_id))
    again = expire(ledger)
    assert (again["observed"], again["concluded"]) == (0, [])
    assert len(ledger.read(run.run_id)) == length  # idempotent
    ledger.close()


def test_a_critical_question_parks_and_a_deadline_not_passed_is_left(sqlite_url: str) -> None:
    ledger = open_ledger(sqlite_url, clock=FixedClock(NOW))
    parked = awaiting("critical", NOW - timedelta(seconds=1))
    later = RunBuilder(run_id="b" * 32)
    later.events = [e.model_copy(update={"run_id": later.run_id}) for e in
                    awaiting("high", NOW + timedelta(hours=1)).events]  # fmt: skip
    for run in (parked, later):
        ledger.append(
            run.run_id, run.events, artifacts=awaiting("high", NOW).artifacts | run.artifacts
        )
    result = expire(ledger)
    assert kinds(ledger, parked.run_id)[-3:] == [
        "QuestionExpired",
        "QuestionParked",
        "RunCompleted",
    ]
    assert kinds(ledger, later.run_id)[-1] == "QuestionAsked"
    (waiting,) = [r for r in result["runs"] if r["run_id"] == later.run_id]
    assert waiting["note"] == "awaiting the owner: q-flaky-1"
    ledger.close()


def test_concurrent_expires_record_each_deadline_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ledger.db"
    setup = open_ledger(url, clock=FixedClock(NOW))
    runs = [awaiting("high", NOW - timedelta(minutes=5)) for _ in range(3)]
    for index, run in enumerate(runs):
        run.run_id = f"{index + 1}" * 32
        run.events = [e.model_copy(update={"run_id": run.run_id}) for e in run.events]
        setup.append(run.run_id, run.events, artifacts=run.artifacts)
    setup.close()
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def one() -> None:
        ledger = open_ledger(url, clock=FixedClock(NOW))
        try:
            barrier.wait()
            expire(ledger)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)
        finally:
            ledger.close()

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check = open_ledger(url, clock=FixedClock(NOW))
    for run in runs:
        ks = kinds(check, run.run_id)
        assert ks.count("QuestionExpired") == 1 and ks.count("RecommendationTaken") == 1
        assert ks.count("RunCompleted") == 1
    check.close()


def test_cli_expire_and_questions_time_left(tmp_path: Path) -> None:
    led = open_ledger(ledger_url(tmp_path), clock=FixedClock(NOW))
    run = awaiting("high", datetime.now(UTC) + timedelta(minutes=30))
    led.append(run.run_id, run.events, artifacts=run.artifacts)
    led.close()
    listed = run_ledger(tmp_path, "questions")
    assert listed.code == 0 and "m left)" in listed.stdout
    document = run_ledger(tmp_path, "questions", "--json").document
    assert 1700 < document[0]["seconds_left"] <= 1800
    nothing = run_ledger(tmp_path, "expire")
    assert nothing.code == 0 and "no deadline has passed" in nothing.stdout
    assert run_ledger(tmp_path, "expire", "--json").document["observed"] == 0
