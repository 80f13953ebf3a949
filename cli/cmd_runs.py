"""`ledger runs`, `ledger show`, `ledger export`, `ledger verify`: reading the ledger."""

from __future__ import annotations

import sys
from typing import Any

import click

from release_ledger.cli.options import EXIT_FAILED, PAGE, common, emit_json
from release_ledger.cli.render import (
    attribution_lines,
    base_reuse_line,
    cause_lines,
    cell,
    exoneration_lines,
    finding_lines,
    interpreter_lines,
)
from release_ledger.ledger import queries
from release_ledger.ledger.bootstrap import opened
from release_ledger.ledger.vocabulary import one_line


@click.command("runs")
@click.option("--limit", type=PAGE, default=100, show_default=True,
              help="Runs per page (0: all).")  # fmt: skip
@click.option("--offset", type=PAGE, default=0, help="Skip this many runs.")
@common
def runs(limit: int, offset: int, ledger_url: str | None, as_json: bool) -> None:
    """Runs in the ledger, newest first (a page of --limit runs from --offset).

    \b
    Examples:
      ledger runs
      ledger runs --limit 0 --json --ledger sqlite:///ci/ledger.db
    """
    with opened(ledger_url, create=False) as ledger:
        rows = queries.list_runs(ledger, limit or None, offset)
        more = queries.run_count(ledger) - offset - len(rows) if limit else 0
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no runs in the ledger")
        return
    # The run id is what people copy into the next command: never squeezed by a narrow terminal.
    from rich.console import Console
    from rich.table import Column, Table

    run_column = Column("run", no_wrap=True, min_width=12)
    table = Table(run_column, "started", "head", "base", "status", "events")
    for row in rows:
        table.add_row(
            cell(row["run_id"][:12]),
            cell(row["started_at"]),
            cell(f"{row['head_ref']} {row['head'][:10]}"),
            cell(f"{row['base_ref']} {row['base'][:10]}"),
            cell(row["status"]),
            cell(str(row["events"])),
        )
    Console().print(table)
    if more > 0:
        click.echo(f"{more} older runs not shown (--offset {offset + len(rows)}, --limit 0: all)")


@click.command("show")
@click.argument("run")
@click.option("--all", "show_all", is_flag=True,
              help="One line per event: do not summarise long runs of one kind.")  # fmt: skip
@common
def show(run: str, show_all: bool, ledger_url: str | None, as_json: bool) -> None:
    """The run's timeline for a postmortem: time, event, one readable line each.

    Six or more consecutive events of one kind (measurements, shard attempts, placements) are
    summarised in one line ("measured 258 files: 55 MB median peak, 1.1 s median, slowest
    ...") naming every attempt that was not clean; --all prints every event. --json always
    lists every event. RUN is a run id or any unique prefix of one.

    \b
    Examples:
      ledger show 3f2a
      ledger show 3f2a --all
      ledger show 3f2a --json | jq '.events[] | select(.kind=="ShardAttemptRecorded")'
    """
    with opened(ledger_url, create=False) as ledger:
        run_id = ledger.resolve(run)
        reading = queries.run_reading(ledger, run_id)
    if as_json:
        emit_json(
            {
                "run_id": run_id,
                "events": reading["events"],  # every event, never grouped
                "verdict": reading["conclusion"],
            }
        )
        return
    lines = reading["events"] if show_all else reading["grouped"]
    for text in show_lines(run_id, lines, reading["conclusion"]):
        click.echo(text)


def show_lines(
    run_id: str, lines: list[dict[str, Any]], conclusion: dict[str, Any] | None
) -> list[str]:
    """`ledger show` as text: one line per event (`TimelineLine.as_dict`) or per group of
    events (`TimelineGroup.as_dict`, with a `count`), then the verdict; names from the suite
    are shown escaped (`domain.text.one_line`), so none can forge a line."""
    out = [f"run {run_id}"]
    for line in lines:
        when = str(line["at"])[:19].replace("T", " ")
        text = one_line(str(line["text"]))
        if "count" in line:
            kind = f"{line['kind']} ×{line['count']}"
            out.append(f"{line['first']:>5}  {one_line(when)}  {kind:<22} {text} "
                       f"(positions {line['first']}–{line['last']}; --all lists each)")  # fmt: skip
        else:
            out.append(f"{line['position']:>5}  {one_line(when)}  {line['kind']:<22} {text}")
    if conclusion is not None:
        out.append(f"verdict under rule {conclusion['rule']}: {conclusion['status']}")
        out.extend(f"  {one_line(line)}" for line in interpreter_lines(conclusion))
        reuse = conclusion.get("base_reuse")
        if reuse:
            out.append(base_reuse_line(reuse))
        out.extend(f"  {label:<12} {one_line(line)}" for label, line in cause_lines(conclusion))
        for key in ("introduced", "preexisting", "fixed", "flaky"):
            out.extend(f"  {key:<12} {one_line(test)}" for test in conclusion[key])
        out.extend(f"  introduced by {one_line(line)}" for line in attribution_lines(conclusion))
        out.extend(f"  {label:<12} {one_line(line)}" for label, line in finding_lines(conclusion))
        out.extend(f"  exonerated   {one_line(line)}" for line in exoneration_lines(conclusion))
        for entry in conclusion["unmeasured"]:
            culprits = ", ".join(entry["culprits"]) or "no culprit named"
            out.append(
                f"  unmeasured   {one_line(entry['shard'])}: {entry['reason']} "
                f"({one_line(culprits)})"
            )
        for skip in conclusion.get("environment_skips") or []:
            out.append(f"  missing      {one_line(skip['text'])}")
    return out


@click.command("export")
@click.argument("run")
@common
def export(run: str, ledger_url: str | None, as_json: bool) -> None:
    """The run's events as JSON lines, in order (each with its position and chain hashes).

    \b
    Examples:
      ledger export 3f2a > run.jsonl
    """
    with opened(ledger_url, create=False) as ledger:
        run_id = ledger.resolve(run)
        for line in ledger.export_lines(run_id):
            click.echo(line)


@click.command("verify")
@click.argument("run", required=False)
@common
def verify(run: str | None, ledger_url: str | None, as_json: bool) -> None:
    """Recompute every hash chain and artifact hash; exit 1 naming the first break.

    \b
    Examples:
      ledger verify
      ledger verify 3f2a --json
    """
    with opened(ledger_url, create=False) as ledger:
        run_id = ledger.resolve(run) if run else None
        results = ledger.verify(run_id)
    broken = [r for r in results if not r.ok]
    if as_json:
        emit_json(
            {"ok": not broken, "runs": [r.as_dict() for r in results]},
        )
    else:
        for r in results:
            if r.ok:
                click.echo(f"{r.run_id}: intact ({r.events} events)")
            else:
                click.echo(f"{r.run_id}: BROKEN at position {r.position}: {r.problem}")
        if not results:
            click.echo("no runs to verify")
    if broken:
        sys.exit(EXIT_FAILED)


COMMANDS = [runs, show, export, verify]
