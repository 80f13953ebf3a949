"""`ledger verdict` and `ledger rules`: answers from the ledger alone, never an append.

Kept apart from `cli.cmd_gate` so that a replay starts without importing the gate's
executors and adapters.
"""

from __future__ import annotations

import sys

import click

from release_ledger.cli.options import common, emit_json
from release_ledger.cli.render import finish_verdict
from release_ledger.ledger import replay


@click.command("verdict")
@click.argument("run")
@click.option("--rule", default=None, help="Replay under this rule (default: the run's own).")
@click.option("--compare", default=None, metavar="NAME", help="Compare with another rule.")
@common
def verdict(
    run: str, rule: str | None, compare: str | None, ledger_url: str | None, as_json: bool
) -> None:
    """The verdict of a recorded run, replayed from its events (reading never appends).

    \b
    Examples:
      ledger verdict 3f2a
      ledger verdict 3f2a --rule strict --json
      ledger verdict 3f2a --compare zero-failures
    """
    from release_ledger.ledger.bootstrap import opened

    with opened(ledger_url, create=False) as ledger:
        run_id = ledger.resolve(run)
        if compare:
            comparison = replay.compare_rules(ledger, run_id, rule, compare)
            if as_json:
                emit_json(comparison)
            else:
                from release_ledger.cli.render_compare import print_comparison

                print_comparison(comparison)
            sys.exit(replay.exit_code(str(comparison["verdicts"][0]["status"])))
        document = replay.verdict_for(ledger, run_id, rule)
    document["replayed"] = True
    finish_verdict(document, as_json, replayed=True)


@click.command("rules")
@common
def rules(ledger_url: str | None, as_json: bool) -> None:
    """The aggregation rules known: name, version, one-line description.

    \b
    Examples:
      ledger rules
      ledger rules --json
    """
    known = replay.rules()
    if as_json:
        emit_json(known)
        return
    for r in known:
        click.echo(f"{r['name']:<15} v{r['version']}  {r['description']}")


COMMANDS = [verdict, rules]
