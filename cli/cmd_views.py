"""`ledger rebuild`: drop and rebuild the read models; `--check` proves a rebuild identical."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import click

from release_ledger.cli.options import EXIT_FAILED, common, emit_json
from release_ledger.ledger import views as views_use_cases
from release_ledger.ledger.bootstrap import opened


@click.command("rebuild")
@click.option("--check", is_flag=True, help="Compare a rebuild with the maintained views.")
@click.option(
    "--follow",
    is_flag=True,
    help="PostgreSQL: keep the views current as events are committed (Ctrl-C stops).",
)
@click.option("--views", default=None, metavar="PATH", type=click.Path(dir_okay=False),
              help="The views file (default: LEDGER.views.db beside a SQLite ledger; a PostgreSQL "
              "ledger's views are the schema ledger_views of its own database).")  # fmt: skip
@common
def rebuild(
    check: bool, follow: bool, views: str | None, ledger_url: str | None, as_json: bool
) -> None:
    """Rebuild the read models (SQLite tables) from the ledger's events.

    The digest is a sha256 over the sorted contents of every table: the same events always
    give the same digest. With --check the maintained views are caught up, a rebuild is made
    in a temporary file and compared; exit 1 names the first difference.

    \b
    Examples:
      ledger rebuild
      ledger rebuild --check --json
      ledger rebuild --ledger postgresql://ci@db/ledger
      ledger rebuild --follow --ledger postgresql://ci@db/ledger
    """
    with opened(ledger_url, create=False) as ledger:
        path = views_use_cases.views_path(ledger, views)
        if follow:

            def report(result: dict[str, Any]) -> None:
                if as_json:
                    click.echo(json.dumps(result, sort_keys=True))
                else:
                    click.echo(
                        f"{result['path']}: position {result['position']}, "
                        f"{result['runs']} runs re-projected in {result['seconds']:.3f}s"
                    )

            with contextlib.suppress(KeyboardInterrupt):
                views_use_cases.follow(ledger, path, report=report)
            return
        if check:
            result = views_use_cases.check(ledger, path)
        else:
            result = views_use_cases.rebuild(ledger, path)
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"{result['path']}: {result['events']} events, {result['runs']} runs "
            f"in {result['seconds']:.3f}s; digest {result['digest']}"
        )
        if check:
            if result["identical"]:
                click.echo("the maintained views are identical to a rebuild")
            else:
                click.echo(f"the maintained views differ: {result['difference']}")
    if check and not result["identical"]:
        sys.exit(EXIT_FAILED)


COMMANDS = [rebuild]
