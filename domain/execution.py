"""What an executor is asked to run and what it observed, as plain values.

Executors (local, Kubernetes, SSH) live in `adapters/`; they all take a `ShardRun` and return
an `Observation`, so the gate's process manager never needs to know where a shard ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Revision = Literal["head", "base"]

# The default, plus `--continue-on-collection-errors`: a test file that no longer
# imports at head is then an error test case in a valid report (an introduced failure), and
# its shard siblings still run, instead of the whole shard dying with exit 2 (unmeasured).
# `-p release_ledger_pytest` loads the gate's own plugin (adapters/pytest_plugin/, put on the
# child's PYTHONPATH by the executor): it writes the `--junitxml` report itself, exact and
# self-checking (node ids, subtests, per-file markers, a completion marker).
PYTEST_PLUGIN = "release_ledger_pytest"
DEFAULT_PYTEST_COMMAND: tuple[str, ...] = (
    "{python}",
    "-m",
    "pytest",
    "-p",
    "no:cacheprovider",
    "-p",
    PYTEST_PLUGIN,
    "-o",
    "junit_family=xunit1",
    "--continue-on-collection-errors",
    "--junitxml={junit}",
    "{files}",
)
# The same command without the plugin, for executors that do not yet put the plugin where the
# shard runs (SSH hosts and pods get it when their executors ship PLUGIN_DIR): plain pytest
# JUnit, read strictly.
PLAIN_PYTEST_COMMAND: tuple[str, ...] = tuple(
    token
    for index, token in enumerate(DEFAULT_PYTEST_COMMAND)
    if token != PYTEST_PLUGIN and DEFAULT_PYTEST_COMMAND[index + 1 : index + 2] != (PYTEST_PLUGIN,)
)
PLUGIN_EXECUTORS: frozenset[str] = frozenset({"local"})


def default_command(executor: str) -> tuple[str, ...]:
    """The gate's default test command for an executor: with the plugin where it ships it."""
    return DEFAULT_PYTEST_COMMAND if executor in PLUGIN_EXECUTORS else PLAIN_PYTEST_COMMAND


class ShardRun(BaseModel):
    """One execution of a set of test files at one commit."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    shard_id: str
    attempt: int
    revision: Revision
    commit: str
    files: tuple[str, ...]
    # The gate always passes its run's command; a bare ShardRun runs plain pytest, which
    # every executor can run.
    command: tuple[str, ...] = PLAIN_PYTEST_COMMAND
    timeout_s: float = 1200.0
    memory_limit_mb: int | None = None
    member: str | None = None  # pool member chosen by placement (pool executors only)


class Observation(BaseModel):
    """What happened when a `ShardRun` ran: facts only, never a verdict."""

    model_config = ConfigDict(frozen=True)

    exit_code: int | None = None
    signal: int | None = None
    report: bytes | None = None  # raw JUnit XML bytes, or None when no report was written
    log_tail: bytes = b""
    rss_mb: float = 0.0
    seconds: float = 0.0
    timed_out: bool = False
    oom: bool = False
    member: str | None = None
    # Set by pool/remote executors when the infrastructure, not the tests, failed.
    failure_reason: str | None = None  # e.g. OOMKilled, Evicted, ssh-connect, ApiError
    failure_detail: str = ""
    extra: dict[str, str] = Field(default_factory=dict)


def expand_command(
    template: Sequence[str], *, python: str, junit: str, files: Sequence[str]
) -> list[str]:
    """Expand `{python}`, `{junit}` and `{files}` into an argument list (never a shell line).

    A token that is exactly `{files}` becomes one argument per file; elsewhere `{files}` is
    joined with spaces inside that one argument.
    """
    argv: list[str] = []
    for token in template:
        if token == "{files}":
            argv.extend(files)
            continue
        argv.append(
            token.replace("{python}", python)
            .replace("{junit}", junit)
            .replace("{files}", " ".join(files))
        )
    return argv
