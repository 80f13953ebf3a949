"""Files the command line names, read and written within bounds.

A path on the command line may be anything: a device that never ends (`/dev/zero`), one that
refuses every write (`/dev/full`), a FIFO, a huge file, a full disk. Reads take regular files
only and at most a stated size; writes go whole to a temporary file beside the target and are
renamed over it, so a failed write leaves the target as it was and never half written. Every
refusal is `BadInput`: one line, exit 2.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from release_ledger.domain.errors import BadInput


def read_capped(path: Path, what: str, limit: int) -> bytes:
    """A regular file's bytes, at most `limit` of them (`what` names the option in errors).
    Opened without blocking, so a FIFO with no writer is refused rather than waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise BadInput(f"{what} {path}: no such file") from None
    except OSError as error:
        raise BadInput(f"{what} {path}: cannot read: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(f"{what} {path}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as error:
            raise BadInput(f"{what} {path}: cannot read: {error.strerror}") from None
    if len(data) > limit:
        raise BadInput(f"{what} {path}: larger than {_size(limit)}")
    return data


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit // 1024} KiB"


def writable_target(path: str, what: str) -> Path:
    """A path an output may be written to: a regular file or none yet, in a folder that
    exists and can be written (checked before the command records anything). A link is
    followed: the file it names is written (the link itself is never replaced)."""
    target = Path(path)
    if target.is_symlink():
        real = Path(os.path.realpath(target))
        if not real.parent.is_dir():
            raise BadInput(f"{what} {path}: cannot write: {real.parent} does not exist")
        target = real
    if target.is_dir():
        raise BadInput(f"{what} {path}: is a directory")
    if target.exists() and not target.is_file():
        raise BadInput(f"{what} {path}: not a regular file")
    if not target.parent.is_dir():
        raise BadInput(f"{what} {path}: directory {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise BadInput(f"{what} {path}: cannot write in {target.parent}")
    if target.exists() and not os.access(target, os.W_OK):
        raise BadInput(f"{what} {path}: cannot write: permission denied")
    return target


def write_whole(target: Path, data: bytes, what: str) -> None:
    """Write `data` as the whole content of `target`, or leave it untouched: a temporary
    file beside it, flushed to disk, then renamed over it (a full disk is `BadInput`)."""
    target = writable_target(str(target), what)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as error:
        raise BadInput(f"{what} {target}: cannot write: {error.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise BadInput(f"{what} {target}: cannot write: {error.strerror}") from None
