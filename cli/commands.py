"""Which subcommands exist: one module per command family, one line each here."""

from __future__ import annotations

import importlib

import click

COMMAND_MODULES = [
    "cli.cmd_runs",
    "cli.cmd_gate",
    "cli.cmd_junit",
    "cli.cmd_views",
    "cli.cmd_owner",
]


def register(group: click.Group) -> None:
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        for command in module.COMMANDS:
            group.add_command(command)
