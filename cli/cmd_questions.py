"""`ledger questions`: the questions waiting for the release owner.

Kept apart from `cli.cmd_owner` (answers, checks, approvals): listing reads the ledger's
open-question index only, so it starts without the fold, the event models or the approval
report."""

from __future__ import annotations

import click

from release_ledger.cli.options import PAGE, common, emit_json
from release_ledger.ledger import read_side
from release_ledger.ledger.bootstrap import opened
from release_ledger.ledger.vocabulary import one_line

DEFAULT_PAGE = 100


@click.command("questions")
@click.option("--run", "run", default=None, help="Only this run (id or unique prefix).")
@click.option("--limit", type=PAGE, default=DEFAULT_PAGE, show_default=True,
              help="Questions per page (0: all).")  # fmt: skip
@click.option("--offset", type=PAGE, default=0, help="Skip this many questions.")
@common
def questions(
    run: str | None, limit: int, offset: int, ledger_url: str | None, as_json: bool
) -> None:
    """Questions to the release owner not yet decided (open, expired or parked), newest
    first: a page of --limit questions from --offset, as `ledger runs` pages runs.

    \b
    Examples:
      ledger questions
      ledger questions --limit 0 --json
      ledger questions --run 3f2a --json
    """
    with opened(ledger_url, create=False) as ledger:
        pending = read_side.pending_questions(ledger, run, limit or None, offset)
        more = 0
        if limit and not run and ledger.indexed:
            more = read_side.open_question_count(ledger) - offset - len(pending)
    if as_json:
        emit_json(pending)
        return
    if not pending:
        click.echo("no open questions")
        return
    for q in pending:
        options = ", ".join(o["name"] + (" (recommended)" if o["recommended"] else "")
                            for o in q["options"])  # fmt: skip
        state = q["state"] + (
            " — deadline passed: `ledger expire` acts on it" if q["overdue"] else ""
        )
        click.echo(f"{q['id']}  run {q['run_id'][:12]}  [{q['impact']}]  {state}")
        click.echo(f"  {one_line(q['text'])}")
        click.echo(f"  options: {one_line(options)}")
        left = _left(q["seconds_left"]) if q["state"] == "open" else q["state"]
        click.echo(f"  deadline: {q['deadline'] or '-'} ({left})")
        click.echo(f"  answer: ledger answer {q['run_id'][:12]} {q['id']} CHOICE")
    if more > 0:
        click.echo(
            f"{more} older questions not shown (--offset {offset + len(pending)}, --limit 0: all)"
        )


def _left(seconds: float | None) -> str:
    if seconds is None:
        return "no deadline"
    span = abs(seconds)
    if span < 90:
        text = f"{span:.0f}s"
    elif span < 90 * 60:
        text = f"{span / 60:.0f}m"
    elif span < 48 * 3600:
        text = f"{span / 3600:.1f}h"
    else:
        text = f"{span / 86400:.1f}d"
    return f"{text} left" if seconds > 0 else f"passed {text} ago"


COMMANDS = [questions]
