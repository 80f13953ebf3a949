"""Reading JUnit report files exactly as the gate reads shard reports (`ledger junit`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

from release_ledger.domain.errors import BadInput
from release_ledger.domain.junit import CHUNK, Rejection, Report, read_report_chunks


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK):
        yield chunk


def open_regular(path: str) -> BinaryIO:
    """`path` opened for reading when it is a regular file; BadInput otherwise. Opened without
    blocking and checked on the open descriptor: a FIFO would wait for a writer forever, a
    device would read without end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise BadInput(f"cannot read {path}: {error.strerror or error}") from error
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(f"cannot read {path}: not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _read(path: str, expected: list[str] | None) -> Report | Rejection:
    try:
        with open_regular(path) as stream:
            return read_report_chunks(_chunks(stream), expected, counts_only=True)
    except OSError as error:
        raise BadInput(f"cannot read {path}: {error.strerror or error}") from error


def _check_readable(paths: Sequence[str]) -> None:
    """Fail before reading anything: a half-written answer would be misleading."""
    for path in paths:
        open_regular(path).close()


def _row(path: str, result: Report | Rejection) -> dict[str, Any]:
    if isinstance(result, Rejection):
        return {
            "file": path,
            "valid": False,
            "code": result.code,
            "reason": str(result),
            "tests": None,
            "failures": None,
            "errors": None,
            "skipped": None,
            "flaky": None,
        }
    return {
        "file": path,
        "valid": True,
        "code": None,
        "reason": None,
        "tests": result.tests,
        "failures": result.failures,
        "errors": result.errors,
        "skipped": result.skipped,
        "flaky": result.flaky,
    }


def read_report_files(paths: Sequence[str], expected: list[str] | None) -> list[dict[str, Any]]:
    """One row per file, in order: valid with its counts, or the rejection and its reason.

    Streams each file in chunks, so a large report is never held in memory whole.
    """
    _check_readable(paths)
    return [_row(path, _read(path, expected)) for path in paths]
