"""The local executor runs real pytest subprocesses in real worktrees and observes them."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from release_ledger.adapters.executors.local import LocalExecutor
from release_ledger.adapters.git import Worktrees
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import ShardRun
from tests.gitrepo import commit, git, head, make_repo, write

PASS = "def test_one():\n    assert 1 + 1 == 2\n\ndef test_two():\n    pass\n"
FAIL = "def test_bad():\n    assert 1 == 2\n"
KILLS_ITSELF = "import os, signal\n\ndef test_dies():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
HANGS = "import time\n\ndef test_hangs():\n    time.sleep(60)\n"
GREEDY = (
    "import time\n\n"
    "def test_greedy():\n"
    "    chunks = []\n"
    "    for _ in range(100):\n"
    "        chunks.append(b'x' * (10 * 1024 * 1024))\n"
    "        time.sleep(0.02)\n"
)
SPAWNS_SLEEPER = (
    "import subprocess, sys\n\n"
    "def test_spawns():\n"
    "    proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "    print(f'sleeper={proc.pid}')\n"
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path,
        {
            "tests/test_pass.py": PASS,
            "tests/test_fail.py": FAIL,
            "tests/test_kill.py": KILLS_ITSELF,
            "tests/test_hang.py": HANGS,
            "tests/test_greedy.py": GREEDY,
            "tests/test_spawns.py": SPAWNS_SLEEPER,
        },
    )


@pytest.fixture
def executor(repo: Path, tmp_path: Path) -> Iterator[LocalExecutor]:
    local = LocalExecutor(repo, Worktrees(repo, tmp_path / "cache"), work_dir=tmp_path / "work")
    yield local
    local.cancel_all()
    local.close()


# pytest with `-s`: the test's own prints reach the log tail.
VERBOSE = ("{python}", "-m", "pytest", "-s", "-p", "no:cacheprovider", "--junitxml={junit}",
           "{files}")  # fmt: skip


def shard(commit_sha: str, *files: str, **changes: object) -> ShardRun:
    fields: dict[str, object] = {
        "run_id": "run-1",
        "shard_id": "s1",
        "attempt": 1,
        "revision": "head",
        "commit": commit_sha,
        "files": files,
        "timeout_s": 60.0,
    }
    fields.update(changes)
    return ShardRun.model_validate(fields)


def test_a_passing_shard_exits_0_with_its_report(executor: LocalExecutor, repo: Path) -> None:
    seen = executor.run(shard(head(repo), "tests/test_pass.py"))
    assert seen.exit_code == 0
    assert seen.signal is None
    assert seen.report is not None and b'tests="2"' in seen.report
    assert b'file="tests/test_pass.py"' in seen.report
    assert b"2 passed" in seen.log_tail
    assert seen.rss_mb > 5
    assert seen.seconds > 0
    assert not seen.timed_out and not seen.oom


def test_a_failing_shard_exits_1_with_the_failure_in_its_report(
    executor: LocalExecutor, repo: Path
) -> None:
    seen = executor.run(shard(head(repo), "tests/test_pass.py", "tests/test_fail.py"))
    assert seen.exit_code == 1
    assert seen.report is not None and b'failures="1"' in seen.report
    assert b"1 failed, 2 passed" in seen.log_tail


def test_a_test_that_kills_its_process_is_recorded_as_that_signal(
    executor: LocalExecutor, repo: Path
) -> None:
    seen = executor.run(shard(head(repo), "tests/test_pass.py", "tests/test_kill.py"))
    assert seen.exit_code is None
    assert seen.signal == signal.SIGKILL
    assert seen.report is None
    assert not seen.timed_out and not seen.oom


@pytest.mark.slow
def test_a_hanging_test_hits_the_timeout_and_its_group_is_killed(
    executor: LocalExecutor, repo: Path
) -> None:
    started = time.monotonic()
    seen = executor.run(shard(head(repo), "tests/test_hang.py", timeout_s=2.0))
    assert seen.timed_out
    assert seen.signal == signal.SIGTERM
    assert seen.exit_code is None and seen.report is None
    assert time.monotonic() - started < 15


@pytest.mark.slow
def test_allocating_past_the_memory_limit_is_oom(executor: LocalExecutor, repo: Path) -> None:
    seen = executor.run(shard(head(repo), "tests/test_greedy.py", memory_limit_mb=200))
    assert seen.oom
    assert seen.signal == signal.SIGKILL
    assert seen.report is None
    assert seen.rss_mb > 200


def test_under_the_memory_limit_nothing_is_flagged(executor: LocalExecutor, repo: Path) -> None:
    seen = executor.run(shard(head(repo), "tests/test_pass.py", memory_limit_mb=2000))
    assert seen.exit_code == 0 and not seen.oom


def test_children_left_behind_by_a_shard_are_killed(
    executor: LocalExecutor, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unsandboxed, so the child's pid is this machine's (a sandbox's PID namespace kills it
    # anyway: tests/adversarial/test_sandbox.py).
    monkeypatch.setenv("LEDGER_SANDBOX", "none")
    seen = executor.run(shard(head(repo), "tests/test_spawns.py", command=VERBOSE))
    assert seen.exit_code == 0
    pid = int(seen.log_tail.split(b"sleeper=")[1].split()[0])
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and _state(pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists() or _state(pid) == "Z"


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rfind(")") + 2]


def test_each_revision_runs_in_the_checkout_of_its_own_commit(
    executor: LocalExecutor, repo: Path
) -> None:
    base = head(repo)
    fixed = commit(repo, {"tests/test_fail.py": "def test_bad():\n    assert 2 == 2\n"}, "fix")
    executor.prepare([base, fixed])
    at_base = executor.run(shard(base, "tests/test_fail.py", revision="base"))
    at_head = executor.run(shard(fixed, "tests/test_fail.py"))
    assert (at_base.exit_code, at_head.exit_code) == (1, 0)
    assert executor.checkout_for(base) != executor.checkout_for(fixed)


def test_shards_run_in_parallel_threads_each_with_its_own_report(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    executor.prepare([sha])
    files = ["tests/test_pass.py", "tests/test_fail.py"] * 2
    results: dict[int, object] = {}

    def work(index: int, name: str) -> None:
        results[index] = executor.run(shard(sha, name, shard_id=f"s{index}"))

    threads = [threading.Thread(target=work, args=(i, f)) for i, f in enumerate(files)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    codes = [results[i].exit_code for i in range(len(files))]  # type: ignore[attr-defined]
    assert codes == [0, 1, 0, 1]
    reports = [results[i].report for i in range(len(files))]  # type: ignore[attr-defined]
    assert all(b"test_pass.py" in r for r in reports[0::2])
    assert all(b"test_fail.py" in r for r in reports[1::2])


@pytest.mark.slow
def test_cancel_all_kills_running_shards_and_refuses_new_ones(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    executor.prepare([sha])
    results: list[object] = []
    thread = threading.Thread(
        target=lambda: results.append(executor.run(shard(sha, "tests/test_hang.py")))
    )
    thread.start()
    time.sleep(1.0)
    started = time.monotonic()
    executor.cancel_all()
    thread.join(timeout=10)
    assert time.monotonic() - started < 5
    (seen,) = results
    assert seen.signal == signal.SIGKILL  # type: ignore[attr-defined]
    assert seen.failure_reason == "cancelled"  # type: ignore[attr-defined]
    after = executor.run(shard(sha, "tests/test_pass.py"))
    assert after.failure_reason == "cancelled" and after.exit_code is None


def test_the_users_dirty_working_tree_stays_exactly_as_it_was(
    executor: LocalExecutor, repo: Path
) -> None:
    write(repo, {"tests/test_pass.py": FAIL, "scratch.txt": "mine"})
    status = git(repo, "status", "--porcelain")
    seen = executor.run(shard(head(repo), "tests/test_pass.py"))
    assert seen.exit_code == 0  # the committed file ran, not the local edit
    assert (repo / "tests/test_pass.py").read_text() == FAIL
    assert (repo / "scratch.txt").read_text() == "mine"
    assert git(repo, "status", "--porcelain") == status


def test_the_command_template_is_expanded_into_arguments_never_a_shell(
    executor: LocalExecutor, repo: Path
) -> None:
    command = (
        "{python}",
        "-c",
        "import sys; open(sys.argv[1], 'w').write('<testsuite/>'); print(sys.argv[2:])",
        "{junit}",
        "{files}",
    )
    seen = executor.run(shard(head(repo), "a b.py", "$(touch pwned)", command=command))
    assert seen.exit_code == 0
    assert seen.report == b"<testsuite/>"
    assert b"['a b.py', '$(touch pwned)']" in seen.log_tail
    assert not (executor.checkout_for(head(repo)) / "pwned").exists()


def test_the_log_tail_keeps_only_the_last_64_kib(executor: LocalExecutor, repo: Path) -> None:
    command = ("{python}", "-c", "import sys; sys.stdout.write('a' * 200000 + 'END')")
    seen = executor.run(shard(head(repo), command=command))
    assert len(seen.log_tail) == 64 * 1024
    assert seen.log_tail.endswith(b"END")
    assert seen.report is None


def test_a_missing_test_runner_is_bad_input(executor: LocalExecutor, repo: Path) -> None:
    with pytest.raises(BadInput, match="no-such-runner"):
        executor.run(shard(head(repo), "tests/test_pass.py", command=("no-such-runner", "{files}")))


def test_a_shard_without_files_is_refused_rather_than_running_everything(
    executor: LocalExecutor, repo: Path
) -> None:
    with pytest.raises(ValueError, match="no files"):
        executor.run(shard(head(repo)))


def test_close_removes_temporary_files(repo: Path, tmp_path: Path) -> None:
    local = LocalExecutor(repo, Worktrees(repo, tmp_path / "cache"), python=sys.executable)
    local.run(shard(head(repo), "tests/test_pass.py"))
    work_dir = local.work_dir
    assert work_dir.exists()
    local.close()
    assert not work_dir.exists()


def test_the_users_uncommitted_pytest_config_does_not_reach_a_checkout(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEDGER_WORKTREES_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    write(repo, {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-k nothing"\n'})
    local = LocalExecutor(repo)  # default cache
    try:
        seen = local.run(shard(head(repo), "tests/test_pass.py"))
    finally:
        local.close()
    assert seen.exit_code == 0
    assert b"2 passed" in seen.log_tail


def test_a_big_gate_process_does_not_inflate_a_small_shards_memory(
    executor: LocalExecutor, repo: Path
) -> None:
    # A forked child's ru_maxrss starts at its parent's size; the shard must not inherit it.
    ballast = bytearray(400 * 1024 * 1024)
    for offset in range(0, len(ballast), 4096):
        ballast[offset] = 1
    observed = executor.run(shard(head(repo), "tests/test_pass.py", memory_limit_mb=300))
    assert not observed.oom
    assert observed.exit_code == 0
    assert observed.rss_mb < 300
    del ballast
