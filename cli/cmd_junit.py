"""`ledger junit`: read JUnit reports exactly as the gate will, to see why one is rejected."""

from __future__ import annotations

import sys
from typing import Any

import click

from release_ledger.cli.options import EXIT_OK, EXIT_UNMEASURED, common, emit_json
from release_ledger.ledger.junit_reports import read_report_files


def _line(row: dict[str, Any]) -> str:
    if not row["valid"]:
        return f"{row['file']}: rejected: {row['reason']}"
    return (
        f"{row['file']}: valid: {row['tests']} tests, {row['failures']} failures, "
        f"{row['errors']} errors, {row['skipped']} skipped, {row['flaky']} flaky"
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
    rows = read_report_files(reports, expected)
    if as_json:
        emit_json(rows)
    else:
        for row in rows:
            click.echo(_line(row))
    rejected = any(not row["valid"] for row in rows)
    sys.exit(EXIT_UNMEASURED if rejected else EXIT_OK)


COMMANDS = [junit]
