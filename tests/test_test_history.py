"""Each test's history across gates (issue 29 part 1): the `test_history` read model, rebuilt
to the same digest, and `ledger tests` / `ledger test` over it. Gates driven with the
scripted executor (`tests/fake_executor.py`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from release_ledger.adapters.workspace import GitWorkspace
from release_ledger.domain.execution import DEFAULT_PYTEST_COMMAND
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.service import Ledger
from tests.gatekit import ledger_url, run_ledger
from tests.gitrepo import commit, make_repo, tag
from tests.test_exoneration import B, _gate, _suite


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEDGER_WORKTREES_DIR", str(tmp_path / "worktrees"))
    files = {f"tests/test_{n}.py": "def test_one():\n    pass\n" for n in "ab"}
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    commit(repo, {"README": "head\n"})
    return repo


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    opened = open_ledger(ledger_url(tmp_path))
    yield opened
    opened.close()


@pytest.fixture
def two_gates(ledger: Ledger, repo: Path) -> tuple[str, str]:
    """B fails at v1 in the first gate and passes there in the second: flaky at v1."""
    other = (*DEFAULT_PYTEST_COMMAND, "-p", "no:randomly")
    workspace = GitWorkspace(repo)
    first = _gate(ledger, workspace, _suite(base_b="failed"), command=other)
    second = _gate(ledger, workspace, _suite(head_b="failed"))
    return first, second


def test_ledger_tests_flaky_lists_the_test_whose_outcome_differed_at_one_commit(
    tmp_path: Path, two_gates: tuple[str, str]
) -> None:
    first, second = two_gates
    listed = run_ledger(tmp_path, "tests", "--flaky", "--json")
    assert listed.code == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["test"] == B and row["runs"] == 2
    # at base: failed in the first gate, passed in the second (in its shard and alone)
    assert row["outcomes"]["base"] == {
        "runs": 2, "failed": 1, "passed": 1, "differed": 0, "other": 0
    }  # fmt: skip
    # it failed and passed at v1 (first gate, then second) and at head (the other way round)
    assert len(row["flaky_commits"]) == 2
    assert row["first_failure"]["run_id"] == first and row["last_failure"]["run_id"] == second
    assert row["file_peak_rss_mb"] > 0 and row["file_median_seconds"] is not None
    everything = json.loads(run_ledger(tmp_path, "tests", "--json").stdout)
    assert [r["test"] for r in everything] == ["tests/test_a.py::test_one", B]
    table = run_ledger(tmp_path, "tests", "--flaky")
    assert table.code == 0 and "flaky at 2 commits" in table.stdout


def test_ledger_tests_is_paged_like_ledger_runs(
    tmp_path: Path, two_gates: tuple[str, str]
) -> None:
    page = run_ledger(tmp_path, "tests", "--limit", "1")
    assert "more tests not shown (--offset 1" in page.stdout
    second = json.loads(run_ledger(tmp_path, "tests", "--limit", "1", "--offset", "1",
                                   "--json").stdout)  # fmt: skip
    assert [r["test"] for r in second] == [B]
    assert [r["test"] for r in json.loads(run_ledger(tmp_path, "tests", "*b.py*", "--json")
                                          .stdout)] == [B]  # fmt: skip


def test_an_unknown_pattern_matches_nothing_and_says_so(
    tmp_path: Path, two_gates: tuple[str, str]
) -> None:
    result = run_ledger(tmp_path, "tests", "no_such_test")
    assert result.code == 0 and "no test matches 'no_such_test'" in result.stdout
    assert json.loads(run_ledger(tmp_path, "tests", "no_such_test", "--json").stdout) == []
    unknown = run_ledger(tmp_path, "test", "tests/test_z.py::test_z")
    assert unknown.code == 2 and "no test tests/test_z.py::test_z" in unknown.stderr


def test_ledger_test_shows_every_run_of_one_test(
    tmp_path: Path, two_gates: tuple[str, str]
) -> None:
    first, second = two_gates
    document = json.loads(run_ledger(tmp_path, "test", B, "--json").stdout)
    [summary] = document["interpreters"]
    assert sorted((f["failed_in"], f["passed_in"]) for f in summary["flaky"]) == sorted(
        [([first], [second]), ([second], [first])]
    )
    assert {(h["run_id"], h["revision"]) for h in document["history"]} == {
        (first, "head"), (first, "base"), (second, "head"), (second, "base"),
    }  # fmt: skip
    shown = run_ledger(tmp_path, "test", B)
    assert "flaky at" in shown.stdout and first[:8] in shown.stdout


def test_the_history_view_rebuilds_to_the_same_digest(
    tmp_path: Path, two_gates: tuple[str, str]
) -> None:
    run_ledger(tmp_path, "tests")  # catches the views up
    checked = run_ledger(tmp_path, "rebuild", "--check", "--json")
    assert checked.code == 0, checked.stdout
    assert checked.document["identical"] is True
    rebuilt = run_ledger(tmp_path, "rebuild", "--json").document
    again = run_ledger(tmp_path, "rebuild", "--json").document
    assert rebuilt["digest"] == again["digest"]
    assert rebuilt.get("counts", {}).get("test_history", 4) >= 4


@pytest.mark.postgres
def test_the_history_reads_the_same_from_postgresql_as_from_sqlite(
    tmp_path: Path, postgres_url: str
) -> None:
    """One query text for both stores: the same events give the same pages."""
    import random

    from release_ledger.ledger import history, views
    from tests.ledgerkit import open_ledger as open_test_ledger
    from tests.synthetic_runs import synthetic_run

    rng = random.Random(29)
    # run ids sharing their first four characters share their test files: one suite
    runs = [synthetic_run(rng, f"beef{i:04x}" + "0" * 24, files=3, p_fail=0.3) for i in range(6)]
    pages = []
    for url in (f"sqlite:///{tmp_path / 'l.db'}", postgres_url):
        ledger = open_test_ledger(url)
        try:
            for run in runs:
                ledger.append(run.run_id, run.events, artifacts=run.artifacts)
            store = history.open_history(ledger)
            try:
                pages.append(
                    [history.list_tests(store, p, flaky=f, limit=4, offset=1)
                     for p in (None, "test_beef*") for f in (False, True)]
                )  # fmt: skip
            finally:
                store.close()
            assert views.check(ledger, views.views_path(ledger, None))["identical"]
        finally:
            ledger.close()
    assert pages[0] == pages[1]
    assert any(rows for rows, _ in pages[0])
