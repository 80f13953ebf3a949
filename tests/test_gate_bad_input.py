"""Bad input to `ledger gate`: exit 2 with one line naming the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gatekit import events, gate, run_ledger
from tests.gitrepo import commit, make_repo, tag

PASS = "def test_ok():\n    pass\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path, {"tests/test_a.py": PASS, "tests/test_b.py": PASS})
    tag(repo, "v1")
    commit(repo, {"README.md": "x\n"}, "docs")
    return repo


def _one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("ledger: error: "), stderr
    return lines[0]


def _no_runs(workdir: Path) -> bool:
    listed = run_ledger(workdir, "runs", "--json")
    return listed.code != 0 or json.loads(listed.stdout) == []


def test_an_unknown_base_revision_is_exit_2_and_nothing_is_recorded(
    tmp_path: Path, repo: Path
) -> None:
    result = gate(tmp_path, repo, base="v9.9.9")
    assert result.code == 2
    assert "v9.9.9" in _one_line_error(result.stderr)
    assert _no_runs(tmp_path)


def test_an_unknown_head_revision_is_exit_2(tmp_path: Path, repo: Path) -> None:
    result = gate(tmp_path, repo, "--head", "no-such-branch")
    assert result.code == 2
    assert "no-such-branch" in _one_line_error(result.stderr)
    assert _no_runs(tmp_path)


def test_an_unknown_rule_is_exit_2(tmp_path: Path, repo: Path) -> None:
    result = gate(tmp_path, repo, "--rule", "lenient")
    assert result.code == 2
    assert "lenient" in _one_line_error(result.stderr)
    assert _no_runs(tmp_path)


def test_a_command_without_the_files_placeholder_is_exit_2(tmp_path: Path, repo: Path) -> None:
    result = gate(tmp_path, repo, "--command", "{python} -m pytest --junitxml={junit}")
    assert result.code == 2
    assert "{files}" in _one_line_error(result.stderr)


@pytest.mark.slow
def test_a_budget_smaller_than_a_measured_file_is_exit_2_naming_the_file_and_its_rss(
    tmp_path: Path, repo: Path
) -> None:
    first = gate(tmp_path, repo, "--timeout", "60")
    assert first.code == 0, first.stderr
    # The repeat gate reuses the measurements (~40 MB per file) and cannot plan under 10 MB,
    # not even alone (the isolation budget is the limit of a file alone).
    result = gate(tmp_path, repo, "--budget-gib", "0.01", "--isolation-budget-gib", "0.01")
    assert result.code == 2
    line = _one_line_error(result.stderr)
    assert "over the shard budget of 10.24 MB" in line
    assert "tests/test_a.py needs " in line or "tests/test_b.py needs " in line
    measured = {
        e["file"]: e["rss_mb"]
        for e in events(tmp_path, first.document["run_id"])
        if e["kind"] == "FileMeasured"
    }
    named, _, rest = line.removeprefix("ledger: error: ").partition(" needs ")
    needs = float(rest.split(" MB", 1)[0])
    assert needs == pytest.approx(measured[named], rel=0.05)
