"""`ledger gate`, `ledger resume`, `ledger verdict`, `ledger rules`."""

from __future__ import annotations

import sys
from typing import Any

import click

from cli.options import common
from cli.progress import RichObserver
from cli.render import finish_verdict
from ledger import report as reports
from ledger import use_cases
from ledger.bootstrap import opened
from ledger.gate import GateInterrupted, warnings_for
from ledger.options import DEFAULTS, validate
from ledger.settings import EXECUTORS, gate_options

# Defaults as the help shows them (each one's value lives in `ledger.options.GateOptions`).
_SHOWN = {name: f"{value:g}" if isinstance(value, float) else str(value)
          for name, value in DEFAULTS.items()}  # fmt: skip


@click.command("gate")
@click.option("--base", default=None, metavar="REV",
              help="The previous release (tag, branch, SHA); or base in [tool.release-ledger].")  # fmt: skip  # noqa: E501
@click.option("--head", default="HEAD", show_default=True, metavar="REV", help="The candidate.")
@click.option("--repo", default=".", show_default=True, type=click.Path(), help="Repository.")
@click.option("--env", "env", default=None, metavar="auto|none|COMMAND",
              help="Each revision's environment: auto (build it from the revision's own "
              "dependency declarations; default), none (the gate's interpreter), or a setup "
              "command run in the checkout with {python} and {venv}.")  # fmt: skip
@click.option("--python", "python", default=None, metavar="3.X[,3.Y...]|auto",
              help="Run the gate on each of these interpreters (an interpreter matrix): "
              "versions, interpreter paths, or auto (the versions the project's classifiers "
              "and tox env_list name within requires-python, that this machine has). Each "
              "gets its own environments and shard runs; the verdict is per interpreter and "
              "overall. Default: the gate's own interpreter.")  # fmt: skip
@click.option("--shards", type=int, default=None, help="Shard count (default: twice --jobs).")
@click.option("--budget-gib", type=float, default=None,
              help=f"Memory per shard [default: {_SHOWN['budget_gib']}].")  # fmt: skip
@click.option("--rounds", type=int, default=None,
              help=f"Retry rounds [default: {_SHOWN['rounds']}].")  # fmt: skip
@click.option("--jobs", type=int, default=None, help="Parallel processes (default: CPU count).")
@click.option("--timeout", "timeout_s", type=float, default=None,
              help="Seconds per shard before its group is killed "
              f"[default: {_SHOWN['timeout_s']}].")  # fmt: skip
@click.option("--rule", default=None, help=f"Aggregation rule [default: {_SHOWN['rule']}].")
@click.option("--command", "command", default=None, metavar="TEMPLATE",
              help="Test command with {python}, {junit}, {files} (default: pytest).")  # fmt: skip
@click.option("--discover", "discover", multiple=True, metavar="GLOB",
              help="Test file globs for non-pytest commands (repeatable).")  # fmt: skip
@click.option("--measure", type=click.Choice(["inplace", "solo", "always", "never", "missing"]),
              default=None,
              help="How files are measured: inplace (inside the shard runs, by the gate's pytest "
              "plugin; default), solo (each new file alone first, the reference behaviour), "
              "always (every file alone), never (nominal costs only). missing = solo.")  # fmt: skip
@click.option("--isolation-budget-gib", type=float, default=None,
              help="Memory for a file run alone (isolation, last bisection level) "
              "[default: 4x --budget-gib, at most 32].")  # fmt: skip
@click.option("--executor", type=click.Choice(list(EXECUTORS)), default=None,
              help="Where shards run: " + "; ".join(
                  f"{name}: {spec.summary}" for name, spec in EXECUTORS.items()))  # fmt: skip
@click.option("--pool", default=None, metavar="CTX[,CTX...]", help="Kubernetes contexts.")
@click.option("--namespace", default=None, help="Kubernetes namespace.")
@click.option("--capacity", type=int, default=None, help="Jobs per pool member (default 4).")
@click.option("--image", default=None, help="Container image (default python:3.11-slim).")
@click.option("--source", default=None, help="Git URL pods clone (default: origin).")
@click.option("--pool-config", default=None, type=click.Path(), help="TOML pool config.")
@click.option("--host", default=None, metavar="USER@HOST", help="SSH build host.")
@click.option("--remote-mirror", default=None, metavar="PATH", help="Bare mirror on the host.")
@click.option("--ssh-port", type=int, default=None, help="SSH port of the build host.")
@click.option("--ssh-identity", default=None, type=click.Path(), help="SSH private key file.")
@click.option("--ssh-option", "ssh_options", multiple=True, metavar="KEY=VALUE",
              help="Extra ssh -o option (repeatable).")  # fmt: skip
@click.option("--remote-python", default=None, help="Python on the build host (python3).")
@click.option("--deadline", default=None, help="Question deadline (45s, 30m, 2h) [default: 30m].")
@click.option("--wait", is_flag=True, help="Wait for the owner's answers until each deadline.")
@click.option("--questions", "question_budget", type=int, default=None,
              help="Questions the gate may put to the owner per run "
              f"[default: {_SHOWN['question_budget']}].")  # fmt: skip
@click.option("--max-report-mb", type=float, default=None,
              help="A larger JUnit report makes its attempt unmeasured "
              f"[default: {_SHOWN['max_report_mb']}].")  # fmt: skip
@click.option("--release-builds/--no-release-builds", "release_builds", default=None,
              help="Once the tests are done, build head's sdist and wheel and try the upgrade "
              "from base's wheel, for the approval report [default: on].")  # fmt: skip
@click.option("--attribution/--no-attribution", "attribution", default=None,
              help="When head's package set differs from base's, run head's introduced "
              "failures again with base's packages and name which change introduced each "
              "[default: on].")  # fmt: skip
@click.option("--resolve-as-of", "resolve_as_of", default=None, metavar="head|base|now|DATE",
              help="Resolve both revisions' unpinned dependencies as PyPI stood then (uv's "
              "--exclude-newer) [default: head, the head commit's committer date].")  # fmt: skip
@click.option("--pass-env", "pass_env", multiple=True, metavar="NAME",
              help="A variable of this environment the tests may see besides PATH, the "
              "locale and the like (repeatable; NAME_* for a prefix). Nothing else reaches "
              "them.")  # fmt: skip
@click.option("--junit-out", "junit_out", default=None, metavar="FILE",
              help="Also write the head's results as one JUnit XML file.")  # fmt: skip
@common
def gate(ledger_url: str | None, as_json: bool, junit_out: str | None, **flags: Any) -> None:
    """Run the regression gate: head against base, every step an event in the ledger.

    Each revision's tests run in that revision's own checkout and environment (--env).
    Defaults may be set in the repository's pyproject.toml under [tool.release-ledger];
    flags win.

    Exit codes: 0 passed, 1 failed, 2 bad input, 3 unmeasured, 4 awaiting or parked on an
    owner's question, 130 interrupted (continue with `ledger resume RUN`).

    \b
    Examples:
      ledger gate --base v1.4.0
      ledger gate --base v1.4.0 --head rc-2 --shards 8 --budget-gib 4 --json
      ledger gate --base main~5 --command '{python} -m pytest -q --junitxml={junit} {files}'
      ledger gate --base v1.4.0 --env '{python} -m pip install -e .[test]'
      ledger gate --base v1.4.0 --python 3.11,3.12,3.13
      ledger gate --base v1.4.0 --executor kubernetes --pool prod-a,prod-b
      ledger gate --base v1.4.0 --executor ssh --host ci@build-1
      ledger gate --base v1.4.0 --junit-out reports/gate-junit.xml
    """
    options = gate_options(flags)
    validate(options)  # every value checked before the ledger is even opened
    for warning in warnings_for(options):
        click.echo(f"ledger: {warning}", err=True)
    junit_target = reports.writable(junit_out, "--junit-out") if junit_out else None
    with opened(ledger_url) as ledger, RichObserver(quiet=as_json) as observer:
        try:
            document = use_cases.run_gate(ledger, options, observer)
        except GateInterrupted as stopped:
            click.echo(f"ledger: interrupted; continue with: ledger resume {stopped}", err=True)
            sys.exit(130)
        if junit_target is not None:
            junit_target.write_bytes(reports.junit_bytes(ledger, str(document["run_id"])))
    finish_verdict(document, as_json)


@click.command("resume")
@click.argument("run")
@common
def resume(run: str, ledger_url: str | None, as_json: bool) -> None:
    """Continue an interrupted (or killed) run from its ledger, running only what is missing.

    \b
    Examples:
      ledger resume 3f2a
    """
    with opened(ledger_url, create=False) as ledger, RichObserver(quiet=as_json) as observer:
        try:
            document = use_cases.resume_gate(ledger, run, observer)
        except GateInterrupted as stopped:
            click.echo(f"ledger: interrupted; continue with: ledger resume {stopped}", err=True)
            sys.exit(130)
    finish_verdict(document, as_json)


COMMANDS = [gate, resume]
