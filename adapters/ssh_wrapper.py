"""Runs on the build host (stdlib only, sent as `python -c`): one shard, measured, framed back.

Usage: python -c SOURCE TMPDIR TIMEOUT_S TAIL_BYTES MEMORY_LIMIT_MB|- ARGV...

The command runs in `TMPDIR/w` in its own session with stdout and stderr in `TMPDIR/log`,
measured and limited as `adapters/local_executor.py` does (a watchdog sampling the session's
RSS, TERM then KILL at the deadline, `os.wait4`'s peak RSS as a floor). End-of-file on our
stdin means the ssh connection is gone: the session is killed and nobody waits for a reader
that no longer exists. The answer is one header line
(`release-ledger-frame {json}`) followed by the report bytes and the log-tail bytes, whose
sizes and sha256 the header carries.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

MARK = "@RELEASE_LEDGER_TMP@"
FRAME = b"release-ledger-frame "


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
TERM_GRACE_S = 1.0
MEMORY_POLL_S = 0.05
MEASURE_POLL_S = 0.2


def _session_members(sid: int) -> list[tuple[int, int]]:
    """(pid, rss kB) of every live process of session `sid`, from /proc/<pid>/stat."""
    members: list[tuple[int, int]] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 21 and int(fields[3]) == sid:
            members.append((int(entry), int(fields[21]) * _PAGE_KB))
    return members


def _kill_session(sid: int, sig: int) -> None:
    """Signal the group and any member of the session that moved to another group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    for pid, _ in _session_members(sid):
        if pid != sid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


class _Watch:
    """What the watchdog saw: the tree's peak RSS and why (if at all) it killed the shard."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self.timed_out = False
        self.oom = False
        self.dropped = False


def _watchdog(
    sid: int, done: threading.Event, watch: _Watch, deadline: float, limit_kb: int | None
) -> None:
    """As the local executor: sample RSS, kill on overrun, TERM then KILL at the deadline."""
    interval = MEMORY_POLL_S if limit_kb is not None else MEASURE_POLL_S
    while True:
        if done.wait(min(interval, max(0.0, deadline - time.monotonic()))):
            return
        total_kb = sum(rss for _, rss in _session_members(sid))
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


def _watch_stdin(sid: int, watch: _Watch) -> None:
    """The local side never writes and closes stdin only once it has read everything."""
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    watch.dropped = True
    _kill_session(sid, signal.SIGKILL)


def _tail(path: str, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - limit))
            return handle.read()
    except OSError:
        return b""


def main(argv: list[str]) -> int:
    tmp, timeout_s, tail_bytes = argv[0], float(argv[1]), int(argv[2])
    limit_kb = None if argv[3] == "-" else int(argv[3]) * 1024
    command = [arg.replace(MARK, tmp) for arg in argv[4:]]
    log_path = os.path.join(tmp, "log")
    junit_path = os.path.join(tmp, "junit.xml")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    watch = _Watch()
    exit_code: int | None = 127
    signal_number: int | None = None
    rss_kb = 0
    started = time.monotonic()
    with open(log_path, "wb") as log:
        try:
            child: subprocess.Popen[bytes] | None = subprocess.Popen(
                command,
                cwd=os.path.join(tmp, "w"),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as error:
            log.write(f"release-ledger: cannot start {command[0]!r}: {error}\n".encode())
            child = None
    seconds = 0.0
    if child is not None:
        done = threading.Event()
        args = (child.pid, done, watch, started + timeout_s, limit_kb)
        watchdog = threading.Thread(target=_watchdog, args=args, daemon=True)
        watchdog.start()
        threading.Thread(target=_watch_stdin, args=(child.pid, watch), daemon=True).start()
        # Wait without reaping, so the group id cannot be reused while it may be signalled.
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        seconds = time.monotonic() - started
        done.set()
        watchdog.join()
        _kill_session(child.pid, signal.SIGKILL)  # stragglers the tests left in the session
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = 0  # reaped by wait4; keeps Popen from waiting again
        rss_kb = max(watch.peak_kb, usage.ru_maxrss)
        watch.oom = watch.oom or (limit_kb is not None and usage.ru_maxrss > limit_kb)
        if os.WIFSIGNALED(status):
            exit_code, signal_number = None, os.WTERMSIG(status)
        else:
            exit_code = os.WEXITSTATUS(status)
    if watch.dropped:
        return 3
    try:
        with open(junit_path, "rb") as handle:
            report: bytes | None = handle.read()
    except OSError:
        report = None
    log_tail = _tail(log_path, tail_bytes)
    header = {
        "exit_code": exit_code,
        "signal": signal_number,
        "timed_out": watch.timed_out,
        "oom": watch.oom,
        "rss_kb": rss_kb,
        "seconds": seconds,
        "report_size": -1 if report is None else len(report),
        "report_sha256": hashlib.sha256(report or b"").hexdigest(),
        "log_size": len(log_tail),
        "log_sha256": hashlib.sha256(log_tail).hexdigest(),
    }
    out = sys.stdout.buffer
    out.write(FRAME + json.dumps(header, sort_keys=True).encode() + b"\n")
    out.write(report or b"")
    out.write(log_tail)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
