"""The harness is evidence: what decides how a revision's tests are judged, compared.

`conftest.py` files, the pytest configuration (`pytest.ini`, `.pytest.ini`, `pytest.toml`,
`pyproject.toml`'s `[tool.pytest...]`, `setup.cfg`'s `[tool:pytest]`, `tox.ini`'s `[pytest]`)
and the resolved test invocation are the suite's own code and settings: a conftest can rewrite
outcomes, slow the clock, print lines the gate reads. No gate can stop the suite deciding its
own outcome, but an owner can be told that the candidate changed how it is judged: the gate
records which of these files differ between base and head (`TestFilesDiscovered`), the
invocations come from `EnvironmentPrepared`, and every rule shows them as the
`harness-changed` finding (`strict` fails on it). Pure: the gate reads the blobs.
"""

from __future__ import annotations

import configparser
import tomllib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from release_ledger.domain.invocation import TestInvocation

HARNESS_CHANGED = "harness-changed"
CONFTEST = "conftest.py"
# pytest's configuration files, and the section each holds pytest's settings in (None: the
# whole file is pytest's).
CONFIG_FILES: Mapping[str, str | None] = {
    "pytest.ini": None,
    ".pytest.ini": None,
    "pytest.toml": None,
    ".pytest.toml": None,
    "pyproject.toml": "tool.pytest",
    "setup.cfg": "tool:pytest",
    "tox.ini": "pytest",
}


class HarnessChange(BaseModel):
    """One harness file that differs between base and head."""

    model_config = ConfigDict(frozen=True)

    path: str
    what: Literal["conftest", "pytest-config"]
    change: Literal["added", "removed", "modified"]

    def line(self) -> str:
        """`conftest.py added at head`, `pyproject.toml [tool.pytest] modified at head`."""
        section = CONFIG_FILES.get(self.path.rsplit("/", 1)[-1])
        where = f" [{section}]" if self.what == "pytest-config" and section else ""
        return f"{self.path}{where} {self.change} at head"


def harness_kind(path: str) -> Literal["conftest", "pytest-config"] | None:
    """Whether a repository path is a conftest or a pytest configuration file."""
    name = path.rsplit("/", 1)[-1]
    if name == CONFTEST:
        return "conftest"
    return "pytest-config" if name in CONFIG_FILES else None


def pytest_settings(path: str, data: bytes | None) -> object:
    """What of a configuration file is pytest's: the whole file, or its pytest section
    (None when it has none); an unreadable file is its bytes (any change to it counts)."""
    if data is None:
        return None
    section = CONFIG_FILES.get(path.rsplit("/", 1)[-1])
    if section is None:
        return data
    try:
        text = data.decode("utf-8")
        if section == "tool.pytest":
            return tomllib.loads(text).get("tool", {}).get("pytest")
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, configparser.Error):
        return data
    return dict(parser.items(section, raw=True)) if parser.has_section(section) else None


def config_change(
    path: str, base: bytes | None, head: bytes | None
) -> Literal["added", "removed", "modified"] | None:
    """How a configuration file's pytest settings changed (None: they did not)."""
    before, after = pytest_settings(path, base), pytest_settings(path, head)
    if before == after:
        return None
    if before is None:
        return "added"
    return "removed" if after is None else "modified"


def invocation_text(invocation: TestInvocation) -> str:
    """An invocation in one short phrase: its source, options and targets."""
    parts = [invocation.runner, *invocation.options, *(t.shown() for t in invocation.targets)]
    return f"{' '.join(parts)} (from {invocation.source})"


def invocation_key(invocation: TestInvocation) -> tuple[object, ...]:
    """What of an invocation is the harness: the runner, its source, working directory,
    options and targets, and which variables it sets (their values may name the checkout,
    which differs between revisions)."""
    return (invocation.runner, invocation.source, invocation.workdir, invocation.options,
            invocation.targets, invocation.start_directory, invocation.pattern,
            tuple(sorted(invocation.env)))  # fmt: skip
