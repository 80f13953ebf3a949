"""Which subcommands exist, and where each lives. Modules load only when their command runs,
so `ledger junit` or `ledger verdict` do not pay for importing every other command."""

from __future__ import annotations

import importlib

import click

COMMANDS: dict[str, str] = {
    "runs": "release_ledger.cli.cmd_runs",
    "show": "release_ledger.cli.cmd_runs",
    "export": "release_ledger.cli.cmd_runs",
    "verify": "release_ledger.cli.cmd_runs",
    "gate": "release_ledger.cli.cmd_gate",
    "resume": "release_ledger.cli.cmd_gate",
    "verdict": "release_ledger.cli.cmd_replay",
    "rules": "release_ledger.cli.cmd_replay",
    "junit": "release_ledger.cli.cmd_junit",
    "rebuild": "release_ledger.cli.cmd_views",
    "tests": "release_ledger.cli.cmd_history",
    "test": "release_ledger.cli.cmd_history",
    "questions": "release_ledger.cli.cmd_questions",
    "answer": "release_ledger.cli.cmd_owner",
    "expire": "release_ledger.cli.cmd_owner",
    "check": "release_ledger.cli.cmd_owner",
    "approve": "release_ledger.cli.cmd_owner",
    "audit": "release_ledger.cli.cmd_owner",
    "report": "release_ledger.cli.cmd_report",
    "attest": "release_ledger.cli.cmd_attest",
    "verify-attestation": "release_ledger.cli.cmd_attest",
}


class LazyGroup(click.Group):
    """A click group that imports a command's module the first time the command is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = COMMANDS.get(cmd_name)
        if module_name is None:
            return None
        module = importlib.import_module(module_name)
        for command in module.COMMANDS:
            if command.name == cmd_name:
                found: click.Command = command
                return found
        return None
