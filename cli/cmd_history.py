"""`ledger tests`, `ledger test`: each test's history across gates (the `test_history` view)."""

from __future__ import annotations

from typing import Any

import click

from release_ledger.cli.options import PAGE, common, emit_json
from release_ledger.ledger import history
from release_ledger.ledger.bootstrap import opened
from release_ledger.ledger.vocabulary import one_line

_VIEWS = click.option(
    "--views",
    default=None,
    metavar="PATH",
    type=click.Path(dir_okay=False),
    help="The views file (default: LEDGER.views.db beside a SQLite ledger).",
)


@click.command("tests")
@click.argument("pattern", required=False)
@click.option(
    "--flaky",
    is_flag=True,
    help="Only tests whose outcome differed at one commit (in one run or across runs).",
)
@click.option("--limit", type=PAGE, default=100, show_default=True,
              help="Tests per page (0: all).")  # fmt: skip
@click.option("--offset", type=PAGE, default=0, help="Skip this many tests.")
@_VIEWS
@common
def tests(
    pattern: str | None, flaky: bool, limit: int, offset: int, views: str | None,
    ledger_url: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Tests seen by the gate, by node id, a page at a time: runs seen, outcomes per revision,
    commits where the outcome differed (flaky evidence), first and last failure, and the
    median seconds and peak memory of its file. PATTERN is a substring of the node id, or a
    glob with * and ?.

    \b
    Examples:
      ledger tests --flaky
      ledger tests 'tests/test_io.py::*' --json
      ledger tests parser --limit 20 --offset 20
    """
    with opened(ledger_url, create=False) as ledger:
        store = history.open_history(ledger, views)
        try:
            rows, more = history.list_tests(
                store, pattern, flaky=flaky, limit=limit or None, offset=offset
            )
        finally:
            store.close()
    if as_json:
        emit_json(rows)
        return
    if not rows:
        what = "flaky test" if flaky else "test"
        where = f" matches {pattern!r}" if pattern else " is in the history"
        click.echo(f"no {what}{where}" + (f" (from --offset {offset})" if offset else ""))
        return
    # One line per test: node ids are long, and a line is what people grep and copy.
    for row in rows:
        on = f" [{row['interpreter']}]" if row["interpreter"] else ""
        failures = sum(c["failed"] for c in row["outcomes"].values())
        commits = row["flaky_commits"]
        flaky_at = f"flaky at {len(commits)} commits, " if commits else ""
        click.echo(
            f"{one_line(row['test'])}{on}  {row['runs']} runs, {failures} failures, {flaky_at}"
            f"last failure {_when(row['last_failure'])}; file "
            f"{_number(row['file_median_seconds'])} s median, "
            f"{_number(row['file_peak_rss_mb'])} MB peak"
        )
    if more:
        click.echo(f"more tests not shown (--offset {offset + len(rows)}, --limit 0: all)")


@click.command("test")
@click.argument("nodeid")
@_VIEWS
@common
def test(nodeid: str, views: str | None, ledger_url: str | None, as_json: bool) -> None:
    """One test's history: per interpreter its summary, then every run's outcomes at each
    revision (positions in that run's stream, for `ledger show`).

    \b
    Examples:
      ledger test tests/test_io.py::test_read
      ledger test 'tests/test_io.py::test_read[utf-8]' --json
    """
    with opened(ledger_url, create=False) as ledger:
        store = history.open_history(ledger, views)
        try:
            document = history.one_test(store, nodeid)
        finally:
            store.close()
    if as_json:
        emit_json(document)
        return
    click.echo(one_line(nodeid))
    for s in document["interpreters"]:
        on = f"Python {s['interpreter']}: " if s["interpreter"] else ""
        click.echo(
            f"  {on}{s['runs']} runs; head {_counts(s['outcomes'].get('head'))}; base "
            f"{_counts(s['outcomes'].get('base'))}; last failure {_when(s['last_failure'])}; "
            f"file {_number(s['file_median_seconds'])} s median, "
            f"{_number(s['file_peak_rss_mb'])} MB peak"
        )
        for f in s["flaky"]:
            click.echo(
                f"  flaky at {f['commit'][:12]}: failed in {_runs(f['failed_in'])}, passed in "
                f"{_runs(f['passed_in'])}"
            )
    for h in document["history"]:
        on = f" {h['interpreter']}" if h["interpreter"] else ""
        seen = ", ".join(f"{o}@{p}" for o, p in zip(h["outcomes"], h["positions"], strict=True))
        click.echo(f"  {h['at'] or '-'}  {h['run_id'][:12]}{on} {h['revision']:<4} "
                   f"{str(h['commit'])[:12]}  {seen}")  # fmt: skip


def _counts(counts: dict[str, int] | None) -> str:
    """`3 runs: 1 failed, 2 passed` (and those where it did both, or neither, if any)."""
    if not counts:
        return "-"
    parts = [f"{counts[k]} {k}" for k in ("failed", "passed", "differed", "other") if counts[k]]
    return f"{counts['runs']} runs: " + ", ".join(parts)


def _when(failure: dict[str, Any] | None) -> str:
    return f"{failure['at'][:19]} ({failure['run_id'][:8]})" if failure else "never"


def _number(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def _runs(run_ids: list[str]) -> str:
    return ", ".join(r[:8] for r in run_ids[:4]) + (" ..." if len(run_ids) > 4 else "")


COMMANDS = [tests, test]
