"""A head that drops test files or needs much more memory or time says so in every output:
removed test files are lost coverage, heavier and slower files carry both figures, and the
rule decides (`default` reports, `strict` fails; `ledger verdict --rule` replays either way)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.gatekit import events, gate, holding, run_ledger
from tests.gitrepo import commit, git, make_repo, tag

pytestmark = pytest.mark.slow

STABLE = "def test_stable():\n    assert 1 + 1 == 2\n"
GOING = "def test_going_1():\n    pass\n\ndef test_going_2():\n    pass\n"
MOVING = "def test_moving():\n    assert 'x'.upper() == 'X'\n\ndef test_moving_too():\n    pass\n"


def _sleeping(seconds: float) -> str:
    return f"import time\n\ndef test_slow():\n    time.sleep({seconds})\n"


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One real gate: a deleted file, a renamed file, a file 6x slower (+2 s: twice the floor
    given, so load does not blur it), a file that holds 400 MB more at head."""
    workdir = tmp_path_factory.mktemp("findings")
    repo = make_repo(workdir, {
        "tests/test_stable.py": STABLE,
        "tests/test_going.py": GOING,
        "tests/test_moving.py": MOVING,
        "tests/test_slow.py": _sleeping(0.4),
        "tests/test_heavy.py": holding(10),
    })  # fmt: skip
    tag(repo, "v1")
    git(repo, "mv", "tests/test_moving.py", "tests/test_moved.py")
    git(repo, "rm", "-q", "tests/test_going.py")
    commit(repo, {"tests/test_slow.py": _sleeping(2.4), "tests/test_heavy.py": holding(410)},
           "head: one file deleted, one renamed, one slower, one heavier")  # fmt: skip
    result = gate(workdir, repo, "--shards", "2", "--timeout", "120", "--slower-floor-s", "1")
    assert result.code == 0, result.stderr
    return workdir, result.document


def test_a_deleted_test_file_is_removed_at_head_and_a_renamed_one_is_not(findings) -> None:  # type: ignore[no-untyped-def]
    _, document = findings
    assert document["removed_at_head"] == ["tests/test_going.py"]


def test_a_renamed_file_is_matched_by_gits_rename_detection_in_the_discovery(findings) -> None:  # type: ignore[no-untyped-def]
    workdir, document = findings
    (discovered,) = [e for e in events(workdir, document["run_id"])
                     if e["kind"] == "TestFilesDiscovered"]  # fmt: skip
    assert discovered["renamed_at_head"] == {"tests/test_moving.py": "tests/test_moved.py"}
    assert discovered["removed_at_head"] == ["tests/test_going.py"]


def test_heavier_and_slower_files_carry_both_figures(findings) -> None:  # type: ignore[no-untyped-def]
    _, document = findings
    (heavy,) = document["heavier"]
    assert heavy["file"] == "tests/test_heavy.py" and heavy["unit"] == "MB"
    assert heavy["head"] - heavy["base"] > 300
    slower = {c["file"]: c for c in document["slower"]}
    slow = slower["tests/test_slow.py"]
    assert slow["unit"] == "s" and slow["base"] < 1.0 < 2.0 < slow["head"]
    # Unchanged files are not findings (touching 410 MB may make the heavy file slower too).
    assert set(slower) <= {"tests/test_slow.py", "tests/test_heavy.py"}


def test_default_reports_them_and_strict_fails_on_them_on_replay(findings) -> None:  # type: ignore[no-untyped-def]
    workdir, document = findings
    assert document["status"] == "passed"
    strict = run_ledger(workdir, "verdict", document["run_id"], "--rule", "strict", "--json")
    assert strict.code == 1
    reasons = " ".join(strict.document["reasons"])
    assert "1 test files removed at head (removed-at-head: tests/test_going.py)" in reasons
    assert re.search(r"1 files heavier and [12] files slower at head than at base", reasons)


def test_ledger_show_names_each_finding_with_its_figures(findings) -> None:  # type: ignore[no-untyped-def]
    workdir, document = findings
    shown = run_ledger(workdir, "show", document["run_id"]).stdout
    assert "removed      tests/test_going.py (removed at head)" in shown
    assert "heavier      tests/test_heavy.py: " in shown and " MB at head (x" in shown
    assert "slower       tests/test_slow.py: " in shown
    assert "renamed at head: tests/test_moving.py -> tests/test_moved.py" in shown


def test_the_thresholds_are_recorded_so_a_replay_judges_as_the_gate_did(findings) -> None:  # type: ignore[no-untyped-def]
    workdir, document = findings
    (started,) = [e for e in events(workdir, document["run_id"]) if e["kind"] == "RunStarted"]
    assert started["options"]["resources"] == {
        "memory_factor": 2.0, "memory_floor_mb": 100.0, "time_factor": 2.0, "time_floor_s": 1.0
    }  # fmt: skip
    replay = run_ledger(workdir, "verdict", document["run_id"], "--json")
    assert replay.document["slower"] == document["slower"]


def test_a_bad_threshold_is_exit_2_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_stable.py": STABLE})
    tag(repo, "v1")
    commit(repo, {"tests/test_stable.py": STABLE + "\n"}, "head")
    result = gate(tmp_path, repo, "--heavier-factor", "0.5")
    assert result.code == 2
    assert "--heavier-factor must be at least 1" in result.stderr
