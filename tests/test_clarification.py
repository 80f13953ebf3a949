"""The clarification policy: candidate validation, assume/ask/defer under a budget, candidates
derived from a run, deadlines observed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from release_ledger.domain import events as ev
from release_ledger.domain.clarification import (
    DEFAULT_BUDGET,
    Candidate,
    candidates,
    decide,
    overdue,
    plan,
    waiting_on,
)
from release_ledger.domain.rules import get_rule
from release_ledger.domain.run_state import fold
from tests.runbuilder import RunBuilder

A, B, K = "tests/test_a.py", "tests/test_b.py", "tests/test_kill.py"


def candidate(impact: str = "high", qid: str = "q-x-1", **kw: object) -> Candidate:
    fields: dict[str, object] = {
        "id": qid,
        "topic": "x",
        "text": "which?",
        "options": ("yes", "no"),
        "recommended": "yes",
        "impact": impact,
    }
    fields.update(kw)
    return Candidate(**fields)  # type: ignore[arg-type]


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"options": ("only",)},
        {"options": ("a", "b", "c", "d", "e"), "recommended": "a"},
        {"options": ("a", "a"), "recommended": "a"},
        {"options": ("a", ""), "recommended": "a"},
        {"options": ["a", "b"], "recommended": "a"},
        {"recommended": "maybe"},
        {"impact": "medium"},
        {"id": ""},
        {"text": "  "},
        {"topic": ""},
    ],
)
def test_malformed_question_raises_at_once(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        candidate(**bad)  # type: ignore[arg-type]


def test_two_to_four_distinct_options_with_one_recommended_are_accepted() -> None:
    for n in (2, 3, 4):
        options = tuple(f"o{i}" for i in range(n))
        assert candidate(options=options, recommended="o1").options == options


# --- policy invariants ---------------------------------------------------------------------------

impacts = st.sampled_from(["low", "high", "critical"])
option_sets = st.lists(
    st.text(alphabet="abcdefgh-", min_size=1, max_size=6), min_size=2, max_size=4, unique=True
)


@st.composite
def candidates_st(draw: st.DrawFn) -> Candidate:
    options = tuple(draw(option_sets))
    return Candidate(
        id=f"q-{draw(st.integers(0, 10_000))}",
        topic=draw(st.sampled_from(["unmeasured", "flaky", "new-test-file"])),
        text="t",
        options=options,
        recommended=draw(st.sampled_from(options)),
        impact=draw(impacts),
    )


@given(
    st.lists(candidates_st(), max_size=12, unique_by=lambda c: c.id),
    st.integers(0, 5),
    st.integers(0, 6),
)
def test_policy_invariants(cands: list[Candidate], asked: int, budget: int) -> None:
    decisions = plan(cands, asked=asked, budget=budget)
    assert sorted(d.candidate.id for d in decisions) == sorted(c.id for c in cands)
    asks = [d for d in decisions if d.action == "ask"]
    # never beyond the budget
    assert asked + len(asks) <= max(budget, asked)
    for d in decisions:
        # low impact is never asked; a critical answer is never assumed
        if d.candidate.impact == "low":
            assert d.action == "assume"
        if d.candidate.impact == "critical":
            assert d.action in ("ask", "defer")
        if d.candidate.impact == "high":
            assert d.action in ("ask", "assume")
        assert d.reason
    # the budget goes to the most important first
    rank = {"critical": 0, "high": 1, "low": 2}
    if asks:
        worst_asked = max(rank[d.candidate.impact] for d in asks)
        for d in decisions:
            if d.action != "ask" and d.candidate.impact != "low":
                assert rank[d.candidate.impact] >= worst_asked
    # while budget is left, nothing but low questions is assumed or deferred
    if asked + len([c for c in cands if c.impact != "low"]) <= budget:
        assert all(d.action == "ask" for d in decisions if d.candidate.impact != "low")
    # deterministic, whatever the order the candidates come in
    assert plan(list(reversed(cands)), asked=asked, budget=budget) == decisions


def test_budget_exhausted_high_is_assumed_critical_deferred() -> None:
    assert decide(candidate("high"), asked=3, budget=3).action == "assume"
    assert decide(candidate("critical"), asked=3, budget=3).action == "defer"
    assert decide(candidate("critical"), asked=2, budget=3).action == "ask"
    assert decide(candidate("low"), asked=0, budget=3).action == "assume"
    assert DEFAULT_BUDGET == 3


def test_negative_budget_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        decide(candidate(), asked=0, budget=-1)


# --- where the gate asks -------------------------------------------------------------------------


def derived(run: RunBuilder) -> list[Candidate]:
    state = fold(run.events, run.artifacts)
    return candidates(state, get_rule("default").decide(state))


def test_unmeasured_culprits_make_one_critical_question_about_them() -> None:
    run = RunBuilder().discover([A, K]).plan({"s01": [A], "s02": [K]})
    run.attempt("s01", "head", [A], {f"{A}::t": "passed"})
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    run.attempt("s02", "head", [K], None, signal=9)
    run.attempt("s02", "base", [K], {f"{K}::t": "passed"})
    (q,) = derived(run)
    assert (q.id, q.topic, q.impact, q.subject) == (
        "q-unmeasured-1",
        "unmeasured",
        "critical",
        (K,),
    )
    assert q.options == ("block", "waive-culprits") and q.recommended == "block"


def test_flaky_failures_make_a_high_question_and_new_files_a_low_one() -> None:
    run = RunBuilder().discover([A, B], missing_at_base=[B]).plan({"s01": [A, B]})
    run.attempt("s01", "head", [A, B], {f"{A}::t": "failed", f"{B}::n": "passed"})
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    run.isolation(A, "head", {f"{A}::t": "passed"})
    run.isolation(A, "base", {f"{A}::t": "passed"})
    found = {q.id: q for q in derived(run)}
    assert set(found) == {"q-flaky-1", "q-new-test-file-1"}
    assert found["q-flaky-1"].impact == "high" and found["q-flaky-1"].subject == (f"{A}::t",)
    assert found["q-flaky-1"].recommended == "allow"
    assert found["q-new-test-file-1"].impact == "low"
    assert found["q-new-test-file-1"].subject == (B,)
    assert found["q-new-test-file-1"].recommended == "new-test"


def test_a_question_already_put_is_not_derived_again() -> None:
    run = RunBuilder().discover([A], missing_at_base=[A]).plan({"s01": [A]})
    run.attempt("s01", "head", [A], {f"{A}::t": "passed"})
    assert [q.id for q in derived(run)] == ["q-new-test-file-1"]
    run.add(
        ev.AssumptionMade,
        question_id="q-new-test-file-1",
        topic="new-test-file",
        text="t",
        options=["new-test", "renamed-or-moved"],
        choice="new-test",
        impact="low",
        reason="low",
        subject=[A],
    )
    assert derived(run) == []


def test_clean_run_raises_no_question() -> None:
    run = RunBuilder().discover([A]).plan({"s01": [A]})
    run.attempt("s01", "head", [A], {f"{A}::t": "passed"})
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    assert derived(run) == []


# --- deadlines -----------------------------------------------------------------------------------


def test_overdue_questions_at_a_given_time() -> None:
    run = RunBuilder()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for qid, minutes in (("q-a-1", 1), ("q-b-1", 10)):
        run.add(
            ev.QuestionAsked,
            question_id=qid,
            topic="flaky",
            text="t",
            options=["allow", "block"],
            recommended="allow",
            impact="high",
            deadline=t0 + timedelta(minutes=minutes),
        )
    state = fold(run.events, {})
    assert [q.id for q in waiting_on(state)] == ["q-a-1", "q-b-1"]
    assert overdue(state, t0) == []
    assert [q.id for q in overdue(state, t0 + timedelta(minutes=5))] == ["q-a-1"]
    assert [q.id for q in overdue(state, t0 + timedelta(minutes=10))] == ["q-a-1", "q-b-1"]
