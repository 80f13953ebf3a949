"""Two verdicts of one run side by side, then the tests and shards the rules disagree on."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from release_ledger.cli.render import STATUS_STYLE, cell, lines_cell

_LISTS = ("introduced", "preexisting", "fixed", "flaky", "skipped")


def _cell(values: list[str]) -> Any:
    return lines_cell(values)


def print_comparison(comparison: dict[str, Any]) -> None:
    console = Console()
    first, second = both = comparison["verdicts"]
    table = Table(title=f"run {comparison['run_id']} (replayed)")
    table.add_column("", style="bold")
    for document in (first, second):
        table.add_column(f"{document['rule']} v{document['rule_version']}")
    table.add_row(
        "verdict",
        *(f"[{STATUS_STYLE.get(d['status'], 'bold')}]{d['status']}[/]" for d in (first, second)),
    )
    for key in _LISTS:
        table.add_row(key, *(_cell(d.get(key) or []) for d in (first, second)))
    table.add_row(
        "unmeasured",
        *(_cell([f"{u['shard']}: {u['reason']}" for u in d["unmeasured"]]) for d in both),
    )
    table.add_row("why", *(_cell(d.get("reasons") or []) for d in (first, second)))
    console.print(table)

    diff = comparison["differences"]
    if not diff["tests"] and not diff["shards"]:
        click.echo("no test or shard is classified differently")
    if diff["tests"]:
        tests = Table(title="tests classified differently")
        tests.add_column("test")
        for document in (first, second):
            tests.add_column(document["rule"])
        for entry in diff["tests"]:
            tests.add_row(
                cell(entry["test"]),
                *(cell(f"{c['class']} · {c['effect']}") for c in entry["classifications"]),
            )
        console.print(tests)
    if diff["shards"]:
        shards = Table(title="shards classified differently")
        shards.add_column("shard")
        for document in (first, second):
            shards.add_column(document["rule"])
        for entry in diff["shards"]:
            shards.add_row(cell(entry["shard"]), *map(cell, entry["classifications"]))
        console.print(shards)
    click.echo(f"{comparison['run_id']} {first['status']} ({first['rule']}) vs "
               f"{second['status']} ({second['rule']})")  # fmt: skip
