"""The shard supervisor: one command in its own session, watched for memory and time.

Every executor runs a shard through this one module, so `oom`, `timeout` and peak memory mean
the same thing wherever a shard ran: the local executor imports it, and its source is sent as
the first part of the programs run on SSH hosts and in Kubernetes pods. It is therefore
stdlib-only and imports nothing of ours.

The peak-memory rule: the largest sum of resident memory over the session's processes seen by
a sampling watchdog (every 50 ms under a limit, 100 ms without), floored by the shard process's
own VmHWM (its exact peak since exec), plus what the suite holds in RAM as files: the tmpfs
mounts its processes see that the supervisor's own mount namespace lacks (a sandbox's private
`/tmp`, home and `/dev/shm`), so a test that parks 1.5 GiB in its `/tmp` counts 1.5 GiB; a
shard run as a user of its own (`sandbox: uid`) shares the host's, where the files that user
owns are counted instead, and removed when it ends.
Never `wait4`'s `ru_maxrss`: a forked child starts with
its parent's resident pages, so it reports at least the size of whatever started the shard.
A shard over its limit is killed (SIGKILL to the whole session) and marked `oom`; at its
deadline it gets SIGTERM, then SIGKILL after a short grace, and is marked `timed_out`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable

TAG_VARIABLE = "RELEASE_LEDGER_SHARD"  # in every shard process's environment: who owns it
TERM_GRACE_S = 1.0
MEMORY_POLL_S = 0.05  # with a memory limit: fast enough to catch a runaway allocation
MEASURE_POLL_S = 0.1  # without one: only the peak is sampled
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _read_stat(pid: str) -> tuple[int, int, int] | None:
    """(session id, rss in kB, parent pid) from /proc/<pid>/stat, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # fields[0] is field 3, the state
    if len(fields) < 22:
        return None
    return int(fields[3]), int(fields[21]) * _PAGE_KB, int(fields[1])


def high_water_kb(pid: int) -> int:
    """VmHWM of a process: its peak resident size since it exec'd (0 when gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class SessionScanner:
    """Finds a session's processes cheaply enough to poll every 50 ms.

    A process never joins a session it was not born into, so a pid seen outside the session
    stays outside until it disappears from /proc; only new pids are read again. With
    `nested`, a session led by a child of a member is the shard's too: bwrap's init starts
    the command in a session of its own (`--new-session`).
    """

    def __init__(self, sid: int, *, nested: bool = False) -> None:
        self.sid = sid
        self.nested = nested
        self._sessions = {sid}
        self._foreign: set[str] = set()

    def members(self) -> list[tuple[int, int, int]]:
        """(pid, rss in kB, parent pid) of every live process in the session."""
        try:
            listing = {entry for entry in os.listdir("/proc") if entry.isdigit()}
        except OSError:
            return []
        self._foreign &= listing
        seen: dict[int, tuple[int, int, int]] = {}
        for entry in listing - self._foreign:
            stat = _read_stat(entry)
            if stat is not None:
                seen[int(entry)] = stat
        while self.nested:  # a leader of a new session whose parent is a member: adopted
            adopted = {
                pid for pid, (sid, _, parent) in seen.items()
                if sid == pid and sid not in self._sessions
                and seen.get(parent, (-1,))[0] in self._sessions
            }  # fmt: skip
            if not adopted:
                break
            self._sessions |= adopted
        found: list[tuple[int, int, int]] = []
        for pid, (sid, rss, parent) in seen.items():
            if sid in self._sessions:
                found.append((pid, rss, parent))
            else:
                self._foreign.add(str(pid))
        return found


def tmpfs_mounts(mountinfo: str) -> list[tuple[str, str]]:
    """(device, mount point) of every tmpfs in a /proc/<pid>/mountinfo (the mount point as
    the process sees it, octal escapes undone)."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        try:
            fstype = fields[fields.index("-") + 1]
        except (ValueError, IndexError):
            continue
        if fstype == "tmpfs" and len(fields) > 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            found.append((fields[2], point))
    return found


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


# A separate user's files on the host's tmpfs mounts are summed again once this many times
# the last sum's own time has passed (a small /dev/shm: every poll; a busy /tmp: less often).
OWNED_SCAN_SPACING = 10


class TmpfsCounter:
    """RAM a shard holds as files: the used size of each tmpfs its processes see that the
    supervisor's own mount namespace does not have (one a sandbox made: its `/tmp`, home,
    `/dev`), read with statvfs through `/proc/<pid>/root`. A tmpfs of the host, bound into
    the sandbox read-only, has the host's device and is not the shard's.

    A shard run as a user of its own (`sandbox: uid`, `owner`) shares the host's tmpfs
    mounts (`/dev/shm`, a RAM-backed `/tmp`): there the files that user owns are its own, and
    their blocks are counted (`OWNED_SCAN_SPACING`), but for those under `uncounted` (its
    checkout: written in a sandbox, it is the host's disk, not counted either)."""

    def __init__(self, owner: int | None = None, uncounted: Iterable[str] = ()) -> None:
        self.own_namespace = self._namespace("self")
        own = _read_text("/proc/self/mountinfo") or ""
        self.host_devices = {device for device, _ in tmpfs_mounts(own)}
        self.owner = owner
        self.host_points = [point for _, point in tmpfs_mounts(own)] if owner else []
        self.uncounted = [os.path.realpath(u) for u in uncounted]
        self._owned_kb = 0
        self._owned_next = 0.0

    def _owned(self) -> Iterable[tuple[str, os.stat_result, int]]:
        """(path, its lstat, the mount's device) of each file on the host's world-writable
        tmpfs mounts that `owner` owns, but for those under `uncounted`."""
        for point in self.host_points:
            try:
                top = os.stat(point)
            except OSError:
                continue
            if not top.st_mode & 0o002:
                continue  # only where any user may write: the rest is not the shard's
            for root, dirs, files in os.walk(point):
                if any(root == u or root.startswith(u + os.sep) for u in self.uncounted):
                    dirs[:] = []
                    continue
                for name in files:
                    path = os.path.join(root, name)
                    with contextlib.suppress(OSError):
                        found = os.lstat(path)
                        if found.st_uid == self.owner and found.st_dev == top.st_dev:
                            yield path, found, top.st_dev

    def remove_owned(self) -> None:
        """Remove what `owner` left on the host's shared tmpfs mounts once its shard ended
        (a sandbox's private tmpfs goes with it): it would hold RAM, and get in the way of
        the next attempt, a user of its own too."""
        if self.owner is not None:
            for path, _found, _device in list(self._owned()):
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def owned_kb(self) -> int:
        """The blocks of the files `owner` owns on the host's world-writable tmpfs mounts
        (each inode once), summed again once `OWNED_SCAN_SPACING` times the last sum's own
        time has passed."""
        if self.owner is None:
            return 0
        now = time.monotonic()
        if now < self._owned_next:
            return self._owned_kb
        seen: set[tuple[int, int]] = set()
        total = 0
        for _path, found, device in self._owned():
            if (device, found.st_ino) not in seen:
                seen.add((device, found.st_ino))
                total += found.st_blocks // 2
        self._owned_kb = total
        self._owned_next = now + OWNED_SCAN_SPACING * (time.monotonic() - now)
        return total

    @staticmethod
    def _namespace(pid: str) -> str | None:
        try:
            return os.readlink(f"/proc/{pid}/ns/mnt")
        except OSError:
            return None

    def kb(self, pids: Iterable[int]) -> int:
        namespaces: set[str] = set()
        used: dict[str, int] = {}
        for pid in pids:
            namespace = self._namespace(str(pid))
            if namespace is None or namespace == self.own_namespace or namespace in namespaces:
                continue
            namespaces.add(namespace)
            for device, point in tmpfs_mounts(_read_text(f"/proc/{pid}/mountinfo") or ""):
                if device in self.host_devices or device in used:
                    continue
                kb = tmpfs_used_kb(f"/proc/{pid}/root{point}", device)
                if kb is not None:
                    used[device] = kb
        return sum(used.values())


def tmpfs_used_kb(path: str, device: str) -> int | None:
    """The used size of the file system at `path` if it is the mount `device` ("major:minor")
    names, else None. While a sandbox is being set up, a point its mountinfo lists can still
    resolve through its root to the host's disk: read without this check, a new shard once
    measured 27 GB and was killed as out of memory before its first test."""
    try:
        handle = os.open(path, os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        found = os.fstat(handle)
        if f"{os.major(found.st_dev)}:{os.minor(found.st_dev)}" != device:
            return None
        seen = os.fstatvfs(handle)
    except OSError:
        return None
    finally:
        os.close(handle)
    return (seen.f_blocks - seen.f_bfree) * seen.f_frsize // 1024


def kill_session(sid: int, sig: int, *, nested: bool = False) -> None:
    """Signal the process group and any member that moved to another group of the session
    (with `nested`, of the sessions its members' children lead too)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    for pid, _, _ in SessionScanner(sid, nested=nested).members():
        if pid != sid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def tagged(tag: str, *, prefix: bool = False) -> list[int]:
    """Processes whose environment carries this shard tag (or, with `prefix`, any tag that
    starts with it). The tag is inherited through fork, `setsid()` and double forks, so it
    finds what escaped the shard's session; this process itself never carries one."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    own = os.getpid()
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []
    for entry in entries:
        if int(entry) == own:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                items = handle.read().split(b"\0")
        except OSError:
            continue
        if any(item == needle or (prefix and item.startswith(needle)) for item in items):
            found.append(int(entry))
    return found


def kill_tagged(tag: str, *, prefix: bool = False) -> int:
    """SIGKILL every process carrying the tag (see `tagged`); how many were signalled."""
    pids = tagged(tag, prefix=prefix)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def log_tail(path: str, limit: int) -> bytes:
    """The last `limit` bytes of a file (empty when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - limit))
            return handle.read()
    except OSError:
        return b""


class Supervised:
    """What the supervisor saw of one finished command: facts, never a verdict."""

    def __init__(self) -> None:
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.peak_kb = 0
        self.seconds = 0.0
        self.timed_out = False
        self.oom = False
        self.killed = False  # by `kill()`: cancelled, or the connection that asked is gone

    def as_dict(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "rss_kb": self.peak_kb,
            "seconds": self.seconds,
            "timed_out": self.timed_out,
            "oom": self.oom,
            "killed": self.killed,
        }


class ShardProcess:
    """Start a command in its own session under a watchdog; `wait` returns what happened.

    `start` raises OSError when the command cannot be started. `kill` (from any thread) kills
    the whole session at once. Nothing the command started outlives `wait`: stragglers left
    in the session are killed when the command itself exits.
    """

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        log_path: str,
        timeout_s: float,
        memory_limit_mb: float | None = None,
        tag: str | None = None,
        harness_levels: int = 0,
        user: tuple[int, int] | None = None,
        uncounted: Iterable[str] = (),
    ) -> None:
        self.argv = argv
        self.uncounted = list(uncounted)  # `TmpfsCounter`: the checkout, under `user`
        self.harness_levels = harness_levels
        self.nested = harness_levels > 0  # a sandbox's init leads the suite's own session
        self.user = user  # (uid, gid) to run the command as: a separate user's sandbox
        self.cwd = cwd
        self.tag = tag
        self.env = dict(env, **{TAG_VARIABLE: tag}) if tag else env
        self.log_path = log_path
        self.timeout_s = timeout_s
        self.limit_kb = int(memory_limit_mb * 1024) if memory_limit_mb is not None else None
        self.result = Supervised()
        self._proc: subprocess.Popen[bytes] | None = None
        self._done = threading.Event()
        self._started = 0.0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self._started = time.monotonic()
            self._proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=self.user[0] if self.user else None,
                group=self.user[1] if self.user else None,
                extra_groups=[] if self.user else None,
            )

    def wait(self) -> Supervised:
        proc = self._proc
        if proc is None:
            raise RuntimeError("wait() before start()")
        watchdog = threading.Thread(target=self._watch, name=f"watch-{proc.pid}", daemon=True)
        watchdog.start()
        try:
            # Wait without reaping: the zombie keeps the pid (= group id) from being reused
            # while the watchdog or `kill` may still signal the group.
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        except BaseException:
            # never leave a shard running behind us
            kill_session(proc.pid, signal.SIGKILL, nested=self.nested)
            self._done.set()
            proc.wait()
            raise
        self.result.seconds = round(time.monotonic() - self._started, 3)
        self._done.set()
        watchdog.join()
        # children the command left behind
        kill_session(proc.pid, signal.SIGKILL, nested=self.nested)
        if self.tag:
            kill_tagged(self.tag)  # and those that left its session (setsid, double forks)
        if self.user:  # what its user left in the host's shared tmpfs mounts
            TmpfsCounter(self.user[0], self.uncounted).remove_owned()
        _, status = os.waitpid(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if os.WIFSIGNALED(status):
            self.result.signal = os.WTERMSIG(status)
        else:
            self.result.exit_code = os.WEXITSTATUS(status)
        return self.result

    def kill(self) -> None:
        """Kill the whole session now (cancel); `wait` then returns with `killed` set."""
        self.result.killed = True
        if self._proc is not None and not self._done.is_set():
            kill_session(self._proc.pid, signal.SIGKILL, nested=self.nested)

    def _watch(self) -> None:
        """Sample the session's RSS; kill it on overrun, or at the deadline (TERM, then KILL)."""
        assert self._proc is not None
        watch_session(
            self._proc.pid, self.result, self._done, deadline=self._started + self.timeout_s,
            limit_kb=self.limit_kb, harness_levels=self.harness_levels,
            files=TmpfsCounter(self.user[0] if self.user else None, self.uncounted),
        )  # fmt: skip


def watch_session(
    sid: int,
    result: Supervised,
    done: threading.Event,
    *,
    deadline: float,
    limit_kb: int | None,
    harness_levels: int,
    files: TmpfsCounter,
    at_once: bool = False,
    ended: Callable[[], bool] = lambda: False,
    spared: Callable[[list[tuple[int, int, int]]], set[int]] | None = None,
) -> bool:
    """The watch over one shard, until `done` is set: sample the session's memory into
    `result.peak_kb`, kill the session over `limit_kb` (`oom`) or at `deadline` (`timed_out`:
    TERM, then KILL after a grace). A shard process is first sampled after one interval; a
    shard of a resident worker (`at_once`: it may take 50 ms in all) at once, and its worker
    `ended` before it answered returns True, the session killed, for the caller to clean up.
    `spared` names members whose memory is not the shard's (a resident worker waiting for
    its forked child)."""
    nested = harness_levels > 0
    interval = MEMORY_POLL_S if limit_kb is not None else MEASURE_POLL_S
    scanner = SessionScanner(sid, nested=nested)
    while True:
        if not at_once and done.wait(min(interval, max(0.0, deadline - time.monotonic()))):
            return False
        at_once = False
        if ended():
            kill_session(sid, signal.SIGKILL, nested=nested)
            return True
        members = scanner.members()
        total_kb = suite_kb(members, sid, harness_levels, spared(members) if spared else set())
        total_kb += files.kb(pid for pid, _, _ in members) + files.owned_kb()
        result.peak_kb = max(result.peak_kb, total_kb)
        if limit_kb is not None and total_kb > limit_kb:
            result.oom = True
            kill_session(sid, signal.SIGKILL, nested=nested)
            return False
        if time.monotonic() >= deadline:
            result.timed_out = True
            kill_session(sid, signal.SIGTERM, nested=nested)
            if not done.wait(TERM_GRACE_S):
                kill_session(sid, signal.SIGKILL, nested=nested)
            return False


def suite_kb(
    members: list[tuple[int, int, int]], sid: int, harness_levels: int,
    spared: set[int] | frozenset[int] = frozenset(),
) -> int:  # fmt: skip
    """Resident memory of the suite's processes in the session. A sandbox's own processes at
    the top of the tree (`harness_levels` of them: bwrap and its namespace's init, about 3 MB)
    are the gate's harness like the supervisor, not the suite, so they are left out: a shard
    measures and is limited the same with or without a sandbox. A suite's process can never
    take their place (an orphan is re-parented to the init, below it). Without a harness the
    sum is floored by the shard process's own exact peak (VmHWM). `spared` members are left
    out too (a resident worker waiting for the shard's child: no floor by its peak then)."""
    if harness_levels <= 0:
        total = sum(rss for pid, rss, _ in members if pid not in spared)
        return total if sid in spared else max(total, high_water_kb(sid))
    harness = {sid}
    for _ in range(harness_levels - 1):
        harness |= {pid for pid, _, parent in members if parent in harness}
    return sum(rss for pid, rss, _ in members if pid not in harness and pid not in spared)


def run_shard(
    process: ShardProcess, on_start: Callable[[ShardProcess], None] | None = None
) -> Supervised:
    """Start and wait for a shard on a remote machine: a command that cannot be started is
    exit 127 with the reason in its log (the tests' outcome, as a shell would report it)."""
    try:
        process.start()
    except OSError as error:
        with open(process.log_path, "ab") as log:
            log.write(f"release-ledger: cannot start {process.argv[0]!r}: {error}\n".encode())
        process.result.exit_code = 127
        return process.result
    if on_start is not None:
        on_start(process)
    return process.wait()
