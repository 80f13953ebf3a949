"""Flaky interactions, retries of unmeasured shards, and reuse of earlier measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gatekit import GATE_DEFAULTS, attempts, events, gate, kinds, run_ledger, shard_of
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

PASS = "def test_ok():\n    pass\n"


def test_a_cross_file_interaction_is_flaky_passing_default_failing_strict(tmp_path: Path) -> None:
    """test_victim fails only when test_writer (imported first in the same process) set a flag."""
    victim = "import os\n\ndef test_victim():\n    assert 'GATE_TEST_LEAK' not in os.environ\n"
    repo = make_repo(tmp_path, {"tests/test_writer.py": PASS, "tests/test_victim.py": victim})
    tag(repo, "v1")
    leaky = "import os\n\nos.environ['GATE_TEST_LEAK'] = '1'\n\n" + PASS
    commit(repo, {"tests/test_writer.py": leaky}, "leaks a global")
    result = gate(tmp_path, repo, "--shards", "1", "--timeout", "60")
    document = result.document
    assert result.code == 0, result.stderr
    assert document["status"] == "passed"
    assert document["flaky"] == ["tests/test_victim.py::test_victim"]
    assert document["introduced"] == []
    evs = events(tmp_path, document["run_id"])
    isolated = {(e["file"], e["revision"]): e["exit_code"] for e in evs
                if e["kind"] == "IsolationRecorded"}  # fmt: skip
    assert isolated[("tests/test_victim.py", "head")] == 0

    strict = run_ledger(tmp_path, "verdict", document["run_id"], "--rule", "strict", "--json")
    assert strict.code == 1
    assert strict.document["status"] == "failed"
    assert strict.document["flaky"] == ["tests/test_victim.py::test_victim"]


@pytest.mark.usefixtures("unsandboxed")  # the marker file is in the test's tmp_path
def test_a_shard_unmeasured_once_is_retried_and_completed_siblings_are_not_rerun(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "died-once"
    once = (
        "import os, signal\n\n"
        f"MARKER = {str(marker)!r}\n\n"
        "def test_once():\n"
        "    if not os.path.exists(MARKER):\n"
        "        open(MARKER, 'w').close()\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    repo = make_repo(
        tmp_path,
        {"tests/test_a.py": PASS, "tests/test_b.py": PASS, "tests/test_once.py": PASS},
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_once.py": once}, "dies the first time")
    # --measure never: nothing runs before the shards, so the first death is a shard's.
    result = gate(tmp_path, repo, "--shards", "3", "--measure", "never", "--timeout", "60")
    document = result.document
    assert result.code == 0, result.stderr
    assert marker.exists()
    assert document["status"] == "passed" and document["retry_shards"] == []
    evs = events(tmp_path, document["run_id"])
    counts = attempts(evs)
    retried = shard_of(evs, "tests/test_once.py")
    assert counts[(retried, "head")] == 2
    assert counts[(retried, "base")] == 1
    for sibling in ("tests/test_a.py", "tests/test_b.py"):
        shard = shard_of(evs, sibling)
        assert counts[(shard, "head")] == counts[(shard, "base")] == 1
    assert kinds(evs)["ShardSplit"] == 0


def test_a_repeat_gate_reuses_measurements_and_the_baseline(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {"tests/test_a.py": PASS, "tests/test_b.py": PASS, "tests/test_c.py": "def test_c():\n"
         "    assert 0\n"},
    )  # fmt: skip
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": "def test_ok():\n    assert 0\n"}, "regression")
    first = gate(tmp_path, repo, "--shards", "2", "--timeout", "60")
    assert first.code == 1, first.stderr
    first_id = first.document["run_id"]

    second = run_ledger(
        tmp_path, "gate", "--base", "v1", "--repo", str(repo), *GATE_DEFAULTS, "--shards", "2"
    )
    assert second.code == 1, second.stderr
    said = [line for line in second.stdout.splitlines() if "base reused from" in line]
    assert said and first_id[:12] in said[0], second.stdout
    runs = json.loads(run_ledger(tmp_path, "runs", "--json").stdout)
    second_id = next(r["run_id"] for r in runs if r["run_id"] != first_id)
    evs = events(tmp_path, second_id)
    count = kinds(evs)
    assert count["MeasurementReused"] == 3
    # Nothing measured alone: the head shards measured their files in place (again).
    measured = [e for e in evs if e["kind"] == "FileMeasured"]
    assert len(measured) == 3 and {e["source"] for e in measured} == {"shard"}
    assert all(e["from_run"] == first_id for e in evs if e["kind"] == "MeasurementReused")
    # Every base file's results come from the first gate (one event per earlier attempt they
    # came from: how many depends on how the two plans grouped the files).
    assert count["BaselineReused"] >= 1
    assert all(a[1] == "head" for a in attempts(evs))
    verdict = run_ledger(tmp_path, "verdict", second_id, "--json").document
    assert verdict["baseline_reused"] == [first_id]
    assert verdict["introduced"] == first.document["introduced"] == ["tests/test_a.py::test_ok"]
    assert verdict["preexisting"] == ["tests/test_c.py::test_c"]
    story = run_ledger(tmp_path, "show", second_id).stdout
    assert story.count("MeasurementReused") == 3, story
    assert story.count("BaselineReused") == count["BaselineReused"], story
