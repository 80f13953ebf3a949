"""Ctrl-C, SIGTERM and kill -9 of a running gate: children die, resume reaches the same verdict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gatekit import GATE_DEFAULTS, attempts, events, gate, kinds, run_ledger, start_process
from tests.gitrepo import commit, make_repo, tag

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("unsandboxed")]

CLASSIFICATION = ("status", "introduced", "preexisting", "fixed", "flaky", "unmeasured")


def build(workdir: Path) -> tuple[Path, Path, Path]:
    """A repo whose test_slow blocks while `workdir/hold` exists, logging its pid to `pids`."""
    hold, pids = workdir / "hold", workdir / "pids"
    slow = (
        "import os, time\n\n"
        f"HOLD, PIDS = {str(hold)!r}, {str(pids)!r}\n\n"
        "def test_slow():\n"
        "    with open(PIDS, 'a') as f:\n"
        "        f.write(f'{os.getpid()}\\n')\n"
        "    while os.path.exists(HOLD):\n"
        "        time.sleep(0.05)\n"
    )
    repo = make_repo(
        workdir,
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "tests/test_b.py": "def test_b():\n    assert 0\n",
            "tests/test_slow.py": slow,
        },
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": "def test_a():\n    assert 0\n"}, "regression")
    return repo, hold, pids


@pytest.fixture(scope="module")
def uninterrupted(
    tmp_path_factory: pytest.TempPathFactory, unsandboxed_module: None
) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    repo, _, _ = build(workdir)
    result = gate(workdir, repo, "--shards", "2", "--timeout", "60")
    assert result.code == 1, result.stderr
    document = result.document
    assert document["introduced"] == ["tests/test_a.py::test_a"]
    assert document["preexisting"] == ["tests/test_b.py::test_b"]
    return document


def _pids(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split()]


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead but not yet reaped
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start_held_gate(workdir: Path, measure: str) -> tuple[subprocess.Popen[str], Path, Path]:
    repo, hold, pids = build(workdir)
    hold.touch()
    process = start_process(
        workdir, "gate", "--base", "v1", "--repo", str(repo), *GATE_DEFAULTS,
        "--shards", "2", "--timeout", "60", "--measure", measure, "--json",
    )  # fmt: skip
    try:
        _wait_for(lambda: _pids(pids), 60, "the slow test to start")
    except AssertionError:
        process.kill()
        raise
    return process, hold, pids


def _run_id(workdir: Path) -> str:
    result = run_ledger(workdir, "runs", "--json")
    [run] = [r["run_id"] for r in json.loads(result.stdout)]
    return str(run)


@pytest.mark.parametrize(
    ("signum", "measure"),
    [(signal.SIGINT, "missing"), (signal.SIGTERM, "never")],
    ids=["sigint-while-measuring", "sigterm-while-running-shards"],
)
def test_a_signal_kills_the_children_records_the_interruption_and_resume_concludes(
    tmp_path: Path, signum: int, measure: str, uninterrupted: dict[str, Any]
) -> None:
    process, hold, pids = _start_held_gate(tmp_path, measure)
    process.send_signal(signum)
    try:
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert "ledger resume" in stderr
    children = _pids(pids)
    _wait_for(lambda: not any(_alive(pid) for pid in children), 10, "the children to die")
    assert hold.exists()  # they died of the gate's signal, not by finishing

    run_id = _run_id(tmp_path)
    before = events(tmp_path, run_id)
    assert before[-1]["kind"] == "RunInterrupted"
    done_before = set(attempts(before))

    hold.unlink()
    resumed = run_ledger(tmp_path, "resume", run_id[:8], "--json")
    assert resumed.code == 1, resumed.stderr
    document = resumed.document
    for key in CLASSIFICATION:
        assert document[key] == uninterrupted[key], key
    after = events(tmp_path, run_id)
    assert kinds(after)["RunResumed"] == 1 and after[-1]["kind"] == "RunCompleted"
    # Only what was missing ran again: every (shard, revision) has exactly one attempt.
    counts = attempts(after)
    assert set(counts.values()) == {1}
    assert done_before <= set(counts)


def test_resume_after_kill_9_reaches_the_uninterrupted_verdict(
    tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    process, hold, pids = _start_held_gate(tmp_path, "never")
    process.kill()
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    hold.unlink()  # the orphaned test processes finish on their own
    for pid in _pids(pids):
        _wait_for(lambda pid=pid: not _alive(pid), 20, f"orphan {pid} to finish")

    run_id = _run_id(tmp_path)
    before = events(tmp_path, run_id)
    assert not {"RunInterrupted", "RunCompleted"} & set(kinds(before))

    resumed = run_ledger(tmp_path, "resume", run_id, "--json")
    assert resumed.code == 1, resumed.stderr
    for key in CLASSIFICATION:
        assert resumed.document[key] == uninterrupted[key], key
    counts = attempts(events(tmp_path, run_id))
    assert set(counts.values()) == {1}
    verify = run_ledger(tmp_path, "verify", run_id)
    assert verify.code == 0, verify.stdout + verify.stderr


def test_an_interruption_while_isolating_resumes_only_the_missing_isolations(
    tmp_path: Path,
) -> None:
    """test_r blocks while `hold` exists only when run alone, i.e. in its isolation runs."""
    hold, pids = tmp_path / "hold", tmp_path / "pids"
    alone = (
        "import os, sys, time\n\n"
        f"HOLD, PIDS = {str(hold)!r}, {str(pids)!r}\n\n"
        "def test_r():\n"
        "    if sum(a.startswith('tests/') for a in sys.argv[1:]) == 1:\n"
        "        with open(PIDS, 'a') as f:\n"
        "            f.write(f'{os.getpid()}\\n')\n"
        "        while os.path.exists(HOLD):\n"
        "            time.sleep(0.05)\n"
        "    assert VERDICT\n"
    )
    repo = make_repo(
        tmp_path,
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "tests/test_r.py": alone.replace("VERDICT", "1"),
        },
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_r.py": alone.replace("VERDICT", "0")}, "regression")
    hold.touch()
    process = start_process(
        tmp_path, "gate", "--base", "v1", "--repo", str(repo), *GATE_DEFAULTS,
        "--shards", "1", "--timeout", "60", "--measure", "never", "--json",
    )  # fmt: skip
    try:
        _wait_for(lambda: _pids(pids), 60, "an isolation run to start")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    children = _pids(pids)
    _wait_for(lambda: not any(_alive(pid) for pid in children), 10, "the isolation to die")
    run_id = _run_id(tmp_path)
    before = kinds(events(tmp_path, run_id))
    assert before["IsolationRecorded"] < 2 and before["RunInterrupted"] == 1

    hold.unlink()
    resumed = run_ledger(tmp_path, "resume", run_id, "--json")
    assert resumed.code == 1, resumed.stderr
    assert resumed.document["introduced"] == ["tests/test_r.py::test_r"]
    after = events(tmp_path, run_id)
    isolated = [(e["file"], e["revision"]) for e in after if e["kind"] == "IsolationRecorded"]
    assert sorted(isolated) == [("tests/test_r.py", "base"), ("tests/test_r.py", "head")]
    assert set(attempts(after).values()) == {1}
