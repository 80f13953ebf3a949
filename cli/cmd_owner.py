"""`ledger answer`, `expire`, `check`, `approve`, `audit`: what the release owner does
(`ledger questions`, a read, is `cli.cmd_questions`)."""

from __future__ import annotations

import getpass
import os
import sys

import click

from release_ledger.cli.options import EXIT_FAILED, OutFile, common, emit_json
from release_ledger.cli.render import print_verdict
from release_ledger.ledger import owner
from release_ledger.ledger.bootstrap import opened
from release_ledger.ledger.service import Ledger
from release_ledger.ledger.views import catch_up_after_gate


def _refresh_views(ledger: Ledger) -> None:
    """Keep the read models current after a write; never fails the command."""
    notice = catch_up_after_gate(ledger)
    if notice:
        click.echo(f"ledger: {notice}", err=True)


def _default_owner() -> str:
    try:
        return os.environ.get("LEDGER_USER") or getpass.getuser()
    except (KeyError, OSError):
        return "owner"


@click.command("expire")
@click.option("--run", "run", default=None, help="Only this run (id or unique prefix).")
@common
def expire(run: str | None, ledger_url: str | None, as_json: bool) -> None:
    """Act on every passed deadline: record the expiry, take the recommendation (or park a
    critical question), and complete runs that can now conclude.

    Safe to run from cron or a scheduled CI job: idempotent (a second run finds nothing to
    do) and safe beside other writers (every append checks the stream it was decided on).
    Runs with shards still to run are left to `ledger resume`.

    \b
    Examples:
      ledger expire
      ledger expire --run 3f2a --json
      */5 * * * *  ledger expire --ledger postgresql://gate@db/ledger   (crontab)
    """
    from release_ledger.ledger.expire import expire as expire_all

    with opened(ledger_url, create=False) as ledger:
        result = expire_all(ledger, run)
        if result["observed"] or result["concluded"]:
            _refresh_views(ledger)
    if as_json:
        emit_json(result)
        return
    acted = False
    for r in result["runs"]:
        run_id = r["run_id"][:12]
        for item in r["observed"]:
            click.echo(f"run {run_id}: {item}")
            acted = True
        for item in r["asked"]:
            click.echo(f"run {run_id}: raised {item}")
            acted = True
        if r["concluded"]:
            click.echo(f"run {run_id}: completed, verdict {r['status']}")
            acted = True
        elif r["note"]:
            click.echo(f"run {run_id}: {r['note']}")
    if not acted:
        click.echo(f"no deadline has passed unobserved ({result['runs_examined']} runs examined)")


@click.command("answer")
@click.argument("run")
@click.argument("question")
@click.argument("choice")
@click.option("--by", default=None, metavar="NAME", help="Who answers (default: $LEDGER_USER).")
@common
def answer(
    run: str, question: str, choice: str, by: str | None, ledger_url: str | None, as_json: bool
) -> None:
    """Record the owner's answer to a question; prints the verdict re-derived with it.

    A late answer (the deadline passed) is accepted and recorded as late; an unknown
    question, a choice not offered, or a second answer is refused (exit 2, nothing written).

    \b
    Examples:
      ledger answer 3f2a q-unmeasured-1 waive-culprits --by alice
      ledger answer 3f2a q-flaky-1 block --json
    """
    with opened(ledger_url, create=False) as ledger:
        result = owner.answer(ledger, run, question, choice, by or _default_owner())
        _refresh_views(ledger)
    if as_json:
        emit_json(result)
        return
    late = " (late)" if result["late"] else ""
    click.echo(f"{result['question']}: {result['choice']!r} by {result['by']}{late}")
    if result["observed"]:
        click.echo("observed first: " + ", ".join(result["observed"]))
    print_verdict(result["verdict"], replayed=True)
    if result["resume"]:
        click.echo(f"no question is open: `ledger resume {result['run_id'][:12]}` completes it")


@click.command("check")
@click.argument("run")
@click.argument("name")
@click.option("--verdict", "verdict", required=True,
              type=click.Choice(["pass", "fail", "unmeasured"]))  # fmt: skip
@click.option("--value", default="", metavar="TEXT", help="What was measured (shown in reports).")
@click.option("--by", default=None, metavar="NAME", help="Who checked (default: $LEDGER_USER).")
@common
def check(
    run: str,
    name: str,
    verdict: str,
    value: str,
    by: str | None,
    ledger_url: str | None,
    as_json: bool,
) -> None:
    """Record a check made elsewhere (docs, installation files, a security scan) for the
    approval report.

    NAME may have spaces ("installation files"): it is shown as typed and keyed by its safe
    key (installation-files), which `--require` and `required-checks` match. A later check
    of the same key supersedes the earlier one; both stay in the ledger. Built-in metrics
    (gate, runtime-pin, changelog) are derived from the ledger and cannot be recorded.

    \b
    Examples:
      ledger check 3f2a docs --verdict pass --value "published 1.5.0"
      ledger check 3f2a "installation files" --verdict pass --value "wheel and sdist"
      ledger check 3f2a upgrade-test --verdict fail --value "schema migration 12 failed"
    """
    with opened(ledger_url, create=False) as ledger:
        result = owner.record_check(ledger, run, name, verdict, value, by or _default_owner())
        _refresh_views(ledger)
    if as_json:
        emit_json(result)
        return
    superseded = f" (supersedes position {result['supersedes']})" if result["supersedes"] else ""
    click.echo(f"check {result['name']} ({result['key']}): {verdict}{superseded}")


@click.command("approve")
@click.argument("run")
@click.option("--require", "required", multiple=True, metavar="NAME",
              help="A check that must be recorded (repeatable); missing: unmeasured.")  # fmt: skip
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Also write the Markdown to FILE (e.g. $GITHUB_STEP_SUMMARY).")  # fmt: skip
@common
def approve(
    run: str, required: tuple[str, ...], out: str | None, ledger_url: str | None, as_json: bool
) -> None:
    """The approval report: `v<version> approval`, `approved: n/n` or `blocked: ...`, then the
    gate, the built-in release checks (runtime-pin, changelog) and every recorded check, each
    with its deciding events; waivers, decisions taken without the owner, open questions and
    rollback commands (`[tool.release-ledger] rollback`, placeholders {version} {tag} {base}
    {head} {run}).

    Required checks come from `[tool.release-ledger] required-checks` at head and --require;
    one never recorded is unmeasured. Appends `ApprovalIssued`. Exit 0 ok (approved), 1 when a
    metric fails, 3 when none fails but one is unmeasured.

    \b
    Examples:
      ledger approve 3f2a --require docs --require "installation files"
      ledger approve 3f2a --out "$GITHUB_STEP_SUMMARY" --json
    """
    # The output is opened before `ApprovalIssued` is appended: an unwritable --out is bad
    # input (exit 2) with nothing recorded, never an approval whose report went nowhere.
    with OutFile(out) as target, opened(ledger_url, create=False) as ledger:
        report = owner.approve(ledger, run, list(required))
        _refresh_views(ledger)
    target.write(report.markdown)
    if as_json:
        emit_json(report.as_dict())
    else:
        click.echo(report.markdown, nl=False)
    sys.exit(report.exit_code)


@click.command("audit")
@click.argument("run")
@click.option("--rule", default=None, help="Also show what would differ under this rule.")
@common
def audit(run: str, rule: str | None, ledger_url: str | None, as_json: bool) -> None:
    """Check every issued approval still derives byte for byte from the ledger (exit 1 if not).

    \b
    Examples:
      ledger audit 3f2a
      ledger audit 3f2a --rule strict --json
    """
    with opened(ledger_url, create=False) as ledger:
        result = owner.audit(ledger, run, rule)
    if as_json:
        emit_json(result)
    else:
        if not result["approvals"]:
            click.echo(f"run {result['run_id'][:12]}: no approval issued")
        issued = result["attestations"]
        if issued:
            signed = sum(1 for a in issued if a["key_id"])
            click.echo(f"attestations issued: {len(issued)} ({signed} signed)")
        for a in result["approvals"]:
            state = "derives" if a["derives"] else "NO LONGER DERIVES"
            click.echo(
                f"position {a['position']} ({a['at']}): {a['outcome']} under {a['rule']} "
                f"v{a['rule_version']}, sha256 {a['issued_sha256'][:12]}: {state}"
            )
            if a["problem"]:
                click.echo(f"  {a['problem']}")
            for line in a["diff"]:
                click.echo(f"  {line}")
            other = a["under_rule"]
            if other is not None:
                change = "changes" if other["outcome_changes"] else "keeps"
                click.echo(
                    f"  under {other['rule']} v{other['rule_version']}: outcome {other['outcome']} "
                    f"({change} the outcome)"
                )
                for m in other["metrics_changed"]:
                    was = m["from"] or {"value": "-", "verdict": "-"}
                    click.echo(
                        f"    {m['name']}: {was['value']} ({was['verdict']}) -> "
                        f"{m['to']['value']} ({m['to']['verdict']})"
                    )
    if not result["ok"]:
        sys.exit(EXIT_FAILED)


COMMANDS = [expire, answer, check, approve, audit]
