"""Approval report, checks, answers and audit over hand-built runs (fast; no gate is run)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from release_ledger.adapters.clock import FixedClock
from release_ledger.domain import events as ev
from release_ledger.domain.errors import BadInput
from release_ledger.domain.rules import REGISTRY, Rule, get_rule
from release_ledger.domain.verdict import Policy, judge
from release_ledger.ledger import owner
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.service import Ledger
from release_ledger.projections.approval import (
    approval_report,
    outcome_of,
    pin_satisfied,
    render_rollback,
)
from tests.gatekit import ledger_url, run_ledger
from tests.runbuilder import RunBuilder

A, K = "tests/test_a.py", "tests/test_kill.py"
OTHER = "tests/test_other.py"
NOW = datetime(2026, 1, 2, tzinfo=UTC)


def gate_run(kind: str) -> RunBuilder:
    """A run whose gate metric is pass, fail or unmeasured."""
    run = RunBuilder().release().release_files().discover([A]).plan({"s01": [A]})
    if kind == "pass":
        run.attempt("s01", "head", [A], {f"{A}::t": "passed"})
    elif kind == "fail":
        run.attempt("s01", "head", [A], {f"{A}::t": "failed"})
        run.isolation(A, "head", {f"{A}::t": "failed"})
        run.isolation(A, "base", {f"{A}::t": "passed"})
    else:
        run.attempt("s01", "head", [A], None, signal=9)
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    return run


def waivable_run() -> RunBuilder:
    """A dead shard of file A beside a measured one: waiving A leaves a measured gate."""
    run = RunBuilder().discover([A, OTHER]).plan({"s01": [A], "s02": [OTHER]})
    run.attempt("s01", "head", [A], None, signal=9)
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    run.attempt("s02", "head", [OTHER], {f"{OTHER}::t": "passed"})
    run.attempt("s02", "base", [OTHER], {f"{OTHER}::t": "passed"})
    return run


def pinned(run: RunBuilder, version: str, pin: str | None) -> RunBuilder:
    first = run.events[0]
    assert isinstance(first, ev.RunStarted)
    run.events[0] = first.model_copy(update={"python_version": version, "runtime_pin": pin})
    return run


def positioned(run: RunBuilder) -> list[tuple[int, ev.Event]]:
    return list(enumerate(run.events, start=1))


def report_of(run: RunBuilder, required: tuple[str, ...] = (), rule: str = "default"):  # type: ignore[no-untyped-def]
    return approval_report(positioned(run), run.artifacts, get_rule(rule).decide, required=required)


@pytest.fixture
def ledger(sqlite_url: str) -> Ledger:
    led = open_ledger(sqlite_url, clock=FixedClock(NOW))
    yield led  # type: ignore[misc]
    led.close()


def stored(ledger: Ledger, run: RunBuilder) -> str:
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    return run.run_id


# --- outcomes ------------------------------------------------------------------------------------

PINS = {"pass": ("3.11.7", ">=3.11"), "fail": ("3.11.7", ">=3.12"), "unmeasured": ("3.11.7", None)}


@pytest.mark.parametrize(
    "gate,pin,check", list(itertools.product(PINS, PINS, ["pass", "fail", "unmeasured", "missing"]))
)
def test_outcome_for_every_mix_of_metric_verdicts(gate: str, pin: str, check: str) -> None:
    run = pinned(gate_run(gate), *PINS[pin])
    if check != "missing":
        run.add(ev.CheckRecorded, name="docs", verdict=check, value="v", by="ci")
    report = report_of(run, required=("docs",))
    verdicts = {m.name: m.verdict for m in report.metrics}
    assert verdicts == {
        "gate": gate,
        "runtime-pin": pin,
        "dependencies": "pass",
        "distributions": "pass",
        "upgrade": "pass",
        "changelog": "pass",
        "docs": "unmeasured" if check == "missing" else check,
    }
    everything = [gate, pin, "unmeasured" if check == "missing" else check]
    expected = (
        "failed"
        if "fail" in everything
        else ("ok" if set(everything) == {"pass"} else "unmeasured")
    )
    assert report.outcome == expected
    assert report.exit_code == {"ok": 0, "failed": 1, "unmeasured": 3}[expected]
    assert report.as_dict()["report_sha256"] == report.sha256


def test_outcome_of() -> None:
    assert outcome_of([]) == "ok"
    assert outcome_of(["pass", "pass"]) == "ok"
    assert outcome_of(["pass", "unmeasured"]) == "unmeasured"
    assert outcome_of(["unmeasured", "fail"]) == "failed"


def test_missing_required_check_is_unmeasured_with_value_missing() -> None:
    report = report_of(pinned(gate_run("pass"), "3.11.7", "3.11"), required=("docs",))
    (missing,) = [m for m in report.metrics if m.name == "docs"]
    assert (missing.value, missing.verdict, missing.events) == ("missing", "unmeasured", ())
    assert report.outcome == "unmeasured"


def test_a_later_check_supersedes_and_both_stay() -> None:
    run = pinned(gate_run("pass"), "3.11.7", "3.11")
    run.add(ev.CheckRecorded, name="docs", verdict="fail", value="broken link")
    run.add(ev.CheckRecorded, name="docs", verdict="pass", value="published")
    report = report_of(run)
    (docs,) = [m for m in report.metrics if m.name == "docs"]
    assert (docs.value, docs.verdict) == ("published", "pass")
    assert [d.position for d in docs.events] == [len(run.events)]
    assert f"supersedes the check at position {len(run.events) - 1}" in docs.why
    assert report.outcome == "ok"


# --- the report ----------------------------------------------------------------------------------


def test_format_1_markdown_table_why_and_rollback() -> None:
    run = pinned(gate_run("unmeasured"), "3.11.7", ">=3.11")
    run.add(ev.CheckRecorded, name="docs", verdict="pass", value="published")
    report = approval_report(
        positioned(run),
        run.artifacts,
        get_rule("default").decide,
        rollback_template="helm rollback web {base_ref} (run {run_id}, {unknown})",
        report_format=1,
    )
    md = report.markdown
    assert "| # | metric | value | verdict |" in md
    assert "| 1 | gate | unmeasured | unmeasured |" in md
    assert "| 2 | docs | published | pass |" in md
    assert "| 3 | runtime-pin | python 3.11.7 against >=3.11 | pass |" in md
    assert "## Why" in md and "ShardAttemptRecorded at 2026-01-01T" in md
    assert "s01 at head: unmeasured" in md
    assert f"helm rollback web v1 (run {run.run_id}, {{unknown}})" in md
    default = approval_report(
        positioned(run), run.artifacts, get_rule("default").decide, report_format=1
    ).markdown
    assert "previous release `v1`" in default


def test_report_is_byte_identical_on_rederivation() -> None:
    run = pinned(gate_run("fail"), "3.11.7", "3.11")
    run.add(ev.CheckRecorded, name="docs", verdict="pass", value="published")
    first, second = report_of(run, ("docs", "changelog")), report_of(run, ("changelog", "docs"))
    assert first.markdown == second.markdown and first.sha256 == second.sha256
    assert first.as_dict() == second.as_dict()


def test_report_ignores_earlier_approvals() -> None:
    run = pinned(gate_run("pass"), "3.11.7", "3.11")
    before = report_of(run)
    run.add(ev.ApprovalIssued, outcome="ok", rule="default", report_sha256="0" * 64)
    after = approval_report(positioned(run)[:-1], run.artifacts, get_rule("default").decide)
    assert before.sha256 == after.sha256


@pytest.mark.parametrize(
    "version,pin,held",
    [
        ("3.11.7", "3.11", True),
        ("3.11.7", "3.12", False),
        ("3.11.7", "3.11.7", True),
        ("3.11.7", "cpython-3.11", True),
        ("3.11.7", ">=3.11", True),
        ("3.11.7", ">=3.10,<3.11", False),
        ("3.11.7", ">=3.9, <4", True),
        ("3.11.7", "~=3.11", True),
        ("3.11.7", "~=3.12", False),
        ("3.11.7", "==3.11.*", True),
        ("3.11.7", "!=3.11.*", False),
        ("3.11.7", "==3.11", False),
        ("3.12.0", ">3.11", True),
        ("3.11.7", "pypy", None),
        ("3.11.7", ">=banana", None),
    ],
)
def test_runtime_pin(version: str, pin: str, held: bool | None) -> None:
    assert pin_satisfied(version, pin) is held


def test_rollback_template_survives_stray_braces() -> None:
    assert render_rollback("redeploy {base_ref} {", {"base_ref": "v1"}) == "redeploy {base_ref} {"
    assert "v1" in render_rollback(None, {"base_ref": "v1"})


# --- answers -------------------------------------------------------------------------------------


def asked(run: RunBuilder, qid: str, impact: str, deadline: datetime, subject: list[str]) -> None:
    topic, options, recommended = (
        ("unmeasured", ["block", "waive-culprits"], "block")
        if impact == "critical"
        else ("flaky", ["allow", "block"], "allow")
    )
    run.add(
        ev.QuestionAsked,
        question_id=qid,
        topic=topic,
        text="?",
        options=options,
        recommended=recommended,
        impact=impact,
        deadline=deadline,
        subject=subject,
    )


def test_bad_answers_are_refused_and_nothing_is_written(ledger: Ledger) -> None:
    run = waivable_run()
    asked(run, "q-unmeasured-1", "critical", NOW + timedelta(hours=1), [A])
    run.add(
        ev.AssumptionMade,
        question_id="q-new-test-file-1",
        topic="new-test-file",
        text="?",
        options=["new-test", "renamed-or-moved"],
        choice="new-test",
        impact="low",
        reason="low impact",
    )
    run_id = stored(ledger, run)
    length = len(ledger.read(run_id))
    for qid, choice in (
        ("q-nope", "block"),
        ("q-unmeasured-1", "maybe"),
        ("q-new-test-file-1", "new-test"),
    ):
        with pytest.raises(BadInput):
            owner.answer(ledger, run_id, qid, choice, "alice")
        assert len(ledger.read(run_id)) == length
    result = owner.answer(ledger, run_id, "q-unmeasured-1", "waive-culprits", "alice")
    assert result["late"] is False and result["verdict"]["status"] == "passed"
    assert result["verdict"]["waivers"][0]["files"] == [A]
    assert result["verdict"]["waivers"][0]["by"] == "alice"
    length = len(ledger.read(run_id))
    with pytest.raises(BadInput, match="already answered"):
        owner.answer(ledger, run_id, "q-unmeasured-1", "block", "bob")
    assert len(ledger.read(run_id)) == length


def test_cli_bad_answer_is_exit_2_with_one_line(tmp_path: Path) -> None:
    led = open_ledger(ledger_url(tmp_path), clock=FixedClock(NOW))
    run = gate_run("unmeasured")
    asked(run, "q-unmeasured-1", "critical", NOW + timedelta(hours=1), [A])
    stored(led, run)
    led.close()
    result = run_ledger(tmp_path, "answer", run.run_id[:8], "q-unmeasured-1", "yes")
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and "not an option" in result.stderr


@pytest.mark.parametrize(
    "impact,follow", [("critical", "QuestionParked"), ("high", "RecommendationTaken")]
)
def test_a_late_answer_records_the_expiry_first_and_is_marked_late(
    ledger: Ledger, impact: str, follow: str
) -> None:
    run = gate_run("unmeasured")
    asked(run, "q-1", impact, NOW + timedelta(seconds=30), [A])
    run_id = stored(ledger, run)
    clock = ledger.clock
    assert isinstance(clock, FixedClock)
    clock.advance(31)
    choice = "waive-culprits" if impact == "critical" else "block"
    result = owner.answer(ledger, run_id, "q-1", choice, "alice")
    assert result["late"] is True
    kinds = [r.event.kind for r in ledger.read(run_id)][-3:]
    assert kinds == ["QuestionExpired", follow, "QuestionAnswered"]
    answered = ledger.read(run_id)[-1].event
    assert isinstance(answered, ev.QuestionAnswered) and answered.late and answered.by == "alice"


def test_a_parked_question_is_answered_late_and_the_verdict_changes(ledger: Ledger) -> None:
    run = waivable_run()
    asked(run, "q-unmeasured-1", "critical", NOW - timedelta(seconds=1), [A])
    run.add(ev.QuestionExpired, question_id="q-unmeasured-1", deadline=NOW - timedelta(seconds=1))
    run.add(ev.QuestionParked, question_id="q-unmeasured-1")
    run_id = stored(ledger, run)
    assert owner.pending_questions(ledger)[0]["state"] == "parked"
    assert get_rule("default").decide(_state(ledger, run_id)).status == "parked"
    result = owner.answer(ledger, run_id, "q-unmeasured-1", "waive-culprits", "alice")
    assert result["late"] is True and result["observed"] == []
    assert result["verdict"]["status"] == "passed"
    assert owner.pending_questions(ledger) == []


def test_waiving_the_only_file_measures_no_test_so_the_gate_stays_unmeasured(
    ledger: Ledger,
) -> None:
    run = gate_run("unmeasured")
    asked(run, "q-unmeasured-1", "critical", NOW + timedelta(hours=1), [A])
    run_id = stored(ledger, run)
    result = owner.answer(ledger, run_id, "q-unmeasured-1", "waive-culprits", "alice")
    assert result["verdict"]["status"] == "unmeasured"
    assert [u["reason"] for u in result["verdict"]["unmeasured"]] == ["no-tests"]


def _state(ledger: Ledger, run_id: str):  # type: ignore[no-untyped-def]
    from release_ledger.ledger.gate import project

    return project(ledger, run_id)


def test_questions_lists_open_and_parked_newest_first(ledger: Ledger) -> None:
    older = gate_run("unmeasured")
    asked(older, "q-unmeasured-1", "critical", NOW + timedelta(hours=1), [A])
    newer = RunBuilder(run_id="b" * 32)
    newer.clock += timedelta(minutes=5)
    asked(newer, "q-flaky-1", "high", NOW + timedelta(hours=1), [f"{A}::t"])
    asked(newer, "q-flaky-2", "high", NOW + timedelta(hours=1), [f"{A}::u"])
    newer.add(ev.QuestionAnswered, question_id="q-flaky-2", choice="allow", by="bob")
    stored(ledger, older)
    stored(ledger, newer)
    listed = owner.pending_questions(ledger)
    assert [(q["id"], q["run_id"][:1]) for q in listed] == [
        ("q-flaky-1", "b"),
        ("q-unmeasured-1", "a"),
    ]
    first = listed[0]
    assert first["options"] == [
        {"name": "allow", "recommended": True},
        {"name": "block", "recommended": False},
    ]
    assert (first["impact"], first["state"], first["overdue"]) == ("high", "open", False)
    only = owner.pending_questions(ledger, "aaaa")
    assert [q["id"] for q in only] == ["q-unmeasured-1"]


# --- checks --------------------------------------------------------------------------------------


def test_check_names_are_validated(ledger: Ledger) -> None:
    run_id = stored(ledger, gate_run("pass"))
    builtin = ("gate", "runtime-pin", "changelog", "Changelog ", "dependencies", "distributions",
               "upgrade")  # fmt: skip
    for bad in (*builtin, "", "  ", "---", "a\nb"):
        with pytest.raises(BadInput):
            owner.record_check(ledger, run_id, bad, "pass", "", "ci")
    first = owner.record_check(ledger, run_id, "docs", "fail", "x", "ci")
    second = owner.record_check(ledger, run_id, "docs", "pass", "y", "ci")
    assert first["supersedes"] is None and second["supersedes"] is not None
    assert sum(r.event.kind == "CheckRecorded" for r in ledger.read(run_id)) == 2


# --- approve and audit ---------------------------------------------------------------------------


def test_approve_appends_approval_and_audit_rederives_it(ledger: Ledger) -> None:
    run_id = stored(ledger, pinned(gate_run("pass"), "3.11.7", "3.11"))
    owner.record_check(ledger, run_id, "docs", "pass", "published", "ci")
    report = owner.approve(ledger, run_id, ["docs"])
    assert report.outcome == "ok"
    issued = ledger.read(run_id)[-1].event
    assert isinstance(issued, ev.ApprovalIssued)
    assert (issued.outcome, issued.rule, issued.report_sha256) == ("ok", "default", report.sha256)
    assert issued.required == ["docs"]
    assert ledger.artifact(report.sha256) == report.markdown.encode()
    # later events do not change what an issued report derives from
    owner.record_check(ledger, run_id, "docs", "fail", "retracted", "ci")
    audited = owner.audit(ledger, run_id)
    assert audited["ok"] is True and audited["approvals"][0]["derives"] is True
    again = owner.approve(ledger, run_id, ["docs"])
    assert again.outcome == "failed" and again.sha256 != report.sha256
    assert owner.audit(ledger, run_id)["ok"] is True


def test_audit_catches_a_report_issued_under_a_rule_whose_result_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = open_ledger(ledger_url(tmp_path), clock=FixedClock(NOW))
    run = RunBuilder().release().release_files().discover([A]).plan({"s01": [A]})
    run = pinned(run, "3.11.7", "3.11")
    run.attempt("s01", "head", [A], {f"{A}::t": "failed"})
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    run.isolation(A, "head", {f"{A}::t": "passed"})  # flaky: does not fail alone
    run.isolation(A, "base", {f"{A}::t": "passed"})
    run_id = stored(led, run)
    assert owner.approve(led, run_id, []).outcome == "ok"
    led.close()
    assert run_ledger(tmp_path, "audit", run_id).code == 0

    later = REGISTRY["default"].version + 1  # the rule's next version

    def stricter(state):  # type: ignore[no-untyped-def]
        return judge(state, Policy(skips_allowed=True, flaky_fails=True), "default", later)

    monkeypatch.setitem(REGISTRY, "default", Rule("default", later, "flaky fails now", stricter))
    result = run_ledger(tmp_path, "audit", run_id, "--json")
    assert result.code == 1
    (entry,) = result.document["approvals"]
    assert entry["derives"] is False and f"now v{later}" in entry["problem"]
    assert any(line.startswith("-| 1 | gate | passed") for line in entry["diff"])
    assert any(line.startswith("+| 1 | gate | failed") for line in entry["diff"])
    text = run_ledger(tmp_path, "audit", run_id)
    assert text.code == 1 and "NO LONGER DERIVES" in text.stdout


def test_audit_under_another_rule_shows_what_would_differ(ledger: Ledger) -> None:
    run = pinned(RunBuilder().release().discover([A]).plan({"s01": [A]}), "3.11.7", "3.11")
    run.attempt("s01", "head", [A], {f"{A}::t": "failed"})
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    run.isolation(A, "head", {f"{A}::t": "passed"})
    run.isolation(A, "base", {f"{A}::t": "passed"})
    run_id = stored(ledger, run)
    owner.approve(ledger, run_id, [])
    result = owner.audit(ledger, run_id, "strict")
    other = result["approvals"][0]["under_rule"]
    assert other["outcome"] == "failed" and other["outcome_changes"] is True
    assert other["metrics_changed"] == [
        {
            "name": "gate",
            "from": {"value": "passed: 1 tests at head; 1 flaky", "verdict": "pass"},
            "to": {"value": "failed: 1 tests at head; 1 flaky", "verdict": "fail"},
        }
    ]


def test_cli_approve_writes_markdown_and_exits_by_outcome(tmp_path: Path) -> None:
    led = open_ledger(ledger_url(tmp_path), clock=FixedClock(NOW))
    run_id = stored(led, pinned(gate_run("pass"), "3.11.7", "3.11"))
    led.close()
    out = tmp_path / "summary.md"
    missing = run_ledger(tmp_path, "approve", run_id, "--require", "docs", "--out", str(out))
    assert missing.code == 3 and out.read_text() == missing.stdout
    assert run_ledger(tmp_path, "check", run_id, "docs", "--verdict", "pass").code == 0
    ok = run_ledger(tmp_path, "approve", run_id, "--require", "docs", "--json")
    assert ok.code == 0 and ok.document["outcome"] == "ok"
    assert {m["name"]: m["verdict"] for m in ok.document["metrics"]} == {
        "gate": "pass",
        "docs": "pass",
        "runtime-pin": "pass",
        "dependencies": "pass",
        "distributions": "pass",
        "upgrade": "pass",
        "changelog": "pass",
    }
    assert ok.document["summary"] == "approved: 7/7"
    assert run_ledger(tmp_path, "check", run_id, "docs", "--verdict", "fail").code == 0
    assert run_ledger(tmp_path, "approve", run_id, "--require", "docs").code == 1
    bad = run_ledger(tmp_path, "approve", run_id, "--out", str(tmp_path / "no" / "x.md"))
    assert bad.code == 2
    assert run_ledger(tmp_path, "audit", run_id).code == 0
