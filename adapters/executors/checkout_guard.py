"""Whether an attempt's tests changed the tracked files of their own checkout.

A suite that rewrites a test (or the code under test) while it runs makes its own report
meaningless: an attempt whose tracked files changed outside what the suite declares as its
outputs (`[tool.release-ledger] outputs`) is unmeasured (`checkout-modified`), never counted.

The check never runs git in the checkout after the suite did: the suite could have written
`.git/config` (a `core.fsmonitor` hook runs with the gate's rights on the next `git status`).
The tracked files are listed before the run, and each one's content hash and status (size,
times, inode) taken then; afterwards a file whose status is unchanged is unchanged (its change
time cannot be set back by a process without the clock's capability), and one whose status
changed is hashed again. Stdlib only: it runs on SSH hosts and in pods too.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import stat
import subprocess

TrackedSnapshot = dict[str, tuple[tuple[int, ...], str]]
_GUARD_MISSING = "(missing)"


def tracked_snapshot(checkout: str) -> TrackedSnapshot:
    """Each tracked file of `checkout` (listed by git, before any test ran): its status and
    content hash."""
    try:
        listed = subprocess.run(
            ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
             "-c", "safe.directory=*", "ls-files", "-z"],
            cwd=checkout, capture_output=True, check=True, stdin=subprocess.DEVNULL,
            env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull},
        )  # fmt: skip
        paths = [p for p in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = _every_file(checkout)  # no git here (a slim image): every file but .git's
    return {path: _guard_state(os.path.join(checkout, path)) for path in paths}


def _every_file(checkout: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(checkout):
        if root == checkout and ".git" in dirs:
            dirs.remove(".git")
        found += [os.path.relpath(os.path.join(root, name), checkout) for name in files]
    return found


def changed_tracked(
    checkout: str, before: TrackedSnapshot, outputs: tuple[str, ...] | list[str] = ()
) -> list[str]:
    """Tracked files whose content, kind or presence differs from `before`, except those that
    match an `outputs` pattern (fnmatch, `*` crosses folders), sorted."""
    found = []
    for path, (status, digest) in before.items():
        if any(fnmatch.fnmatchcase(path, pattern) for pattern in outputs):
            continue
        full = os.path.join(checkout, path)
        if _guard_status(full) == status:
            continue
        if _guard_state(full)[1] != digest:
            found.append(path)
    return sorted(found)


def _guard_status(path: str) -> tuple[int, ...]:
    try:
        seen = os.lstat(path)
    except OSError:
        return ()
    return (stat.S_IFMT(seen.st_mode), seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns,
            seen.st_ino)  # fmt: skip


def _guard_state(path: str) -> tuple[tuple[int, ...], str]:
    status = _guard_status(path)
    if not status:
        return status, _GUARD_MISSING
    if stat.S_ISLNK(status[0]):
        return status, "link:" + os.readlink(path)
    if not stat.S_ISREG(status[0]):
        return status, f"kind:{status[0]}"
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return status, "unreadable"
    return status, digest.hexdigest()
