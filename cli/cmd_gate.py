"""`ledger gate`, `ledger resume`, `ledger verdict`, `ledger rules`."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from cli.options import common
from cli.progress import RichObserver
from cli.render import finish_verdict
from domain.errors import BadInput
from ledger import use_cases
from ledger.gate import GateInterrupted, GateOptions, default_command
from ledger.service import opened


def _parse_duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    text = text.strip().lower()
    try:
        unit = units.get(text[-1:], 0)
        value = float(text[:-1]) * unit if unit else float(text)
    except ValueError:
        raise BadInput(f"bad duration {text!r}: use e.g. 45s, 30m or 2h") from None
    if value <= 0:
        raise BadInput(f"bad duration {text!r}: must be positive")
    return value


@click.command("gate")
@click.option(
    "--base", required=True, metavar="REV", help="The previous release (tag, branch, SHA)."
)
@click.option("--head", default="HEAD", show_default=True, metavar="REV", help="The candidate.")
@click.option("--repo", default=".", show_default=True, type=click.Path(), help="Repository.")
@click.option("--shards", type=int, default=None, help="Shard count (default: twice --jobs).")
@click.option("--budget-gib", type=float, default=8.0, show_default=True, help="Memory per shard.")
@click.option("--rounds", type=int, default=2, show_default=True, help="Retry rounds.")
@click.option("--jobs", type=int, default=None, help="Parallel processes (default: CPU count).")
@click.option("--timeout", "timeout_s", type=float, default=1200.0, show_default=True,
              help="Seconds per shard before its process group is killed.")  # fmt: skip
@click.option("--rule", default="default", show_default=True, help="Aggregation rule.")
@click.option("--command", "command", default=None, metavar="TEMPLATE",
              help="Test command with {python}, {junit}, {files} (default: pytest).")  # fmt: skip
@click.option("--discover", "discover", multiple=True, metavar="GLOB",
              help="Test file globs for non-pytest commands (repeatable).")  # fmt: skip
@click.option("--measure", type=click.Choice(["always", "missing", "never"]), default="missing",
              show_default=True, help="Measure files alone: always, new ones, never.")  # fmt: skip
@click.option("--executor", type=click.Choice(["local", "kubernetes", "ssh"]), default="local",
              show_default=True)  # fmt: skip
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
@click.option("--remote-python", default=None, help="Python with pytest on the host (python3).")
@click.option(
    "--deadline", default="30m", show_default=True, help="Question deadline (45s, 30m, 2h)."
)
@click.option("--wait", is_flag=True, help="Wait for the owner's answers until each deadline.")
@click.option("--questions", "question_budget", type=int, default=3, show_default=True,
              help="Questions the gate may put to the owner per run.")  # fmt: skip
@common
def gate(
    base: str, head: str, repo: str, shards: int | None, budget_gib: float, rounds: int,
    jobs: int | None, timeout_s: float, rule: str, command: str | None, discover: tuple[str, ...],
    measure: str, executor: str, pool: str | None, namespace: str | None, capacity: int | None,
    image: str | None, source: str | None, pool_config: str | None, host: str | None,
    remote_mirror: str | None, ssh_port: int | None, ssh_identity: str | None,
    ssh_options: tuple[str, ...], remote_python: str | None, deadline: str, wait: bool,
    question_budget: int, ledger_url: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Run the regression gate: head against base, every step an event in the ledger.

    Exit codes: 0 passed, 1 failed, 2 bad input, 3 unmeasured, 4 awaiting or parked on an
    owner's question, 130 interrupted (continue with `ledger resume RUN`).

    \b
    Examples:
      ledger gate --base v1.4.0
      ledger gate --base v1.4.0 --head rc-2 --shards 8 --budget-gib 4 --json
      ledger gate --base main~5 --command '{python} -m pytest -q --junitxml={junit} {files}'
      ledger gate --base v1.4.0 --executor kubernetes --pool prod-a,prod-b
      ledger gate --base v1.4.0 --executor ssh --host ci@build-1
    """
    template = tuple(shlex.split(command)) if command else default_command(executor)
    executor_options: dict[str, object] = {}
    if executor == "kubernetes":
        if not pool:
            raise BadInput("--executor kubernetes needs --pool CTX[,CTX...]")
        executor_options = {
            k: v
            for k, v in {
                "pool": [p.strip() for p in pool.split(",") if p.strip()],
                "namespace": namespace,
                "capacity": capacity,
                "image": image,
                "source": source,
                "pool_config": pool_config,
            }.items()
            if v is not None
        }
    elif executor == "ssh":
        if not host:
            raise BadInput("--executor ssh needs --host USER@HOST")
        executor_options = {
            k: v
            for k, v in {
                "host": host,
                "remote_mirror": remote_mirror,
                "port": ssh_port,
                "identity": str(Path(ssh_identity).resolve()) if ssh_identity else None,
                "ssh_options": list(ssh_options) or None,
                "remote_python": remote_python,
            }.items()
            if v is not None
        }
    options = GateOptions(
        repo=Path(repo).resolve(),
        base=base,
        head=head,
        shards=shards,
        budget_gib=budget_gib,
        rounds=rounds,
        jobs=jobs or (os.cpu_count() or 1),
        timeout_s=timeout_s,
        rule=rule,
        command=template,
        measure=measure,
        discover=discover,
        executor=executor,
        executor_options=executor_options,
        deadline_s=_parse_duration(deadline),
        wait=wait,
        question_budget=question_budget,
    )
    if not Path(repo).is_dir():
        raise BadInput(f"--repo {repo} is not a directory")
    with opened(ledger_url) as ledger, RichObserver(quiet=as_json) as observer:
        try:
            document = use_cases.run_gate(ledger, options, observer)
        except GateInterrupted as stopped:
            click.echo(f"ledger: interrupted; continue with: ledger resume {stopped}", err=True)
            sys.exit(130)
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
