"""`ledger gate`, `ledger resume`, `ledger verdict`, `ledger rules`."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click_option_group import OptionGroup

from release_ledger.cli.options import common, common_in
from release_ledger.cli.progress import RichObserver
from release_ledger.cli.render import finish_verdict
from release_ledger.ledger import outputs
from release_ledger.ledger import report as reports
from release_ledger.ledger.bootstrap import opened
from release_ledger.ledger.bootstrap.gate import checked, resume_gate, run_gate
from release_ledger.ledger.gate import GateInterrupted, warnings_for
from release_ledger.ledger.options import (
    EXECUTOR_SETTINGS,
    EXECUTORS,
    HELP_GROUPS,
    SETTINGS,
    Setting,
)
from release_ledger.ledger.settings import gate_options

F = TypeVar("F", bound=Callable[..., Any])

# `ledger gate --help` lists its options in these groups, each setting under the group its
# declaration names (`Setting.group`), the groups in their declared order (`HELP_GROUPS`).
GROUPS = {title: OptionGroup(title) for title in HELP_GROUPS}


def _flag(setting: Setting) -> Callable[[F], F]:
    """One click option made from a setting's declaration (its default left to the
    settings' own reading, so a flag not given is None and the table may fill it), in its
    help group."""
    assert setting.flag is not None and setting.group is not None, setting.name
    option = GROUPS[setting.group].option
    declared: dict[str, Any] = {"help": setting.help, "metavar": setting.metavar}
    if setting.kind == "switch":
        names = [f"{setting.flag}/--no-{setting.flag[2:]}", setting.name]
        return option(*names, default=None, help=setting.help)
    if setting.kind == "flag":
        return option(setting.flag, setting.name, is_flag=True, help=setting.help)
    if setting.kind == "choice":
        declared["type"] = click.Choice(list(setting.choices or EXECUTORS))
    elif setting.kind == "path":
        declared["type"] = click.Path()
    elif setting.kind in ("int", "float"):
        declared["type"] = int if setting.kind == "int" else float
    if setting.flag_default is not None:
        declared |= {"default": setting.flag_default, "show_default": True}
    return option(setting.flag, setting.name, multiple=setting.multiple, **declared)


def _group_order(setting: Setting) -> int:
    assert setting.group is not None, f"{setting.flag} declares no help group"
    return HELP_GROUPS.index(setting.group)


def settings_flags(f: F) -> F:
    """The gate's flags, then each executor's, group by group, each group's in their declared
    order (a group's options are declared together, as option groups need)."""
    flagged = sorted((s for s in (*SETTINGS, *EXECUTOR_SETTINGS) if s.flag), key=_group_order)
    for setting in reversed(flagged):
        f = _flag(_with_executors(setting))(f)
    return f


def _with_executors(setting: Setting) -> Setting:
    """`--executor`'s help names each executor with its summary."""
    if setting.name != "executor":
        return setting
    known = "; ".join(f"{name}: {spec.summary}" for name, spec in EXECUTORS.items())
    return dataclasses.replace(setting, help=f"Where shards run: {known}")


@click.command("gate")
@settings_flags
@GROUPS["Output"].option("--junit-out", "junit_out", default=None, metavar="FILE",
                         help="Also write the head's results as one JUnit XML file.")  # fmt: skip
@common_in(GROUPS["Output"].option)
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
    options = checked(gate_options(flags))  # every value checked before the ledger is opened
    for warning in warnings_for(options):
        click.echo(f"ledger: {warning}", err=True)
    junit_target = reports.writable(junit_out, "--junit-out") if junit_out else None
    with opened(ledger_url) as ledger, RichObserver(quiet=as_json) as observer:
        try:
            document = run_gate(ledger, options, observer)
        except GateInterrupted as stopped:
            click.echo(f"ledger: interrupted; continue with: ledger resume {stopped}", err=True)
            sys.exit(130)
        if junit_target is not None:
            junit = reports.junit_bytes(ledger, str(document["run_id"]))
            outputs.write_whole(junit_target, junit, "--junit-out")
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
            document = resume_gate(ledger, run, observer)
        except GateInterrupted as stopped:
            click.echo(f"ledger: interrupted; continue with: ledger resume {stopped}", err=True)
            sys.exit(130)
    finish_verdict(document, as_json)


COMMANDS = [gate, resume]
