"""Run shards as local subprocesses in clean worktrees and observe exactly what happened.

Each shard runs in its own session (process group), so a timeout, a memory overrun or a
Ctrl-C kills the whole tree it spawned, and nothing outlives the shard.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from adapters.git import Worktrees
from adapters.pytest_plugin import with_plugin_path
from domain.errors import BadInput
from domain.execution import Observation, ShardRun, expand_command

LOG_TAIL_BYTES = 64 * 1024
TERM_GRACE_S = 1.0
MEMORY_POLL_S = 0.05  # with a memory limit: fast enough to catch a runaway allocation
MEASURE_POLL_S = 0.1  # without one: only the peak RSS of the tree is sampled
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _read_stat(pid: str) -> tuple[int, int] | None:
    """(session id, rss in kB) from /proc/<pid>/stat, or None when the process is gone.

    Field 6 is the session, field 24 the resident pages (the same figure as VmRSS in
    /proc/<pid>/status, in one short read).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # fields[0] is field 3, the state
    if len(fields) < 22:
        return None
    return int(fields[3]), int(fields[21]) * _PAGE_KB


def _high_water_kb(pid: int) -> int:
    """VmHWM of a process: its peak resident size since it exec'd (0 when gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class _SessionScanner:
    """Finds a session's processes cheaply enough to poll every 50 ms.

    A process never joins an existing session it was not born into, so a pid seen outside the
    session stays outside until it disappears from /proc; only new pids are read again.
    """

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self._foreign: set[str] = set()

    def members(self) -> list[tuple[int, int]]:
        """(pid, rss in kB) of every live process in the session."""
        try:
            listing = {entry for entry in os.listdir("/proc") if entry.isdigit()}
        except OSError:
            return []
        self._foreign &= listing
        found: list[tuple[int, int]] = []
        for pid in listing - self._foreign:
            stat = _read_stat(pid)
            if stat is None:
                continue
            if stat[0] == self.sid:
                found.append((int(pid), stat[1]))
            else:
                self._foreign.add(pid)
        return found


def _kill_session(sid: int, sig: int) -> None:
    """Signal the process group and any member that moved to another group of the session."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    for pid, _ in _SessionScanner(sid).members():
        if pid != sid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


@dataclass
class _Running:
    proc: subprocess.Popen[bytes]
    cancelled: bool = False
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Watch:
    """What the watchdog saw: peak tree RSS and why (if at all) it killed the shard."""

    peak_kb: int = 0
    timed_out: bool = False
    oom: bool = False


class LocalExecutor:
    """The `Executor` port on this machine: one subprocess per shard, in parallel threads.

    The memory limit is enforced by a watchdog polling the tree's RSS, not by RLIMIT_AS: under
    an address-space limit Python raises MemoryError, pytest reports it as an ordinary test
    failure and exits 1, so an overrun would look like a regression instead of a dead shard
    (and RLIMIT_AS counts reserved, not used, memory, which breaks threaded runtimes).
    Peaks come from /proc only (the tree's summed VmRSS, and the shard process's VmHWM, which
    exec resets), never from `wait4`'s `ru_maxrss`: a forked child inherits the gate's own
    resident pages until it execs, so `ru_maxrss` reports at least the size of the process
    that started it (a 500 MB test runner made every 40 MB shard look like 500 MB).
    """

    name = "local"

    def __init__(
        self,
        repo: Path,
        worktrees: Worktrees | None = None,
        python: str = sys.executable,
        work_dir: Path | None = None,
    ) -> None:
        self.repo = repo
        self.worktrees = worktrees if worktrees is not None else Worktrees(repo)
        self._own_worktrees = worktrees is None
        self.python = python
        self._own_work_dir = work_dir is None
        if work_dir is None:
            work_dir = Path(tempfile.mkdtemp(prefix="ledger-local-"))
        work_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir = work_dir
        self._lock = threading.Lock()
        self._checkouts: dict[str, Path] = {}
        self._commit_locks: dict[str, threading.Lock] = {}
        self._running: dict[int, _Running] = {}
        self._cancelled = False

    # -- checkouts -------------------------------------------------------------------------

    def prepare(self, commits: list[str]) -> None:
        """Create (or verify) the worktree of every commit before any shard runs."""
        for commit in dict.fromkeys(commits):
            self.checkout_for(commit)

    def checkout_for(self, commit: str) -> Path:
        """The clean worktree of `commit`, checked out once per executor and then shared."""
        with self._lock:
            if commit in self._checkouts:
                return self._checkouts[commit]
            guard = self._commit_locks.setdefault(commit, threading.Lock())
        with guard:
            with self._lock:
                if commit in self._checkouts:
                    return self._checkouts[commit]
            path = self.worktrees.checkout(commit)
            with self._lock:
                self._checkouts[commit] = path
            return path

    # -- running ---------------------------------------------------------------------------

    def run(self, shard: ShardRun) -> Observation:
        """Run one shard and observe it; test failures and crashes are data, never exceptions."""
        if not shard.files and any("{files}" in token for token in shard.command):
            # pytest given no file runs the whole checkout: never what an empty shard means.
            raise ValueError(f"shard {shard.shard_id} has no files to run")
        cwd = self.checkout_for(shard.commit)
        if self._cancelled:
            return Observation(failure_reason="cancelled", failure_detail="not started")
        run_dir = Path(
            tempfile.mkdtemp(
                prefix=f"{shard.shard_id}-{shard.revision}-{shard.attempt}-", dir=self.work_dir
            )
        )
        try:
            return self._run_in(shard, cwd, run_dir)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _run_in(self, shard: ShardRun, cwd: Path, run_dir: Path) -> Observation:
        junit = run_dir / "junit.xml"
        log_path = run_dir / "output.log"
        argv = expand_command(
            shard.command, python=self.python, junit=str(junit), files=shard.files
        )
        if not argv:
            raise BadInput("the test command is empty")
        env = with_plugin_path(dict(os.environ))
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        with open(log_path, "wb") as log:
            started = time.monotonic()
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except (FileNotFoundError, PermissionError, NotADirectoryError) as error:
                raise BadInput(f"cannot run the test command '{argv[0]}': {error}") from error
        running = _Running(proc)
        watch = _Watch()
        try:
            status, seconds = self._supervise(proc, running, watch, started, shard)
        except BaseException:
            _kill_session(proc.pid, signal.SIGKILL)  # never leave a shard running behind us
            with self._lock:
                self._running.pop(proc.pid, None)
            proc.wait()
            raise
        oom = watch.oom
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return Observation(
            exit_code=exit_code,
            signal=sig,
            report=junit.read_bytes() if junit.is_file() else None,
            log_tail=_tail(log_path),
            rss_mb=round(watch.peak_kb / 1024, 1),
            seconds=round(seconds, 3),
            timed_out=watch.timed_out,
            oom=oom,
            failure_reason="cancelled" if running.cancelled else None,
        )

    def _supervise(
        self,
        proc: subprocess.Popen[bytes],
        running: _Running,
        watch: _Watch,
        started: float,
        shard: ShardRun,
    ) -> tuple[int, float]:
        """Wait for the shard under the watchdog; return its wait status and seconds."""
        with self._lock:
            self._running[proc.pid] = running
            if self._cancelled:
                running.cancelled = True
                _kill_session(proc.pid, signal.SIGKILL)
        watchdog = threading.Thread(
            target=self._watch,
            args=(proc.pid, running.done, watch, started, shard),
            name=f"watch-{shard.shard_id}",
            daemon=True,
        )
        watchdog.start()
        # Wait without reaping: the zombie keeps the pid (= group id) from being reused while
        # the watchdog, cancel_all and the leftover cleanup below may still signal the group.
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        seconds = time.monotonic() - started
        running.done.set()
        watchdog.join()
        _kill_session(proc.pid, signal.SIGKILL)  # children left behind by the shard
        with self._lock:
            del self._running[proc.pid]
        _, status = os.waitpid(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        return status, seconds

    def _watch(
        self, sid: int, done: threading.Event, watch: _Watch, started: float, shard: ShardRun
    ) -> None:
        """Sample the tree's RSS; kill the session on timeout (TERM, then KILL) or overrun."""
        limit_kb = shard.memory_limit_mb * 1024 if shard.memory_limit_mb is not None else None
        interval = MEMORY_POLL_S if limit_kb is not None else MEASURE_POLL_S
        deadline = started + shard.timeout_s
        scanner = _SessionScanner(sid)
        while True:
            wait = min(interval, max(0.0, deadline - time.monotonic()))
            if done.wait(wait):
                return
            total_kb = max(sum(rss for _, rss in scanner.members()), _high_water_kb(sid))
            watch.peak_kb = max(watch.peak_kb, total_kb)
            if limit_kb is not None and total_kb > limit_kb:
                watch.oom = True
                _kill_session(sid, signal.SIGKILL)
                return
            if time.monotonic() >= deadline:
                watch.timed_out = True
                _kill_session(sid, signal.SIGTERM)
                if not done.wait(TERM_GRACE_S):
                    _kill_session(sid, signal.SIGKILL)
                return

    def cancel_all(self) -> None:
        """Kill every running shard's process tree; later `run` calls start nothing."""
        with self._lock:
            self._cancelled = True
            for pid, running in self._running.items():
                running.cancelled = True
                _kill_session(pid, signal.SIGKILL)

    def close(self) -> None:
        """Remove temporary files and release the worktrees (they stay cached on disk)."""
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        if self._own_worktrees:  # a Worktrees passed in is released by its owner
            self.worktrees.close()
        self._checkouts.clear()


def _tail(path: Path) -> bytes:
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - LOG_TAIL_BYTES))
        return handle.read()
