"""An attempt's tracked files are compared with what they were before its tests ran, without
running git in the checkout afterwards (issue 26, part 4)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from release_ledger.adapters.executors.checkout_guard import changed_tracked, tracked_snapshot
from release_ledger.domain.assessment import CHECKOUT_MODIFIED
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import Observation
from release_ledger.domain.observed import assess_observation
from release_ledger.ledger.settings import checked_outputs
from tests import gatekit
from tests.gitrepo import commit, make_repo, tag


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path,
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "tests/snapshots/out.txt": "old\n",
            "src/pkg.py": "X = 1\n",
        },
    )


def test_an_untouched_checkout_has_no_change(checkout: Path) -> None:
    before = tracked_snapshot(str(checkout))
    (checkout / "untracked.txt").write_text("new files are the suite's own business")
    assert changed_tracked(str(checkout), before) == []


def test_a_file_rewritten_with_the_same_content_is_not_a_change(checkout: Path) -> None:
    before = tracked_snapshot(str(checkout))
    (checkout / "src" / "pkg.py").write_text("X = 1\n")
    assert changed_tracked(str(checkout), before) == []


def test_changed_deleted_and_retyped_files_are_named(checkout: Path) -> None:
    before = tracked_snapshot(str(checkout))
    (checkout / "src" / "pkg.py").write_text("X = 2\n")
    (checkout / "tests" / "test_a.py").unlink()
    (checkout / "tests" / "snapshots" / "out.txt").unlink()
    (checkout / "tests" / "snapshots" / "out.txt").symlink_to("/etc/hostname")
    assert changed_tracked(str(checkout), before) == [
        "src/pkg.py", "tests/snapshots/out.txt", "tests/test_a.py",
    ]  # fmt: skip


def test_a_change_hidden_behind_restored_times_and_size_is_still_seen(checkout: Path) -> None:
    target = checkout / "src" / "pkg.py"
    before = tracked_snapshot(str(checkout))
    seen = target.stat()
    target.write_text("X = 9\n")  # same size
    os.utime(target, ns=(seen.st_atime_ns, seen.st_mtime_ns))  # the change time cannot be reset
    assert changed_tracked(str(checkout), before) == ["src/pkg.py"]


def test_declared_outputs_may_change(checkout: Path) -> None:
    before = tracked_snapshot(str(checkout))
    (checkout / "tests" / "snapshots" / "out.txt").write_text("regenerated\n")
    assert changed_tracked(str(checkout), before, ["tests/snapshots/*"]) == []
    assert changed_tracked(str(checkout), before, ["docs/*"]) == ["tests/snapshots/out.txt"]


def test_an_attempt_that_changed_its_checkout_is_unmeasured_and_says_which_files() -> None:
    report = (
        b'<testsuite tests="1"><testcase classname="tests.test_a" name="test_a" '
        b'file="tests/test_a.py"/></testsuite>'
    )
    passed = Observation(exit_code=0, report=report)
    modified = passed.with_modified_checkout(["tests/test_victim.py"])

    assert assess_observation(passed, ["tests/test_a.py"]).measured
    assessment = assess_observation(modified, ["tests/test_a.py"])
    assert not assessment.measured and assessment.reason == CHECKOUT_MODIFIED
    assert "tests/test_victim.py" in assessment.detail
    assert modified.modified_files == ("tests/test_victim.py",)
    assert passed.with_modified_checkout([]) is passed


def test_an_attempt_that_already_failed_keeps_its_own_failure() -> None:
    cancelled = Observation.failed("cancelled", "cancelled")
    kept = cancelled.with_modified_checkout(["a.py"])
    assert kept.failure_kind == "cancelled" and kept.modified_files == ("a.py",)


@pytest.mark.parametrize("pattern", ["*", "**", "*/*", "/etc/passwd", "?"])
def test_outputs_that_would_switch_the_check_off_are_refused(pattern: str) -> None:
    with pytest.raises(BadInput, match="outputs"):
        checked_outputs([pattern])


REGENERATES = """\
from pathlib import Path


def test_regenerates_its_snapshot():
    Path("tests/snapshots/out.txt").write_text("regenerated\\n")
"""


@pytest.mark.usefixtures("unsandboxed")
def test_a_suite_that_rewrites_only_its_declared_outputs_is_measured(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "tests/snapshots/out.txt": "old\n",
            "pyproject.toml": '[tool.release-ledger]\noutputs = ["tests/snapshots/*"]\n',
        },
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_regen.py": REGENERATES})

    result = gatekit.gate(tmp_path, repo, "--env", "none", "--no-release-builds")

    assert result.code == 0, result.document.get("unmeasured") or result.stderr
    assert result.document["status"] == "passed"
