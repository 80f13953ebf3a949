"""The suite is untrusted code: each shard runs inside a bubblewrap sandbox where it can.

bubblewrap (`bwrap`, Flatpak's sandbox; Debian's `bubblewrap`) gives the shard its own mount,
PID and IPC namespaces:

- the whole file system read-only (`--ro-bind / /`), with a private `/tmp`, a private empty
  home, and the gate's secrets out of sight: the user's repository, the ledger's folder, the
  gate's scratch (other attempts' checkouts) and the home directory are covered by empty
  tmpfs mounts;
- what the tests need read back in, read-only: the revision's environment (its venv and the
  interpreter it was made from) and the gate's pytest plugin;
- writable: the attempt's own folder (its checkout and report) and nothing else;
- its own PID namespace, whose first process is bwrap's: whatever the suite leaves behind
  (a double fork, `setsid`, an emptied environment) dies with the shard, and `--die-with-parent`
  ends it all if the gate itself dies.

Stdlib-only and importing nothing of ours, like the supervisor: the same wrapper can be sent
to an SSH build host. Where bwrap is missing or cannot make its namespaces (or the gate is
told `LEDGER_SANDBOX=none`), the shard runs unsandboxed and the attempt says so (`sandbox:
none`); the shard's tag and session then still find what it left behind.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence

BWRAP = "bwrap"
NONE = "none"
PROBE_TIMEOUT_S = 20.0
# `LEDGER_SANDBOX=none` in the gate's environment runs suites unconfined (a suite that needs
# the home directory or the repository); every attempt then records `sandbox: none`.
SETTING = "LEDGER_SANDBOX"


@functools.cache
def bwrap() -> str | None:
    """The bwrap binary, when it is installed and can make its namespaces here (checked once
    per process: a container may forbid them)."""
    found = shutil.which("bwrap")
    if found is None:
        return None
    probe = [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
             "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--", "true"]  # fmt: skip
    try:
        done = subprocess.run(probe, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if done.returncode == 0 else None


@functools.cache
def prefixes(python: str) -> tuple[str, ...]:
    """The folders an interpreter needs to run: its `sys.prefix` (a venv) and
    `sys.base_prefix` (the installation it was made from), resolved."""
    code = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix]))"
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False,
            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")},
        )  # fmt: skip
        found = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        found = []
    real = os.path.realpath(python)
    folders = {os.path.dirname(os.path.dirname(real)), *(str(f) for f in found)}
    return tuple(sorted(os.path.realpath(f) for f in folders if f))


def _existing(paths: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if path and os.path.exists(real) and real not in seen and real != "/":
            seen.append(real)
    return seen


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def wrap(
    argv: Sequence[str],
    *,
    cwd: str,
    writable: Sequence[str],
    readable: Sequence[str],
    hidden: Sequence[str],
    path: str | None = None,
) -> tuple[list[str], str]:
    """`argv` to run sandboxed, and the sandbox used (`bwrap`, or `none` with `argv` as it
    is). `hidden` folders are covered by empty tmpfs mounts (the home directory, the user's
    repository, the ledger's folder, the gate's scratch); `readable` ones are then shown
    again read-only, `writable` ones read-write, in that order (a later mount wins). A program
    not found on `path` is left to fail to start, as it would without a sandbox."""
    binary = None if os.environ.get(SETTING, "auto") == NONE else bwrap()
    if binary is None or shutil.which(argv[0], path=path) is None:
        return list(argv), NONE  # a command that cannot start fails as it would unconfined
    args = [
        binary, "--die-with-parent", "--unshare-pid", "--unshare-ipc",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
    ]  # fmt: skip
    home = os.path.realpath(os.path.expanduser("~"))
    covered: list[str] = []  # a path under /tmp or under another covered one is gone already
    for path in sorted(_existing(hidden), key=len):
        if path != home and not any(_within(path, top) for top in ["/tmp", *covered]):
            covered.append(path)
    for path in _existing([home, *covered]):
        args += ["--tmpfs", path]
    for path in _existing(readable):
        args += ["--ro-bind", path, path]
    for path in _existing(writable):
        args += ["--bind", path, path]
    for path in covered:  # empty and read-only; the home stays a private, writable one
        args += ["--remount-ro", path]
    args += ["--chdir", cwd, "--", *argv]
    return args, BWRAP


def shard_environment(env: dict[str, str], sandbox: str) -> dict[str, str]:
    """The shard's environment as the sandbox sees it: temporary files in its private /tmp."""
    if sandbox != BWRAP:
        return env
    return {**env, "TMPDIR": "/tmp"}


def harness_levels(sandbox: str) -> int:
    """How many of the sandbox's own processes head the shard's tree (bwrap, and the init of
    its PID namespace), left out of the suite's memory by the supervisor."""
    return 2 if sandbox == BWRAP else 0


def exit_status(
    exit_code: int | None, signal: int | None, sandbox: str
) -> tuple[int | None, int | None]:
    """(exit code, signal) of the suite's command. bwrap's init reports a child killed by a
    signal as exit 128 + N, as shells do; the suite's command is then taken to have died of
    that signal (a program that exits 129-159 itself is read the same way: both unmeasured)."""
    if sandbox == BWRAP and exit_code is not None and 128 < exit_code < 128 + 65:
        return None, exit_code - 128
    return exit_code, signal
