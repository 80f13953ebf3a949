"""Exoneration with reasons (issue 29): before the gate calls a failure introduced it looks the
test up in the ledger's history and the run's quarantine, and appends `FailureExonerated`
naming the reason and the events that prove it; the rule decides what that means. Driven
with the scripted executor (`tests/fake_executor.py`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from release_ledger.adapters.workspace import Workspace
from release_ledger.domain import events as ev
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.gate import GateProcess, start
from release_ledger.ledger.options import GateOptions
from release_ledger.ledger.read_side import project, verdict_of
from release_ledger.ledger.service import Ledger
from tests.fake_executor import FakeExecutor, Suite, two_commit_repo
from tests.fake_workspace import InMemoryWorkspace, two_commit_workspace
from tests.gitrepo import commit, make_repo, tag

FILES = [f"tests/test_{name}.py" for name in "ab"]
B = "tests/test_b.py::test_one"


def _suite(base_b: str = "passed", head_b: str = "passed") -> Suite:
    files: dict[tuple[str, str], Any] = {}
    for file in FILES:
        files[("base", file)] = {f"{file}::test_one": "passed"}
        files[("head", file)] = {f"{file}::test_one": "passed"}
    files[("base", "tests/test_b.py")] = {B: base_b}
    files[("head", "tests/test_b.py")] = {B: head_b}
    return Suite(files)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEDGER_WORKTREES_DIR", str(tmp_path / "worktrees"))
    return two_commit_repo(tmp_path, FILES)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    from tests.gatekit import ledger_url

    opened = open_ledger(ledger_url(tmp_path))  # the one `run_ledger` reads
    yield opened
    opened.close()


@pytest.fixture
def workspace() -> InMemoryWorkspace:
    """The repository of the unit tests below, in memory (no git)."""
    return two_commit_workspace(FILES)


def _gate(ledger: Ledger, workspace: Workspace, suite: Suite, **options: Any) -> str:
    settings: dict[str, Any] = {
        "repo": workspace.repo, "base": "v1", "jobs": 1, "rounds": 1, "shards": 1,
        "release_builds": False, "environment": "none", "question_budget": 0,
    } | options  # fmt: skip
    run_id = start(ledger, GateOptions(**settings), workspace)
    GateProcess(ledger, run_id, FakeExecutor(suite), workspace=workspace).drive()
    return run_id


def _exonerations(ledger: Ledger, run_id: str) -> list[tuple[int, ev.FailureExonerated]]:
    return [
        (p, e) for p, e in ledger.store.read_events(run_id) if isinstance(e, ev.FailureExonerated)
    ]


def test_a_test_that_failed_at_base_in_an_earlier_gate_is_exonerated_naming_that_gate(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    # It failed at v1 in an earlier gate run with another command (so base's results are not
    # reused from it: they are run again, and pass).
    from release_ledger.domain.execution import DEFAULT_PYTEST_COMMAND

    other = (*DEFAULT_PYTEST_COMMAND, "-p", "no:randomly")
    earlier = _gate(ledger, workspace, _suite(base_b="failed"), command=other)
    failing_at_base = next(
        p for p, e in ledger.store.read_events(earlier)
        if isinstance(e, ev.ShardAttemptRecorded) and e.revision == "base"
    )  # fmt: skip

    run_id = _gate(ledger, workspace, _suite(head_b="failed"))

    [(_, event)] = _exonerations(ledger, run_id)
    assert (event.test, event.reason) == (B, "flaky-at-base")
    assert ev.Proof(run_id=earlier, position=failing_at_base, revision="base",
                    outcome="failed") in event.proof  # fmt: skip
    assert any(p.run_id == run_id and p.outcome == "passed" for p in event.proof)
    state = project(ledger, run_id)
    default = verdict_of(state, "default")
    assert default.status == "passed" and default.introduced == ()
    assert default.as_dict()["exonerated"][B]["reason"] == "flaky-at-base"
    strict = verdict_of(state, "strict")
    assert strict.status == "failed" and strict.introduced == (B,)


def test_a_test_that_passed_at_this_head_in_an_earlier_gate_is_flaky_at_head(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    earlier = _gate(ledger, workspace, _suite())
    run_id = _gate(ledger, workspace, _suite(head_b="failed"))

    [(_, event)] = _exonerations(ledger, run_id)
    assert event.reason == "flaky-at-head"
    assert {(p.run_id, p.revision, p.outcome) for p in event.proof} == {
        (earlier, "head", "passed"), (run_id, "head", "failed"),
    }  # fmt: skip


def test_a_quarantined_test_is_exonerated_and_the_quarantine_is_recorded_in_run_started(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    run_id = _gate(ledger, workspace, _suite(head_b="failed"), quarantine=(B,))

    started = project(ledger, run_id).started
    assert started is not None and started.options["quarantine"] == [B]
    [(_, event)] = _exonerations(ledger, run_id)
    assert (event.reason, event.proof) == ("quarantined", [ev.Proof(run_id=run_id, position=1)])
    assert verdict_of(project(ledger, run_id)).status == "passed"
    assert verdict_of(project(ledger, run_id), "strict").status == "failed"


def test_show_verdict_and_the_approval_report_name_the_exoneration_and_its_proof(
    tmp_path: Path, ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    from tests.gatekit import run_ledger

    run_id = _gate(ledger, workspace, _suite(head_b="failed"), quarantine=(B,))
    shown = run_ledger(tmp_path, "show", run_id)
    assert f"{B} exonerated (quarantined): run {run_id[:8]} position 1" in shown.stdout
    assert f"exonerated   {B}: quarantined" in shown.stdout
    replayed = run_ledger(tmp_path, "verdict", run_id, "--rule", "strict", "--json")
    assert replayed.code == 1
    document = replayed.document
    assert document["introduced"] == [B]
    assert document["exonerated"][B]["proof"] == [
        {"run_id": run_id, "position": 1, "revision": "", "outcome": ""}
    ]
    compared = run_ledger(tmp_path, "verdict", run_id, "--compare", "strict", "--json")
    assert B in json.dumps(compared.document)
    page = tmp_path / "run.html"
    assert run_ledger(tmp_path, "report", run_id, "--html", str(page)).code in (0, 1)
    assert "exonerated" in page.read_text() and "quarantined" in page.read_text()
    approval = run_ledger(tmp_path, "approve", run_id, "--json")
    assert f"{B} exonerated (quarantined" in approval.document["markdown"]


def test_a_new_failure_with_no_history_stays_introduced_and_is_looked_up_once(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    run_id = _gate(ledger, workspace, _suite(head_b="failed"))
    events = [e for _, e in ledger.store.read_events(run_id)]
    assert [e.tests for e in events if isinstance(e, ev.ExonerationsLookedUp)] == [[B]]
    assert not _exonerations(ledger, run_id)
    verdict = verdict_of(project(ledger, run_id))
    assert verdict.status == "failed" and "exonerated" not in verdict.as_dict()


@pytest.mark.parametrize(
    "entry", ["tests/test_b.py", "tests/*.py::test_one", "::test_one", "tests/test_b.py::"]
)
def test_a_quarantine_entry_that_is_not_a_node_id_is_exit_2_and_nothing_is_appended(
    tmp_path: Path, repo: Path, entry: str
) -> None:
    from tests.gatekit import gate, run_ledger

    result = gate(tmp_path, repo, "--quarantine", entry)
    assert result.code == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not a test node id" in lines[0], result.stderr
    listed = run_ledger(tmp_path, "runs", "--json")
    assert listed.code != 0 or listed.stdout.strip() in ("[]", "")


def test_a_quarantine_in_the_table_that_is_not_a_node_id_is_exit_2(
    tmp_path: Path, repo: Path
) -> None:
    from tests.gatekit import gate

    commit(repo, {"pyproject.toml": '[tool.release-ledger]\nquarantine = ["tests/test_b.py"]\n'})
    result = gate(tmp_path, repo)
    assert result.code == 2 and "not a test node id" in result.stderr, result.stderr


@pytest.mark.slow
def test_a_real_gate_exonerates_a_quarantined_failure_and_strict_replays_it_as_failed(
    tmp_path: Path,
) -> None:
    from tests.gatekit import events, gate, run_ledger

    work = tmp_path / "real"
    work.mkdir()
    ok = "def test_one():\n    assert True\n"
    # The quarantine is the approved release's (base's table), not the candidate's.
    repo = make_repo(work, {"tests/test_a.py": ok, "tests/test_b.py": ok,
                            "pyproject.toml": f'[tool.release-ledger]\nquarantine = ["{B}"]\n'})
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": "def test_one():\n    assert 1 == 2\n"}, "candidate")
    result = gate(work, repo, "--shards", "2", "--timeout", "60")
    assert result.code == 0, result.stderr
    document = result.document
    assert document["introduced"] == [] and document["exonerated"][B]["reason"] == "quarantined"
    recorded = events(work, document["run_id"])
    assert recorded[0]["options"]["quarantine"] == [B]
    assert [e["test"] for e in recorded if e["kind"] == "FailureExonerated"] == [B]
    strict = run_ledger(work, "verdict", document["run_id"], "--rule", "strict", "--json")
    assert strict.code == 1 and strict.document["introduced"] == [B]


def test_a_head_cannot_quarantine_the_failure_it_introduces(tmp_path: Path, repo: Path) -> None:
    """The candidate's own table may not exonerate its failures: only base's quarantine (the
    release already approved) or `--quarantine` given to the gate counts."""
    from release_ledger.ledger.settings import gate_options

    commit(repo, {"pyproject.toml": f'[tool.release-ledger]\nquarantine = ["{B}"]\n'})
    assert gate_options({"repo": str(repo), "base": "v1"}).quarantine == ()
    given = gate_options({"repo": str(repo), "base": "v1", "quarantine": (B,)})
    assert given.quarantine == (B,)
