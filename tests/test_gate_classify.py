"""`ledger gate` on real repositories: passes, introduced, preexisting, fixed, new files, story."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gatekit import attempts, events, gate, run_ledger, shard_of
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

PASS = "def test_ok():\n    assert True\n"
REG = "def test_stays():\n    pass\n\ndef test_breaks():\n    assert 1 + 1 == {}\n"

BASE_FILES = {
    "tests/test_ok.py": PASS,
    "tests/test_reg.py": REG.format(2),
    "tests/test_old.py": "def test_old_bug():\n    assert 'known' == 'bug'\n",
    "tests/test_fix.py": "def test_was_broken():\n    assert 2 * 2 == 5\n",
}
HEAD_CHANGES = {
    "tests/test_reg.py": REG.format(3),
    "tests/test_fix.py": "def test_was_broken():\n    assert 2 * 2 == 4\n",
    "tests/test_new.py": "def test_brand_new():\n    assert False, 'new and failing'\n",
}


@pytest.fixture(scope="module")
def regression(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], int]:
    """One gate over a candidate with a regression, a known bug, a fix and a new failing file."""
    workdir = tmp_path_factory.mktemp("regression")
    repo = make_repo(workdir, BASE_FILES)
    tag(repo, "v1")
    commit(repo, HEAD_CHANGES, "candidate")
    junit = str(workdir / "head-junit.xml")
    result = gate(workdir, repo, "--shards", "5", "--timeout", "60", "--junit-out", junit)
    assert result.code in (0, 1, 3), result.stderr
    return workdir, result.document, result.code


def test_junit_out_holds_the_head_results_and_reads_back_strictly(
    regression: tuple[Path, dict[str, Any], int],
) -> None:
    from release_ledger.domain.junit import Report, read_report, test_id

    workdir, document, _ = regression
    report = read_report((workdir / "head-junit.xml").read_bytes())
    assert isinstance(report, Report), report
    failing = sorted(test_id(c) for c in report.cases if c.outcome == "failed")
    assert failing == sorted(document["introduced"] + document["preexisting"])
    assert report.tests == document["tests"]["head"] and report.errors == 0
    assert "tests/test_fix.py::test_was_broken" in {test_id(c) for c in report.cases}


def test_a_clean_candidate_passes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": PASS, "tests/test_b.py": PASS})
    tag(repo, "v1")
    commit(repo, {"README.md": "docs only\n"}, "docs")
    result = gate(tmp_path, repo, "--timeout", "60")
    assert result.code == 0, result.stderr
    document = result.document
    assert document["status"] == "passed"
    assert document["introduced"] == document["preexisting"] == document["fixed"] == []
    assert document["unmeasured"] == [] and document["retry_shards"] == []
    assert document["tests"]["head"] == 2


def test_an_injected_regression_is_exactly_the_introduced_set(
    regression: tuple[Path, dict[str, Any], int],
) -> None:
    _, document, code = regression
    assert code == 1
    assert document["status"] == "failed"
    assert document["introduced"] == [
        "tests/test_new.py::test_brand_new",
        "tests/test_reg.py::test_breaks",
    ]
    assert document["unmeasured"] == [] and document["flaky"] == []


def test_a_preexisting_failure_and_a_fixed_test_are_classified(
    regression: tuple[Path, dict[str, Any], int],
) -> None:
    _, document, _ = regression
    assert document["preexisting"] == ["tests/test_old.py::test_old_bug"]
    assert document["fixed"] == ["tests/test_fix.py::test_was_broken"]


def test_a_shard_of_files_new_at_head_runs_only_at_head(
    regression: tuple[Path, dict[str, Any], int],
) -> None:
    workdir, document, _ = regression
    evs = events(workdir, document["run_id"])
    discovered = next(e for e in evs if e["kind"] == "TestFilesDiscovered")
    assert discovered["missing_at_base"] == ["tests/test_new.py"]
    new_shard = shard_of(evs, "tests/test_new.py")
    counts = attempts(evs)
    assert counts[(new_shard, "head")] == 1
    assert counts[(new_shard, "base")] == 0
    isolated = {(e["file"], e["revision"]) for e in evs if e["kind"] == "IsolationRecorded"}
    assert ("tests/test_new.py", "head") in isolated
    assert ("tests/test_new.py", "base") not in isolated


def test_every_failure_new_at_head_is_rerun_alone_at_both_revisions(
    regression: tuple[Path, dict[str, Any], int],
) -> None:
    workdir, document, _ = regression
    evs = events(workdir, document["run_id"])
    isolated = sorted((e["file"], e["revision"]) for e in evs if e["kind"] == "IsolationRecorded")
    assert isolated == [
        ("tests/test_new.py", "head"),
        ("tests/test_reg.py", "base"),
        ("tests/test_reg.py", "head"),
    ]


def test_show_tells_the_story_of_the_run(regression: tuple[Path, dict[str, Any], int]) -> None:
    workdir, document, _ = regression
    result = run_ledger(workdir, "show", document["run_id"])
    assert result.code == 0, result.stderr
    story = result.stdout
    for kind in (
        "RunStarted",
        "TestFilesDiscovered",
        "FileMeasured",
        "ShardsPlanned",
        "ShardAttemptRecorded",
        "IsolationRecorded",
        "RunCompleted",
    ):
        assert kind in story, f"{kind} missing from:\n{story}"
    assert "new at head (absent at base): tests/test_new.py" in story
    attempt_lines = [line for line in story.splitlines() if "ShardAttemptRecorded" in line]
    assert any(
        "exit 1" in line and "tests/test_reg.py::test_breaks" in line for line in attempt_lines
    )
    assert any("exit 0" in line for line in attempt_lines)
    isolations = [line for line in story.splitlines() if "IsolationRecorded" in line]
    assert any("alone at base: exit 0" in line for line in isolations)


def test_show_ends_with_the_verdict_and_its_classified_tests(
    regression: tuple[Path, dict[str, Any], int],
) -> None:
    workdir, document, _ = regression
    story = run_ledger(workdir, "show", document["run_id"]).stdout
    ending = story[story.index("RunCompleted") :]
    assert "tests/test_reg.py::test_breaks" in ending, story
    assert "tests/test_old.py::test_old_bug" in ending, story
    assert "tests/test_fix.py::test_was_broken" in ending, story


def test_a_file_that_held_no_test_at_base_is_measured_and_its_new_failure_introduced(
    tmp_path: Path,
) -> None:
    """At base the file collects nothing (pytest exit 5 alone): not a culprit, just empty."""
    repo = make_repo(tmp_path, {"tests/test_a.py": PASS, "tests/test_grow.py": "HELPER = 1\n"})
    tag(repo, "v1")
    grown = "HELPER = 1\n\ndef test_grown():\n    assert HELPER == 2\n"
    commit(repo, {"tests/test_grow.py": grown}, "first test in a helper file")
    result = gate(tmp_path, repo, "--shards", "1", "--rounds", "0", "--timeout", "60")
    document = result.document
    assert document["unmeasured"] == [], document["unmeasured"]
    assert document["introduced"] == ["tests/test_grow.py::test_grown"]
    assert result.code == 1 and document["status"] == "failed"


def test_a_file_that_stops_importing_at_head_is_an_introduced_error_not_a_culprit(
    tmp_path: Path,
) -> None:
    broken = "import module_that_does_not_exist\n\ndef test_x():\n    pass\n"
    repo = make_repo(tmp_path, {"tests/test_a.py": PASS, "tests/test_b.py": PASS})
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": broken}, "break an import")
    result = gate(tmp_path, repo, "--shards", "1", "--timeout", "60")
    assert result.code == 1, result.stderr
    document = result.document
    assert document["introduced"] == ["tests/test_b.py::tests.test_b"]
    assert document["unmeasured"] == []
    assert document["tests"]["head"] == 2  # test_a.py still ran beside the broken file
