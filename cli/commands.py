"""Which subcommands exist, and where each lives. Modules load only when their command runs,
so `ledger junit` or `ledger verdict` do not pay for importing every other command."""

from __future__ import annotations

import importlib

import click

COMMANDS: dict[str, str] = {
    "runs": "cli.cmd_runs",
    "show": "cli.cmd_runs",
    "export": "cli.cmd_runs",
    "verify": "cli.cmd_runs",
    "gate": "cli.cmd_gate",
    "resume": "cli.cmd_gate",
    "verdict": "cli.cmd_replay",
    "rules": "cli.cmd_replay",
    "junit": "cli.cmd_junit",
    "rebuild": "cli.cmd_views",
    "tests": "cli.cmd_history",
    "test": "cli.cmd_history",
    "questions": "cli.cmd_questions",
    "answer": "cli.cmd_owner",
    "expire": "cli.cmd_owner",
    "check": "cli.cmd_owner",
    "approve": "cli.cmd_owner",
    "audit": "cli.cmd_owner",
    "report": "cli.cmd_report",
    "attest": "cli.cmd_attest",
    "verify-attestation": "cli.cmd_attest",
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
