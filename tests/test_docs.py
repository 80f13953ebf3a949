"""The documentation stays true to the command: docs/cli.md (made by docs/make_cli_reference.py
from `--help`) names every command and every option of each, every link between the pages
leads to a page that exists, and the README stays a page a newcomer reads in minutes."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from release_ledger.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REGENERATE = "run `python docs/make_cli_reference.py`"


def _commands() -> dict[str, click.Command]:
    """Every subcommand of `ledger`, walked from the click group itself."""
    context = click.Context(cli, info_name="ledger")
    assert isinstance(cli, click.Group)
    found = {}
    for name in cli.list_commands(context):
        command = cli.get_command(context, name)
        assert command is not None, name
        found[name] = command
    return found


def _sections() -> dict[str, str]:
    """docs/cli.md cut at its `## \\`ledger NAME\\`` headings: command name -> its section."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    parts = re.split(r"^## `ledger ?([a-z-]*)`$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


COMMANDS = _commands()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_cli_reference_has_every_command_and_each_of_its_options(name: str) -> None:
    section = _sections().get(name)
    assert section is not None, f"docs/cli.md has no section for `ledger {name}`: {REGENERATE}"
    for parameter in COMMANDS[name].params:
        if not isinstance(parameter, click.Option) or parameter.hidden:
            continue
        for flag in (*parameter.opts, *parameter.secondary_opts):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", section), (
                f"docs/cli.md does not name `ledger {name} {flag}`: {REGENERATE}"
            )


def test_the_cli_reference_names_no_command_that_does_not_exist() -> None:
    stale = set(_sections()) - set(COMMANDS) - {""}
    assert not stale, f"docs/cli.md documents commands `ledger` lacks: {sorted(stale)}"


def test_a_missing_option_is_caught() -> None:
    """The check above, on a section with one flag taken out, fails: it is not vacuous."""
    gate = _sections()["gate"]
    assert re.search(r"(?<![\w-])--budget-gib(?![\w-])", gate)
    assert not re.search(r"(?<![\w-])--budget-gib(?![\w-])", gate.replace("--budget-gib", "--"))


def _links(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in target]


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces -> -."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name
)
def test_every_link_between_the_pages_leads_somewhere(page: Path) -> None:
    for target in _links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name} links to {target}: no such heading"


def test_the_readme_is_a_page_a_newcomer_reads_in_minutes() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 12 * 1024
    assert max(len(line) for line in readme.splitlines()) <= 250  # no 2,000-character cells
