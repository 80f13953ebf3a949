"""The `ledger` command: parses arguments, calls `ledger/`, renders the answer."""

from __future__ import annotations

import sys

import click

from release_ledger.cli import commands
from release_ledger.ledger.vocabulary import masked


@click.group(
    cls=commands.LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="release-ledger")
def cli() -> None:
    """release-ledger: a release regression gate on an event-sourced ledger.

    \b
    Examples:
      ledger gate --base v1.4.0
      ledger show 3f2a
      ledger verdict 3f2a --rule strict
    """


def main() -> None:
    try:
        cli.main(standalone_mode=False, prog_name="ledger")
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.exceptions.Abort:
        click.echo("ledger: aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        # Usage errors: one line, exit 2 (click would print usage plus a multi-line hint).
        click.echo(f"ledger: error: {masked(' '.join(error.format_message().split()))}", err=True)
        sys.exit(2)
    sys.exit(0)
