"""No tests, no pass; a test that passed at base and is skipped or gone at head is lost
coverage (`skipped-at-head`): strict fails on it, the other rules report it."""

from __future__ import annotations

from pathlib import Path

from release_ledger.domain import events as ev
from release_ledger.domain.rules import REGISTRY, get_rule
from release_ledger.domain.run_state import fold
from release_ledger.domain.verdict import Verdict
from release_ledger.projections.approval import approval_report
from release_ledger.projections.read_models import run_rows
from release_ledger.projections.timeline import timeline
from tests.gatekit import gate, run_ledger
from tests.gitrepo import commit, make_repo, tag
from tests.runbuilder import RunBuilder

PASS = "def test_ok():\n    pass\n"

A, B = "tests/test_a.py", "tests/test_b.py"


def verdict(builder: RunBuilder, rule: str) -> Verdict:
    return get_rule(rule).decide(fold(builder.events, builder.artifacts))


def lost_coverage_run() -> RunBuilder:
    """t1 skipped at head, t2 no longer collected (its file still there), t3 new at head;
    B's test passes at both."""
    run = RunBuilder().discover([A, B]).plan({"s01": [A], "s02": [B]})
    run.attempt("s01", "head", [A], {f"{A}::t1": "skipped", f"{A}::t3": "passed"})
    run.attempt("s01", "base", [A], {f"{A}::t1": "passed", f"{A}::t2": "passed"})
    run.attempt("s02", "head", [B], {f"{B}::t4": "passed"})
    run.attempt("s02", "base", [B], {f"{B}::t4": "passed"})
    run.add(ev.RunCompleted)
    return run


def test_a_test_passing_at_base_and_skipped_or_gone_at_head_is_skipped_at_head() -> None:
    run = lost_coverage_run()
    for name in REGISTRY:
        assert verdict(run, name).skipped_at_head == (f"{A}::t1", f"{A}::t2"), name


def test_strict_fails_on_lost_coverage_default_only_reports_it() -> None:
    run = lost_coverage_run()
    strict = verdict(run, "strict")
    assert strict.status == "failed"
    assert any("skipped-at-head" in reason for reason in strict.reasons)
    assert set(strict.blocking) == {f"{A}::t1", f"{A}::t2"}
    default = verdict(run, "default")
    assert default.status == "passed"
    assert default.as_dict()["skipped_at_head"] == [f"{A}::t1", f"{A}::t2"]
    assert default.tests["skipped_at_head"] == 2


def test_a_file_gone_at_head_is_not_lost_coverage_of_its_tests() -> None:
    """Only tests whose file still exists at head count: a deleted file is not a skip."""
    run = RunBuilder().discover([A]).plan({"s01": [A]})
    run.attempt("s01", "head", [A], {f"{A}::t1": "passed"})
    run.attempt("s01", "base", [A], {f"{A}::t1": "passed", f"{B}::gone": "passed"})
    assert verdict(run, "strict").skipped_at_head == ()


def test_lost_coverage_is_in_show_the_read_models_and_the_approval_report() -> None:
    run = lost_coverage_run()
    records = list(enumerate(run.events, start=1))
    lines = timeline(records, run.artifacts)
    completed = [line.text for line in lines if line.kind == "RunCompleted"]
    assert completed and "2 tests skipped-at-head" in completed[0]
    assert f"{A}::t2" in completed[0]
    rows = run_rows(run.run_id, records, run.artifacts)
    classes = {(r[1], r[3]): r[5] for r in rows["classifications"]}
    assert classes[("default", f"{A}::t2")] == "skipped-at-head"
    assert classes[("strict", f"{A}::t1")] == "skipped-at-head"
    report = approval_report(records, run.artifacts, get_rule("default").decide)
    gate = report.metrics[0]
    assert gate.name == "gate" and gate.verdict == "pass"  # default reports, does not fail
    assert "skipped-at-head" in gate.why and f"{A}::t2" in report.markdown
    strict_report = approval_report(records, run.artifacts, get_rule("strict").decide)
    assert strict_report.metrics[0].verdict == "fail" and strict_report.outcome == "failed"


def test_a_gate_that_measured_no_test_at_head_is_unmeasured_no_tests_under_every_rule() -> None:
    run = RunBuilder().discover([A]).plan({"s01": [A]})
    run.attempt("s01", "head", [A], {}, exit_code=5)  # the file collects nothing
    run.attempt("s01", "base", [A], {}, exit_code=5)
    run.add(ev.RunCompleted)
    for name in REGISTRY:
        result = verdict(run, name)
        assert result.status == "unmeasured", name
        assert [u.reason for u in result.unmeasured] == ["no-tests"], name
        assert any("no-tests" in reason for reason in result.reasons)
    records = list(enumerate(run.events, start=1))
    completed = [line.text for line in timeline(records, run.artifacts)
                 if line.kind == "RunCompleted"]  # fmt: skip
    assert "no test was measured at head (no-tests)" in completed[0]


def test_one_measured_test_at_head_is_enough_to_pass() -> None:
    run = RunBuilder().discover([A]).plan({"s01": [A]})
    run.attempt("s01", "head", [A], {f"{A}::t1": "passed"})
    run.attempt("s01", "base", [A], {}, exit_code=5)
    for name in REGISTRY:
        assert verdict(run, name).status == "passed", name


OPTIONAL = "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n"


def test_a_dependency_missing_at_head_is_lost_coverage_not_a_clean_pass(tmp_path: Path) -> None:
    """A real gate: at head the file skips itself (`importorskip` of a missing module), so
    pytest alone exits 5 for it; it is still planned and run at both revisions, and its two
    tests are skipped-at-head: `default` passes and lists them, `strict` fails."""
    repo = make_repo(tmp_path, {"tests/test_opt.py": OPTIONAL, "tests/test_ok.py": PASS})
    tag(repo, "v1")
    skipping = "import pytest\n\npytest.importorskip('no_such_module_xyz')\n\n" + OPTIONAL
    commit(repo, {"tests/test_opt.py": skipping}, "needs an optional dependency now")
    result = gate(tmp_path, repo, "--shards", "1")
    document = result.document
    assert document["status"] == "passed" and result.code == 0, document["reasons"]
    lost = ["tests/test_opt.py::test_one", "tests/test_opt.py::test_two"]
    assert document["skipped_at_head"] == lost
    strict = run_ledger(tmp_path, "verdict", document["run_id"], "--rule", "strict", "--json")
    assert strict.document["status"] == "failed"
    assert strict.document["skipped_at_head"] == document["skipped_at_head"]
