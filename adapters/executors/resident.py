"""Resident workers: a process's start paid once per core, not once per shard.

A shard process spends about a second of CPU before its first test (the interpreter, pytest,
the environment's plugins): with many small shards that is most of a gate's CPU
(docs/benchmarks.md, "Every core busy"). A resident worker
(`adapters/pytest_plugin/release_ledger_worker.py`) is one process per (revision,
environment, command) and running shard, started in its own checkout and sandbox as a shard
process is, that has loaded pytest and its plugins and forks a child for each shard. Each
shard keeps a shard's guarantees:

- its time and memory limits are watched over the worker's session while it runs, and
  overrun kills the whole session (`timed_out`, `oom`), as a shard process is killed;
- its peak memory is the session's sampled peak during the shard without the waiting worker
  (its pages are the child's too, and counted there), floored by the child's own exact peak;
- its evidence is its own: a JUnit report and a log of its own, its own seconds, its exit
  status or signal (a crash, `os._exit`, a file past its time limit end only the child);
- nothing passes from one shard to the next: each child starts from the worker's state, in
  which no session of the project has run; a worker that died, or whose checkout a shard
  changed (`checkout_guard`), is replaced. The one thing kept is the bytecode of the
  checkout's modules, written next to them as the project's CI writes it and checked
  against each source as Python checks it, so the project is compiled once per worker;
- processes a shard left behind are killed when it ends; its home and temporary files are
  removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, TypeVar

from release_ledger.adapters.executors.supervisor import (
    TAG_VARIABLE,
    TERM_GRACE_S,
    SessionScanner,
    Supervised,
    TmpfsCounter,
    kill_session,
    suite_kb,
    tagged,
    watch_session,
)

WORKER_MODULE = "release_ledger_worker"
FOLDER_VARIABLE = "RELEASE_LEDGER_WORKER_DIR"  # its folder: never emptied as part of /tmp
ROOT_VARIABLE = "RELEASE_LEDGER_WORKER_ROOT"  # its checkout: never emptied between shards
# A worker whose session holds more than this between shards is retired (shards run in
# children and add nothing to it: what its plugins hold, or something left behind), as is one
# holding more than half of the next shard's memory limit.
RETIRE_KB = 1024 * 1024


T = TypeVar("T")


class Spawner:
    """Starts long-lived processes from one thread that lives as long as its owner.

    A process started under bubblewrap's `--die-with-parent` (`PR_SET_PDEATHSIG`) is killed
    when the *thread* that started it ends, not its process: a worker started from a step's
    short-lived thread (base's collection, a round's shard threads) died with that thread,
    idle in the pool, and the next shard of its revision paid a worker's start again."""

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spawner")

    def run(self, start: Callable[[], T]) -> T:
        """`start()` run on the spawner's thread: its result, or what it raised."""
        return self._thread.submit(start).result()

    def close(self) -> None:
        """End the thread (what it started is ended by its owner first)."""
        self._thread.shutdown(wait=False)


class ResidentWorker:
    """One long-lived worker process under a per-shard watchdog. `run` is called by one
    thread at a time (the executor hands a worker to one shard at a time); `kill` from any."""

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        log_path: str,
        tag: str,
        harness_levels: int = 0,
        user: tuple[int, int] | None = None,
        uncounted: Iterable[str] = (),
    ) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = {**env, TAG_VARIABLE: tag, FOLDER_VARIABLE: os.path.dirname(log_path)}
        self.log_path = log_path
        self.tag = tag
        self.harness_levels = harness_levels
        self.nested = harness_levels > 0
        self.user = user
        self.uncounted = list(uncounted)
        self.shards = 0  # shards it has run (the next one is `shards + 1`)
        self._proc: subprocess.Popen[bytes] | None = None
        self._replies: IO[bytes] | None = None
        self._killed = False

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self._killed

    def start(self) -> None:
        """Start the worker (OSError when its command cannot start)."""
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, start_new_session=True,
                user=self.user[0] if self.user else None,
                group=self.user[1] if self.user else None,
                extra_groups=[] if self.user else None,
            )  # fmt: skip
        self._replies = self._proc.stdout

    def session_kb(self) -> int:
        """Resident memory of the worker's session now (what it holds between shards)."""
        if self._proc is None:
            return 0
        members = SessionScanner(self._proc.pid, nested=self.nested).members()
        return suite_kb(members, self._proc.pid, self.harness_levels)

    def run(
        self, request: dict[str, Any], *, timeout_s: float, memory_limit_mb: float | None
    ) -> Supervised:
        """Run one shard: what the supervisor saw of it, as of a shard process."""
        proc = self._proc
        if proc is None or proc.stdin is None or self._replies is None:
            raise RuntimeError("run() before start()")
        self.shards += 1
        result = Supervised()
        done = threading.Event()
        started = time.monotonic()
        limit_kb = int(memory_limit_mb * 1024) if memory_limit_mb is not None else None
        watchdog = threading.Thread(
            target=self._watch, args=(result, done, started + timeout_s, limit_kb),
            name=f"watch-{proc.pid}-{self.shards}", daemon=True,
        )  # fmt: skip
        watchdog.start()
        reply: dict[str, Any] | None = None
        try:
            proc.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
            proc.stdin.flush()
            line = self._replies.readline()
            reply = json.loads(line) if line.strip() else None
        except (OSError, ValueError):
            reply = None
        finally:
            result.seconds = round(time.monotonic() - started, 3)
            done.set()
            watchdog.join()
        result.killed = self._killed
        if reply is None:  # the worker died during the shard: that death is the shard's end
            self._end()
            status = proc.returncode if proc.returncode is not None else -signal.SIGKILL
            if status < 0:
                result.signal = -status
            else:
                result.exit_code = status
            return result
        if reply.get("signal"):  # the shard's child was killed, or killed itself
            result.signal = int(reply["signal"])
        else:
            result.exit_code = int(reply.get("exit_code", 1))
        if reply.get("reset"):  # the child's own exact peak: a floor under the samples
            result.peak_kb = max(result.peak_kb, int(reply.get("peak_kb") or 0))
        self._clean_after_shard()
        return result

    def _watch(
        self, result: Supervised, done: threading.Event, deadline: float, limit_kb: int | None
    ) -> None:
        """The supervisor's watch over one shard of the worker, sampled from its start; a
        worker that died leaves no reply, and what it left is killed."""
        proc = self._proc
        assert proc is not None
        died = watch_session(
            proc.pid, result, done, deadline=deadline, limit_kb=limit_kb,
            harness_levels=self.harness_levels,
            files=TmpfsCounter(self.user[0] if self.user else None, self.uncounted),
            at_once=True, ended=lambda: proc.poll() is not None,
            spared=self._worker_itself,
        )  # fmt: skip
        if died:
            for pid in tagged(self.tag):
                _kill(pid)

    def _worker_itself(
        self, members: list[tuple[int, int, int]], harness: set[int] | None = None
    ) -> set[int]:
        """The worker, left out of a shard's memory while it waits: its pages are the forked
        child's too, and counted there, as a fresh shard process counts its own imports. It
        leads its session, or under a sandbox it is the init's oldest child (orphans of a
        shard are re-parented to the init beside it)."""
        if self.harness_levels == 0:
            return {self._proc.pid} if self._proc is not None else set()
        harness = self._harness(members) if harness is None else harness
        below = [pid for pid, _, parent in members if parent in harness and pid not in harness]
        return {min(below, key=_started)} if below else set()

    def _harness(self, members: list[tuple[int, int, int]]) -> set[int]:
        """The sandbox's own processes at the top of the session."""
        harness = {self._proc.pid if self._proc is not None else -1}
        for _ in range(self.harness_levels - 1):
            harness |= {pid for pid, _, parent in members if parent in harness}
        return harness

    def _clean_after_shard(self) -> None:
        """Kill what the shard left running (in the session or escaped from it, by the tag),
        sparing the worker and the sandbox's own processes; remove what its user left in the
        host's shared tmpfs mounts."""
        assert self._proc is not None
        sid = self._proc.pid
        members = SessionScanner(sid, nested=self.nested).members()
        keep = self._harness_and_worker(members)
        for pid in [*(pid for pid, _, _ in members), *tagged(self.tag)]:
            if pid not in keep:
                _kill(pid)
        if self.user:
            TmpfsCounter(self.user[0], self.uncounted).remove_owned()

    def _harness_and_worker(self, members: list[tuple[int, int, int]]) -> set[int]:
        """The sandbox's processes at the top of the session and the worker below them."""
        if self.harness_levels == 0:
            return self._worker_itself(members)
        harness = self._harness(members)
        return harness | self._worker_itself(members, harness)

    def kill(self) -> None:
        """Kill the worker's whole session now (cancel): the shard running ends `killed`."""
        self._killed = True
        if self._proc is not None and self._proc.poll() is None:
            kill_session(self._proc.pid, signal.SIGKILL, nested=self.nested)

    def close(self) -> None:
        """End the worker (end of input, then its session killed) and reap it."""
        if self._proc is None:
            return
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=TERM_GRACE_S)
        self._end()

    def _end(self) -> None:
        """Kill the session and everything carrying the worker's tag, reap the worker."""
        assert self._proc is not None
        kill_session(self._proc.pid, signal.SIGKILL, nested=self.nested)
        for pid in tagged(self.tag):
            _kill(pid)
        self._proc.wait()
        if self.user:
            TmpfsCounter(self.user[0], self.uncounted).remove_owned()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _kill(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def _started(pid: int) -> int:
    """A process's start time (clock ticks after boot, /proc/PID/stat field 22)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return 1 << 62
