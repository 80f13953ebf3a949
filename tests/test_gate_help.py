"""`ledger gate --help` lists its ~46 options in groups (what to test, environments,
resources, executor, policy, output), each under the group its setting declares, and every
flag keeps its name."""

from __future__ import annotations

import re

from click.testing import CliRunner

from release_ledger.cli.main import cli
from release_ledger.ledger.options import EXECUTOR_SETTINGS, HELP_GROUPS, SETTINGS


def _help_by_group() -> dict[str, str]:
    result = CliRunner().invoke(cli, ["gate", "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    options = result.output.split("\nOptions:\n", 1)[1]
    parts = re.split(r"^  ([A-Z][\w ]+):\s*$", options, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _names(section: str) -> set[str]:
    return set(re.findall(r"^    (--[\w-]+)", section, flags=re.MULTILINE))


def test_gate_help_shows_its_options_in_the_declared_groups_in_order() -> None:
    groups = _help_by_group()
    assert list(groups) == list(HELP_GROUPS)
    assert {"--base", "--head", "--repo", "--command"} <= _names(groups["What to test"])
    assert {"--env", "--python"} <= _names(groups["Environments"])
    assert {"--budget-gib", "--shards", "--jobs", "--timeout"} <= _names(groups["Resources"])
    assert {"--executor", "--host", "--pool"} <= _names(groups["Executor"])
    assert {"--rule", "--quarantine", "--rounds"} <= _names(groups["Policy"])
    assert _names(groups["Output"]) == {"--junit-out", "--ledger", "--json"}


def test_every_flag_is_listed_under_the_group_its_setting_declares() -> None:
    groups = _help_by_group()
    for setting in (*SETTINGS, *EXECUTOR_SETTINGS):
        if setting.flag is None:
            continue
        assert setting.group is not None, f"{setting.flag} declares no help group"
        assert setting.flag in _names(groups[setting.group]), (setting.flag, setting.group)
