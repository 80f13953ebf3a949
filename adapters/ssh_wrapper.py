"""Runs on the build host (stdlib only, sent as `python -c`): one shard, measured, framed back.

Usage: python -c SOURCE TMPDIR TIMEOUT_S TAIL_BYTES ARGV...

The command runs in `TMPDIR/w` in its own session with stdout and stderr in `TMPDIR/log`.
`os.wait4` gives the peak RSS on the host; a timer kills the whole session group at the
deadline; end-of-file on our stdin means the ssh connection is gone, so the group is killed
and nobody waits for a reader that no longer exists. The answer is one header line
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


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _watch_stdin(pid: int, dropped: threading.Event) -> None:
    """The local side never writes and closes stdin only once it has read everything."""
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    dropped.set()
    _kill_group(pid)


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
    command = [arg.replace(MARK, tmp) for arg in argv[3:]]
    log_path = os.path.join(tmp, "log")
    junit_path = os.path.join(tmp, "junit.xml")
    timed_out = threading.Event()
    dropped = threading.Event()
    started = time.monotonic()
    with open(log_path, "wb") as log:
        try:
            child = subprocess.Popen(
                command,
                cwd=os.path.join(tmp, "w"),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as error:
            log.write(f"release-ledger: cannot start {command[0]!r}: {error}\n".encode())
            child = None
    exit_code: int | None = 127
    signal_number: int | None = None
    rss_kb = 0
    if child is not None:

        def expire() -> None:
            timed_out.set()
            _kill_group(child.pid)

        timer = threading.Timer(timeout_s, expire)
        timer.daemon = True
        timer.start()
        threading.Thread(target=_watch_stdin, args=(child.pid, dropped), daemon=True).start()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = 0  # reaped by wait4; keeps Popen from waiting again
        timer.cancel()
        _kill_group(child.pid)  # stragglers the tests left in the session
        rss_kb = usage.ru_maxrss
        if os.WIFSIGNALED(status):
            exit_code, signal_number = None, os.WTERMSIG(status)
        else:
            exit_code = os.WEXITSTATUS(status)
    seconds = time.monotonic() - started
    if dropped.is_set():
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
        "timed_out": timed_out.is_set(),
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
