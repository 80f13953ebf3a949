"""A hang at head is ended at its file's known time, named by test, confirmed alone and
reported as introduced with both durations; a slow test is never cut; a hang at both revisions
is not introduced and costs no more than `--timeout`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from release_ledger.domain.timing import file_limits, parse_time_limit, shard_timeout
from tests.gatekit import events, gate, run_ledger
from tests.gitrepo import commit, make_repo, tag

FAST = "def test_one():\n    assert True\n"
HANGS = (
    "import time\n\ndef test_ok():\n    pass\n\n"
    "def test_y():\n    while True:\n        time.sleep(0.01)\n"
)
QUICK = "def test_ok():\n    pass\n\ndef test_y():\n    assert 1\n"
SLOW = "import time\n\ndef test_slow():\n    time.sleep(2.0)\n"


def test_limits_are_a_factor_of_the_known_time_with_a_floor_capped_by_the_timeout() -> None:
    known = {"a.py": 0.01, "b.py": 3.0, "c.py": 500.0}
    limits = file_limits(["a.py", "b.py", "c.py", "d.py"], known, timeout_s=1200.0)
    assert limits == {"a.py": 10.0, "b.py": 30.0, "c.py": 1200.0}  # d.py: nothing known
    assert shard_timeout(["a.py", "b.py"], limits, 1200.0) == 140.0  # 2 x 40 + 60
    assert shard_timeout(["a.py", "d.py"], limits, 1200.0) == 1200.0


def test_the_plugins_line_names_the_file_the_test_and_both_times() -> None:
    tail = (
        "release-ledger: start tests/b.py\n.\n"
        "release-ledger: time-limit tests/b.py tests/b.py::test_y[a b] after 10.2 s (limit 10 s)\n"
    )
    killed = parse_time_limit(tail, ["tests/b.py"])
    assert killed is not None
    assert (killed.file, killed.test, killed.after_s, killed.limit_s) == (
        "tests/b.py", "tests/b.py::test_y[a b]", 10.2, 10.0
    )  # fmt: skip
    assert parse_time_limit(tail, ["tests/other.py"]) is None


# A project whose own `addopts` run pytest-xdist: the worker running the hung file names it
# and ends the shard, as the session does without xdist.
XDIST = {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-n 2 -p xdist"\n'}


@pytest.mark.slow
@pytest.mark.parametrize("project", [{}, XDIST], ids=["plain", "own-xdist"])
def test_a_hang_at_head_only_is_named_in_seconds_and_fails_the_gate(
    tmp_path: Path, project: dict[str, str]
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": FAST, "tests/test_b.py": QUICK,
                                "tests/test_c.py": FAST, **project})  # fmt: skip
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": HANGS}, "head: test_y never returns")
    started = time.monotonic()
    result = gate(tmp_path, repo, "--timeout", "600", "--time-floor-s", "3")
    elapsed = time.monotonic() - started
    assert result.code == 1, result.stderr
    document = result.document
    assert "tests/test_b.py::test_y" in document["introduced"]
    (hang,) = document["hung"]
    assert hang["test"] == "tests/test_b.py::test_y" and hang["limit_s"] == 3.0
    assert hang["base_s"] is not None and hang["base_s"] < 1
    assert elapsed < 120, elapsed  # not --timeout (600 s) per round
    shown = run_ledger(tmp_path, "show", str(document["run_id"])).stdout
    assert "hung         tests/test_b.py::test_y hung at head (killed at " in shown
    assert "s at base)" in shown
    kinds = [e["kind"] for e in events(tmp_path, str(document["run_id"]))]
    assert kinds.count("IsolationRecorded") >= 2  # alone at head and at base


@pytest.mark.slow
def test_a_slow_test_at_both_revisions_is_never_cut(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": FAST, "tests/test_slow.py": SLOW})
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": FAST + "\n"}, "head")
    result = gate(tmp_path, repo, "--timeout", "600", "--time-floor-s", "1", "--time-factor", "2")
    assert result.code == 0, result.stderr
    assert result.document["status"] == "passed" and "hung" not in result.document


@pytest.mark.slow
def test_a_hang_at_both_revisions_is_not_introduced_and_bounded_by_the_timeout(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": FAST, "tests/test_b.py": HANGS})
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": FAST + "\n"}, "head")
    started = time.monotonic()
    # default rounds: a timed-out shard naming the running file is split, not run again whole
    result = gate(tmp_path, repo, "--timeout", "6", "--time-floor-s", "2")
    elapsed = time.monotonic() - started
    document = result.document
    assert "tests/test_b.py::test_y" not in document["introduced"]
    assert document["status"] != "passed"
    assert elapsed < 90, elapsed
    timed_out = [
        (e["shard"], e["revision"]) for e in events(tmp_path, str(document["run_id"]))
        if e["kind"] == "ShardAttemptRecorded" and e.get("timed_out")
    ]  # fmt: skip
    assert len(timed_out) == len(set(timed_out)), timed_out  # no shard timed out twice
