"""Resident workers: shards of one revision run one after another in one long-lived pytest
process, each keeping a shard process's guarantees (real git repositories, real pytest)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from release_ledger.adapters.executors.local import SPEC, LocalExecutor, resident_command
from release_ledger.adapters.executors.supervisor import tagged, tmpfs_mounts, tmpfs_used_kb
from release_ledger.adapters.git import Worktrees
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import (
    DEFAULT_PYTEST_COMMAND,
    PLAIN_PYTEST_COMMAND,
    EnvironmentRequest,
    ShardRun,
)
from release_ledger.domain.junit import Report, read_report, test_id
from tests.gitrepo import head, make_repo
from tests.test_local_executor import FAIL, GREEDY, HANGS, KILLS_ITSELF, PASS

# Module state: passes only when its module is imported afresh for the shard.
ONCE = "SEEN = []\n\ndef test_once():\n    SEEN.append(1)\n    assert SEEN == [1]\n"
SPAWNS_SLEEPER = (
    "import subprocess, sys\n\n"
    "def test_spawns():\n"
    "    proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "    print(f'sleeper={proc.pid}')\n"
    "    open(f'{__import__(\"os\").environ[\"HOME\"]}/sleeper', 'w').write(str(proc.pid))\n"
)
REWRITES = (
    "import pathlib\n\n"
    "def test_rewrites():\n"
    "    pathlib.Path(__file__).with_name('test_pass.py').write_text('def test_x(): pass\\n')\n"
)
# Reads what it inherited as stdin: /dev/null in a shard process, never the worker's requests.
READS_STDIN = (
    "import subprocess, sys\n\n"
    "def test_reads_stdin():\n"
    "    assert subprocess.run([sys.executable, '-c', 'import sys; print(sys.stdin.read())'],\n"
    "                          capture_output=True, timeout=20).stdout.strip() == b''\n"
)
LEAVES_TMP = (
    "import os, tempfile\n\n"
    "def test_leaves():\n"
    "    assert not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith('left-')]\n"
    "    open(os.path.join(tempfile.gettempdir(), 'left-behind'), 'w').write('x')\n"
)

# Reads the shard's command line as a test of a shard process can.
READS_ARGV = (
    "import sys\n\n"
    "def test_argv():\n"
    "    assert sys.argv[0].endswith('__main__.py')\n"
    "    assert [a for a in sys.argv if a.startswith('tests/')] == ['tests/test_argv.py']\n"
)
# Marks an installed module, and binds the session's stderr, as structlog does at import.
MARKS_INSTALLED = (
    "import email, sys\n\n"
    "def test_marks():\n"
    "    assert not hasattr(email, 'MARKED_BY_A_SHARD')\n"
    "    email.MARKED_BY_A_SHARD = sys.stderr\n"
)
# Forks a process that outlives the test (and holds every fd the test's process had).
FORKS_SLEEPER = (
    "import os, time\n\n"
    "def test_forks():\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(60)\n"
    "        os._exit(0)\n"
)
# A package of the checkout that keeps 60 MB once imported, and a test that imports it.
KEEPS_60 = (
    "KEPT = bytearray(60 * 1024 * 1024)\nfor i in range(0, len(KEPT), 4096):\n    KEPT[i] = 1\n"
)
IMPORTS_PKG = "import pkg\n\ndef test_uses():\n    assert pkg.KEPT\n"
# A module of the checkout, imported by one shard; the next finds its bytecode already there.
HELPER = "VALUE = 1\n"
IMPORTS_HELPER = "import helper\n\ndef test_imports():\n    assert helper.VALUE == 1\n"
FINDS_HELPER_COMPILED = (
    "import importlib.util, os\n\n"
    "def test_compiled():\n"
    "    source = os.path.join(os.getcwd(), 'helper.py')\n"
    "    assert os.path.exists(importlib.util.cache_from_source(source))\n"
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path,
        {
            "tests/test_pass.py": PASS,
            "tests/test_fail.py": FAIL,
            "tests/test_once.py": ONCE,
            "tests/test_kill.py": KILLS_ITSELF,
            "tests/test_hang.py": HANGS,
            "tests/test_greedy.py": GREEDY,
            "tests/test_spawns.py": SPAWNS_SLEEPER,
            "tests/test_rewrites.py": REWRITES,
            "tests/test_leaves.py": LEAVES_TMP,
            "tests/test_stdin.py": READS_STDIN,
            "tests/test_argv.py": READS_ARGV,
            "tests/test_marks.py": MARKS_INSTALLED,
            "tests/test_forks.py": FORKS_SLEEPER,
            "tests/test_uses.py": IMPORTS_PKG,
            "pkg/__init__.py": KEEPS_60,
            "helper.py": HELPER,
            "tests/test_imports_helper.py": IMPORTS_HELPER,
            "tests/test_compiled.py": FINDS_HELPER_COMPILED,
        },
    )


@pytest.fixture
def executor(repo: Path, tmp_path: Path) -> Iterator[LocalExecutor]:
    local = LocalExecutor(
        repo, Worktrees(repo, tmp_path / "cache"), work_dir=tmp_path / "work", resident=True
    )
    yield local
    local.cancel_all()
    local.close()


PASS_FILE = "tests/test_pass.py"


def shard(commit_sha: str, *files: str, **changes: object) -> ShardRun:
    fields: dict[str, object] = {
        "run_id": "run-1", "shard_id": "s1", "attempt": 1, "revision": "head",
        "commit": commit_sha, "files": files, "timeout_s": 60.0,
        "command": DEFAULT_PYTEST_COMMAND,
    }  # fmt: skip
    fields.update(changes)
    return ShardRun.model_validate(fields)


def sleepers(executor: LocalExecutor) -> list[int]:
    """The gate's processes (by its tag, sandboxed or not) that are a test's sleeper."""
    found = []
    for pid in tagged(executor.tag, prefix=True):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"time.sleep(60)" in cmdline:
            found.append(pid)
    return found


def outcomes(report: bytes | None) -> dict[str, str]:
    assert report is not None
    read = read_report(report)
    assert isinstance(read, Report), read
    return {test_id(case): case.outcome for case in read.cases}


def test_the_gates_command_runs_resident_and_a_command_without_its_plugin_does_not() -> None:
    assert resident_command(DEFAULT_PYTEST_COMMAND)
    assert not resident_command(PLAIN_PYTEST_COMMAND)
    assert not resident_command(("{python}", "-m", "unittest", "{files}"))


def test_shards_share_one_worker_and_each_has_its_own_report(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    first = executor.run(shard(sha, "tests/test_pass.py"))
    second = executor.run(shard(sha, "tests/test_fail.py", shard_id="s2"))
    assert (first.worker, second.worker) == ("1.1", "1.2")
    assert outcomes(first.report) == {
        "tests/test_pass.py::test_one": "passed", "tests/test_pass.py::test_two": "passed",
    }  # fmt: skip
    assert outcomes(second.report) == {"tests/test_fail.py::test_bad": "failed"}
    assert (first.exit_code, second.exit_code) == (0, 1)
    assert b"test_bad" in second.log_tail and b"test_one" not in second.log_tail
    assert second.seconds > 0 and second.rss_mb > 0


def test_a_worker_outlives_the_thread_whose_shard_started_it(
    executor: LocalExecutor, repo: Path
) -> None:
    """bubblewrap's `--die-with-parent` kills a process when the thread that started it
    ends: a worker started for a step's thread (base's collection) must still serve the
    next shard of its revision, from another thread."""
    sha = head(repo)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(executor.run(shard(sha, PASS_FILE))))
    thread.start()
    thread.join()
    time.sleep(0.5)  # the parent-death signal, had it been sent, has killed it by now
    second = executor.run(shard(sha, PASS_FILE, shard_id="s2"))
    assert (seen[0].worker, second.worker) == ("1.1", "1.2")
    assert outcomes(second.report) == {
        "tests/test_pass.py::test_one": "passed", "tests/test_pass.py::test_two": "passed",
    }  # fmt: skip


def test_a_test_module_is_imported_afresh_by_each_shard(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    runs = [executor.run(shard(sha, "tests/test_once.py", attempt=n)) for n in (1, 2, 3)]
    assert [r.worker for r in runs] == ["1.1", "1.2", "1.3"]
    assert all(outcomes(r.report) == {"tests/test_once.py::test_once": "passed"} for r in runs)


def test_a_test_sees_its_shards_command_line_in_sys_argv(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    first = executor.run(shard(sha, "tests/test_pass.py"))
    argv = executor.run(shard(sha, "tests/test_argv.py"))
    assert (first.worker, argv.worker) == ("1.1", "1.2")
    assert outcomes(argv.report) == {"tests/test_argv.py::test_argv": "passed"}


def test_what_a_shards_session_kept_is_freed_and_each_shard_measured_its_own_peak(
    executor: LocalExecutor, repo: Path
) -> None:
    """Each shard imports the checkout's package afresh (60 MB). pytest's rewriter of the
    plugins' asserts once held every ended session: the worker grew 30-60 MB a shard, and
    a 50 ms shard fell between the memory samples."""
    sha = head(repo)
    runs = [executor.run(shard(sha, "tests/test_uses.py", attempt=n)) for n in range(1, 6)]
    assert [r.worker for r in runs] == [f"1.{n}" for n in range(1, 6)]
    assert all(r.exit_code == 0 for r in runs)
    first = runs[0].rss_mb
    assert first >= 60
    assert all(first - 15 <= r.rss_mb <= first + 15 for r in runs[1:]), [r.rss_mb for r in runs]
    [idle] = [lane for lanes in executor._idle.values() for lane in lanes]
    assert idle.worker.session_kb() / 1024 < first - 40  # the package's 60 MB went with it


def test_a_shard_that_kills_its_process_is_observed_dead_and_the_worker_goes_on(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    executor.run(shard(sha, "tests/test_pass.py"))
    died = executor.run(shard(sha, "tests/test_kill.py"))
    assert died.signal == 9 and died.exit_code is None and died.report is None
    assert b"tests/test_kill.py" in died.log_tail  # the plugin's start line names the file
    after = executor.run(shard(sha, "tests/test_pass.py"))
    assert after.worker == "1.3" and after.exit_code == 0  # only the shard's child died


def test_what_a_shard_changes_in_installed_modules_never_reaches_the_next(
    executor: LocalExecutor, repo: Path
) -> None:
    """structlog binds `sys.stderr` (the session's capture stream) when imported: kept from
    one shard's session to the next, it failed 18 tests of a real pair its CI passes."""
    sha = head(repo)
    runs = [executor.run(shard(sha, "tests/test_marks.py", attempt=n)) for n in (1, 2)]
    assert [r.worker for r in runs] == ["1.1", "1.2"]
    for run in runs:
        assert outcomes(run.report) == {"tests/test_marks.py::test_marks": "passed"}


def test_a_hang_is_timed_out_and_the_worker_replaced(executor: LocalExecutor, repo: Path) -> None:
    sha = head(repo)
    hung = executor.run(shard(sha, "tests/test_hang.py", timeout_s=2.0))
    assert hung.timed_out and hung.seconds < 10
    assert executor.run(shard(sha, "tests/test_pass.py")).exit_code == 0


def test_a_shard_over_its_memory_limit_is_killed_as_oom(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    small = executor.run(shard(sha, "tests/test_pass.py", memory_limit_mb=400))
    greedy = executor.run(shard(sha, "tests/test_greedy.py", memory_limit_mb=400))
    assert greedy.oom and greedy.rss_mb > 300
    assert small.rss_mb < 300  # the worker's peak is reset for each shard
    assert executor.run(shard(sha, "tests/test_pass.py", memory_limit_mb=400)).exit_code == 0


def test_workers_watched_from_their_first_instant_are_never_measured_by_the_hosts_disk(
    executor: LocalExecutor, repo: Path
) -> None:
    """Each shard after a killed worker starts a new one, sampled while its sandbox is still
    being set up (a stop's CI once saw 27 GB and a pass killed as out of memory)."""
    sha = head(repo)
    for _ in range(4):
        executor.run(shard(sha, "tests/test_kill.py", memory_limit_mb=400))
        fresh = executor.run(shard(sha, "tests/test_pass.py", memory_limit_mb=400))
        assert fresh.exit_code == 0 and not fresh.oom and fresh.rss_mb < 300


def test_a_tmpfs_is_measured_only_where_its_mount_is(tmp_path: Path) -> None:
    mounts = tmpfs_mounts(Path("/proc/self/mountinfo").read_text())
    device, point = next(
        (device, point) for device, point in reversed(mounts) if os.path.isdir(point)
    )
    assert tmpfs_used_kb(point, device) is not None
    assert tmpfs_used_kb(str(tmp_path), device) is None  # a path elsewhere: not that tmpfs
    assert tmpfs_used_kb(str(tmp_path / "absent"), device) is None


def test_processes_a_shard_leaves_are_killed_and_the_worker_kept(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    spawned = executor.run(shard(sha, "tests/test_spawns.py", command=(
        *DEFAULT_PYTEST_COMMAND[:-1], "-s", "{files}")))  # fmt: skip
    assert spawned.exit_code == 0 and b"sleeper=" in spawned.log_tail
    deadline = time.monotonic() + 5
    while sleepers(executor) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleepers(executor) == []  # killed when its shard ended, the worker spared
    again = executor.run(shard(sha, "tests/test_pass.py", command=(
        *DEFAULT_PYTEST_COMMAND[:-1], "-s", "{files}")))  # fmt: skip
    assert again.worker == "1.2"


def test_a_shard_that_rewrites_its_checkout_is_unmeasured_and_the_next_sees_it_pristine(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    changed = executor.run(shard(sha, "tests/test_rewrites.py"))
    assert changed.failure_kind == "checkout-modified"
    assert changed.modified_files == ("tests/test_pass.py",)
    after = executor.run(shard(sha, "tests/test_pass.py"))
    assert after.worker == "2.1"
    assert set(outcomes(after.report)) == {
        "tests/test_pass.py::test_one", "tests/test_pass.py::test_two"
    }  # fmt: skip


def test_a_shard_ends_when_its_process_does_though_a_process_it_forked_lives_on(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    forked = executor.run(shard(sha, "tests/test_forks.py"))
    assert forked.exit_code == 0 and not forked.timed_out
    assert forked.seconds < 30  # not the sleeper's 60 s
    assert executor.run(shard(sha, "tests/test_pass.py")).worker == "1.2"


def test_a_shards_temporary_files_are_gone_before_the_next(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    runs = [executor.run(shard(sha, "tests/test_leaves.py", attempt=n)) for n in (1, 2)]
    assert [r.worker for r in runs] == ["1.1", "1.2"]
    assert [r.exit_code for r in runs] == [0, 0]


def test_a_file_past_its_time_limit_ends_the_shards_process_with_the_plugins_line(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    executor.run(shard(sha, "tests/test_pass.py"))
    limited = executor.run(
        shard(sha, "tests/test_hang.py", file_limits={"tests/test_hang.py": 1.0})
    )
    assert limited.exit_code == 124
    assert b"time-limit tests/test_hang.py" in limited.log_tail
    assert executor.run(shard(sha, "tests/test_pass.py")).worker == "1.3"  # its child ended


def test_cancel_kills_a_running_worker_shard(executor: LocalExecutor, repo: Path) -> None:
    sha = head(repo)
    threading.Timer(1.5, executor.cancel_all).start()
    started = time.monotonic()
    cancelled = executor.run(shard(sha, "tests/test_hang.py"))
    assert cancelled.failure_kind == "cancelled" and time.monotonic() - started < 20


def test_a_workers_shards_compile_its_checkouts_modules_once(
    executor: LocalExecutor, repo: Path
) -> None:
    """Bytecode is written next to the sources in the worker's own checkout, as the project's
    CI writes it, so its next shards do not compile the project again (networkx: 0.6 s of CPU
    per shard); nothing is written in the user's repository."""
    sha = head(repo)
    imports = executor.run(shard(sha, "tests/test_imports_helper.py"))
    compiled = executor.run(shard(sha, "tests/test_compiled.py", shard_id="s2"))
    assert (imports.worker, compiled.worker) == ("1.1", "1.2")
    assert outcomes(compiled.report) == {"tests/test_compiled.py::test_compiled": "passed"}
    assert not list(repo.rglob("*.pyc"))


def test_revisions_never_share_a_worker(executor: LocalExecutor, repo: Path) -> None:
    sha = head(repo)
    (repo / "tests" / "test_pass.py").write_text(PASS + "\ndef test_three():\n    pass\n")
    os.system(f"git -C {repo} commit -qam three")
    newer = head(repo)
    base = executor.run(shard(sha, "tests/test_pass.py", revision="base"))
    candidate = executor.run(shard(newer, "tests/test_pass.py"))
    assert (base.worker, candidate.worker) == ("1.1", "2.1")
    assert len(outcomes(candidate.report)) == 3 and len(outcomes(base.report)) == 2


def test_a_test_reading_stdin_reads_nothing_and_the_next_shard_still_runs(
    executor: LocalExecutor, repo: Path
) -> None:
    sha = head(repo)
    verbose = (*DEFAULT_PYTEST_COMMAND[:-1], "-s", "{files}")
    read = executor.run(shard(sha, "tests/test_stdin.py", command=verbose))
    after = executor.run(shard(sha, "tests/test_pass.py", command=verbose))
    assert (read.exit_code, after.exit_code) == (0, 0)
    assert (read.worker, after.worker) == ("1.1", "1.2")


def test_shard_processes_fresh_runs_each_shard_in_a_process_of_its_own(repo: Path) -> None:
    options = SPEC.validate({"shard_processes": "fresh"})
    assert SPEC.recorded(options) == {"shard_processes": "fresh"}
    fresh = SPEC.build(repo, options, EnvironmentRequest())
    try:
        sha = head(repo)
        runs = [fresh.run(shard(sha, "tests/test_pass.py", attempt=n)) for n in (1, 2)]
    finally:
        fresh.close()
    assert [(r.worker, r.exit_code) for r in runs] == [("", 0), ("", 0)]


def test_an_unknown_shard_processes_value_is_one_line_naming_the_flag() -> None:
    with pytest.raises(BadInput, match=r"^--shard-processes: .*'resident' or 'fresh'"):
        SPEC.validate({"shard_processes": "forked"})


def test_idle_workers_beyond_two_per_core_are_retired(
    executor: LocalExecutor, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    shas = [head(repo)]
    for n in (2, 3):
        (repo / "tests" / "test_pass.py").write_text(PASS + f"\ndef test_more_{n}():\n    pass\n")
        os.system(f"git -C {repo} commit -qam more{n}")
        shas.append(head(repo))
    for sha in shas:
        executor.run(shard(sha, "tests/test_pass.py"))
    idle = [lane for lanes in executor._idle.values() for lane in lanes]
    assert len(idle) == 2 and len(executor._lanes) == 2
    assert {lane.worker.alive for lane in idle} == {True}
