"""`ledger junit`: read JUnit reports exactly as the gate will, to see why one is rejected."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

import click

from cli.options import EXIT_OK, EXIT_UNMEASURED, common, emit_json
from domain.errors import BadInput
from domain.junit import CHUNK, Rejection, Report, read_report_chunks


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK):
        yield chunk


def _read(path: str, expected: list[str] | None) -> Report | Rejection:
    try:
        with open(path, "rb") as stream:
            return read_report_chunks(_chunks(stream), expected)
    except OSError as error:
        raise BadInput(f"cannot read {path}: {error.strerror or error}") from error


def _check_readable(paths: tuple[str, ...]) -> None:
    """Fail before printing anything: a half-written answer would be misleading."""
    for path in paths:
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            raise BadInput(f"cannot read {path}: {error.strerror or error}") from error


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


def _line(path: str, result: Report | Rejection) -> str:
    if isinstance(result, Rejection):
        return f"{path}: rejected: {result}"
    return (
        f"{path}: valid: {result.tests} tests, {result.failures} failures, "
        f"{result.errors} errors, {result.skipped} skipped, {result.flaky} flaky"
    )


@click.command("junit")
@click.argument("reports", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--files",
    "files",
    default=None,
    metavar="F1,F2,...",
    help="The test files the reports must cover exactly (comma-separated), as the gate checks "
    "a shard; also lets pytest xunit2 reports, which name no file, be attributed.",
)
@common
def junit(
    reports: tuple[str, ...], files: str | None, ledger_url: str | None, as_json: bool
) -> None:
    """Read JUnit XML reports as the gate would: valid with counts, or why rejected.

    Exit 0 when every report is valid, 3 when any is rejected (it would leave its shard
    unmeasured), 2 when a file cannot be read. The ledger is not used.

    \b
    Examples:
      ledger junit report.xml
      ledger junit head.xml base.xml --files tests/test_api.py,tests/test_db.py
      ledger junit out/*.xml --json | jq '.[] | select(.valid | not) | .reason'
    """
    expected = None if files is None else [f.strip() for f in files.split(",") if f.strip()]
    _check_readable(reports)
    results = [(path, _read(path, expected)) for path in reports]
    if as_json:
        emit_json([_row(path, result) for path, result in results])
    else:
        for path, result in results:
            click.echo(_line(path, result))
    rejected = any(isinstance(result, Rejection) for _, result in results)
    sys.exit(EXIT_UNMEASURED if rejected else EXIT_OK)


COMMANDS = [junit]
