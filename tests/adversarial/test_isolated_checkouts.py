"""No attempt can change what another attempt, or a later run, sees (hostile suites)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gatekit import events, gate
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

REWRITER = """\
from pathlib import Path


def test_rewrites_its_neighbour():
    # A hostile (or careless) test: it "fixes" another test file in the checkout.
    Path(__file__).with_name("test_victim.py").write_text("def test_victim():\\n    pass\\n")
"""


def test_a_test_that_rewrites_another_test_file_cannot_hide_a_regression(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "tests/test_victim.py": "def test_victim():\n    assert 1 + 1 == 2\n",
            "tests/test_a_rewriter.py": "def test_rewrites_its_neighbour():\n    pass\n",
        },
    )
    tag(repo, "v1")
    commit(
        repo,
        {
            "tests/test_victim.py": "def test_victim():\n    assert 1 + 1 == 3  # regression\n",
            "tests/test_a_rewriter.py": REWRITER,
        },
        "a regression, and a test that hides it",
    )

    for attempt in ("first", "again"):  # the second run must not see the first one's writes
        result = gate(tmp_path, repo, "--shards", "1", "--env", "none")

        assert result.code == 1, (attempt, result.stdout, result.stderr)
        assert result.document["introduced"] == ["tests/test_victim.py::test_victim"]
        assert result.document["flaky"] == []
        # The attempts that rewrote the file are never counted: split until the rewriter is
        # alone, it is named unmeasured (`checkout-modified`); the victim is measured alone.
        unmeasured = result.document["unmeasured"]
        assert [(u["files"], u["reason"]) for u in unmeasured] == [
            (["tests/test_a_rewriter.py"], "checkout-modified")
        ]
        assert "tests/test_victim.py" in unmeasured[0]["detail"]
        head = [
            e
            for e in events(tmp_path, result.document["run_id"])
            if e["kind"] == "ShardAttemptRecorded" and e["revision"] == "head"
        ]
        rewriting = [e for e in head if "tests/test_a_rewriter.py" in e["files"]]
        assert rewriting and all(
            e["modified_files"] == ["tests/test_victim.py"]
            and e["failure_kind"] == "checkout-modified"
            for e in rewriting
        )
        assert all(e["failure_kind"] is None for e in head if e not in rewriting)
