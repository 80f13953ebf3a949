"""Human-readable rendering of verdict documents (tables on stdout)."""

from __future__ import annotations

import sys
from typing import Any

import click

STATUS_STYLE = {
    "passed": "bold green",
    "failed": "bold red",
    "unmeasured": "bold yellow",
    "awaiting": "bold yellow",
    "parked": "bold magenta",
}


def print_verdict(document: dict[str, Any], *, replayed: bool = False) -> None:
    # Imported here: rich costs start-up time that `--json` output never uses.
    from rich.console import Console
    from rich.table import Table

    console = Console()
    status = document["status"]
    title = f"run {document['run_id']}" + (" (replayed)" if replayed else "")
    table = Table(title=title, show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("verdict", f"[{STATUS_STYLE.get(status, 'bold')}]{status}[/]")
    table.add_row("rule", f"{document['rule']} v{document['rule_version']}")
    table.add_row("head", f"{document.get('head_ref')} {str(document.get('head'))[:12]}")
    table.add_row("base", f"{document.get('base_ref')} {str(document.get('base'))[:12]}")
    for key in ("introduced", "preexisting", "fixed", "flaky"):
        values = document.get(key) or []
        table.add_row(key, "\n".join(values) if values else "-")
    if document.get("retry_shards"):
        table.add_row("retry set", ", ".join(document["retry_shards"]))
    for entry in document.get("unmeasured") or []:
        culprits = ", ".join(entry["culprits"]) or "-"
        table.add_row(
            "unmeasured",
            f"{entry['shard']}: {entry['reason']} (culprits: {culprits})"
            + (f" — {entry['detail']}" if entry.get("detail") else ""),
        )
    for waiver in document.get("waivers") or []:
        table.add_row("waiver", f"{', '.join(waiver['files'])} waived by {waiver['by']}")
    if document.get("baseline_reused"):
        table.add_row("base reused from", ", ".join(r[:12] for r in document["baseline_reused"]))
    for reason in document.get("reasons") or []:
        table.add_row("why", reason)
    console.print(table)
    click.echo(f"{document['run_id']} {status}")


def finish_verdict(document: dict[str, Any], as_json: bool, replayed: bool = False) -> None:
    """Print the verdict (JSON or a table) and exit with its status's code."""
    from cli.options import emit_json
    from ledger.replay import exit_code

    if as_json:
        emit_json(document)
    else:
        print_verdict(document, replayed=replayed)
    sys.exit(exit_code(str(document["status"])))
