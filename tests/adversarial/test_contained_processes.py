"""Every process a shard starts dies with the shard, and with the gate (kill -9 included).

These run the shards unsandboxed (`LEDGER_SANDBOX=none`): without bubblewrap's PID namespace
the shard's session and tag must still find what escaped. The sandboxed case is in
`test_sandbox.py`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from release_ledger.adapters.executors.local import LocalExecutor
from release_ledger.domain.execution import EnvironmentRequest, ShardRun
from tests.gatekit import start_process
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

# A test that starts a daemon the classic way (fork, setsid, fork again): it leaves the
# shard's session and process group, so only the shard's tag can still find it.
ESCAPER = """\
import contextlib
import os
import time
from pathlib import Path


def test_starts_a_daemon_and_waits():
    marks = Path(os.environ["MARKS"])
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            (marks / f"daemon-{os.getpid()}").write_text("")
            time.sleep(300)
        os._exit(0)
    (marks / f"test-{os.getpid()}").write_text("")
    time.sleep(float(os.environ.get("HOLD", "0")))
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def marked(marks: Path, prefix: str, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [int(p.name.split("-")[1]) for p in marks.glob(f"{prefix}-*")]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no {prefix} started")


def repo_with_escaper(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path, {"tests/test_escape.py": ESCAPER})
    tag(repo, "v1")
    commit(repo, {"tests/test_other.py": "def test_other():\n    pass\n"})
    return repo


def test_a_daemon_that_left_the_shards_session_dies_with_the_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("MARKS", str(marks))
    monkeypatch.setenv("LEDGER_SANDBOX", "none")
    repo = repo_with_escaper(tmp_path)
    sha = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # The suite learns where to leave its marks from a variable the gate passes by name.
    local = LocalExecutor(repo, environment_request=EnvironmentRequest(pass_env=("MARKS",)))
    try:
        seen = local.run(
            ShardRun(
                run_id="r",
                shard_id="s1",
                attempt=1,
                revision="head",
                commit=sha,
                files=("tests/test_escape.py",),
                timeout_s=60,
            )
        )
    finally:
        local.close()

    assert seen.exit_code == 0, seen.log_tail
    (daemon,) = marked(marks, "daemon")
    deadline = time.monotonic() + 5
    while alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(daemon)


def test_after_kill_9_of_the_gate_no_test_process_of_it_is_alive_10_s_later(
    tmp_path: Path,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    repo = repo_with_escaper(tmp_path)
    os.environ["MARKS"] = str(marks)
    os.environ["HOLD"] = "300"
    os.environ["LEDGER_SANDBOX"] = "none"
    try:
        gate = start_process(
            tmp_path, "gate", "--base", "v1", "--repo", str(repo), "--env", "none",
            "--measure", "never", "--questions", "0", "--pass-env", "MARKS", "--pass-env", "HOLD",
        )  # fmt: skip
    finally:
        del os.environ["MARKS"], os.environ["HOLD"], os.environ["LEDGER_SANDBOX"]
    try:
        tests = marked(marks, "test", timeout=60)
        daemons = marked(marks, "daemon", timeout=60)
        gate.send_signal(signal.SIGKILL)
        gate.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in tests + daemons) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p for p in tests + daemons if alive(p)] == []
    finally:
        if gate.poll() is None:
            gate.kill()
        for pid in marked(marks, "test", 0.1) + marked(marks, "daemon", 0.1):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_dead_gates_scratch_folder_is_removed_by_the_next_executor(tmp_path: Path) -> None:
    import tempfile

    dead = subprocess.Popen(["true"])
    dead.wait()
    left = Path(tempfile.gettempdir()) / f"ledger-local-{dead.pid}-leftover"
    left.mkdir()
    (left / "junit.xml").write_text("<testsuite/>")
    repo = repo_with_escaper(tmp_path)

    LocalExecutor(repo).close()

    assert not left.exists()
