"""What an executor is asked to run and what it observed, as plain values.

Executors (local, Kubernetes, SSH) live in `adapters/`; they all take a `ShardRun` and return
an `Observation`, so the gate's process manager never needs to know where a shard ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from release_ledger.domain.failures import FailureKind
from release_ledger.domain.invocation import TestInvocation

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
# The same command without the plugin: what a bare `ShardRun` runs (plain pytest JUnit, read
# strictly). Every executor ships the plugin, so the gate's default is the one above.
PLAIN_PYTEST_COMMAND: tuple[str, ...] = tuple(
    token
    for index, token in enumerate(DEFAULT_PYTEST_COMMAND)
    if token != PYTEST_PLUGIN and DEFAULT_PYTEST_COMMAND[index + 1 : index + 2] != (PYTEST_PLUGIN,)
)


EnvironmentMode = Literal["auto", "none", "command"]


class EnvironmentRequest(BaseModel):
    """How each revision's environment is made (`--env auto|none|COMMAND`), for every executor.

    `none` (the default when an executor is built directly) runs the tests with the
    executor's own interpreter; the gate asks for `auto` unless told otherwise.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: EnvironmentMode = "none"
    command: tuple[str, ...] = ()  # the user's setup command, with {python} and {venv}
    extras: tuple[str, ...] = ()  # installed with the project whatever the source
    exclude_newer: str = ""  # resolve as the index stood then (UTC ISO timestamp; uv only)
    # A matrix gate's lane: the interpreter's label (`3.12`) and, on this machine, its path.
    interpreter: str = ""
    python: str = ""
    # Folders the suite must not see besides the home directory and the repository (the
    # ledger's own), hidden by executors that sandbox shards.
    hidden: tuple[str, ...] = ()
    # Tracked files the suite is declared to rewrite (`[tool.release-ledger] outputs`, fnmatch
    # patterns): any other tracked file an attempt changes makes it unmeasured.
    outputs: tuple[str, ...] = ()
    # A frozen package list (`name==version` lines) to install instead of the one the
    # revision's declaration resolves to: head with base's packages (attribution).
    pinned: str = ""
    # Variables of the gate's environment a shard may see besides the allow-list (names, or
    # prefixes ending in `*`; `[tool.release-ledger] pass-env`): CI variables the suite reads.
    pass_env: tuple[str, ...] = ()
    # Commits whose environment builds may use, and so write, uv's and pip's shared caches:
    # the release already approved (base). Every other commit's build is the candidate's
    # code and gets caches of its own, so it cannot alter what other builds install from.
    trusted_commits: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> EnvironmentRequest:
        """`auto`, `none`, or a setup command (split like a shell line, never run by one)."""
        import shlex

        word = text.strip()
        if word in ("auto", "none"):
            return cls(mode=word)
        argv = tuple(shlex.split(word))
        if not argv:
            raise ValueError("--env needs auto, none or a setup command")
        return cls(mode="command", command=argv)

    def recorded(self) -> str:
        import shlex

        return shlex.join(self.command) if self.mode == "command" else self.mode


class SourceTried(BaseModel):
    """One declared environment source the executor tried (tox, a group, an extra, ...)."""

    model_config = ConfigDict(frozen=True)

    source: str  # tox, dependency-group, extras, requirements-file, pytest
    detail: str = ""  # what it named: `tox env py311`, `requirements/tests.txt`
    outcome: Literal["used", "failed"] = "used"
    error: str = ""
    log_tail: str = ""


class EnvironmentReport(BaseModel):
    """The environment one revision's tests ran in, as the executor prepared it."""

    model_config = ConfigDict(frozen=True)

    status: Literal["ready", "failed"] = "ready"
    how: str = "none"  # uv, pip, command, none, gate-interpreter
    python: str = ""
    python_version: str = ""
    key: str = ""
    reused: bool = False
    seconds: float = 0.0
    packages: str = ""  # the frozen package list
    imports: dict[str, str] = Field(default_factory=dict)  # top-level package -> where it resolves
    warnings: tuple[str, ...] = ()
    error: str = ""
    log_tail: str = ""
    project: str | None = None
    extra: str | None = None
    group: str | None = None
    files_read: tuple[str, ...] = ()
    where: str = "local"  # the machine: local, the SSH host, the pool member
    source: str = ""  # the declared source used (`SourceTried.source`)
    deps_key: str = ""  # the dependency layer, shared by revisions with the same declaration
    exclude_newer: str = ""  # the index snapshot unpinned dependencies were resolved against
    tried: tuple[SourceTried, ...] = ()  # every source tried, in precedence order
    # The project's wheel metadata as declared (`Requires-Dist` lines, `Provides-Extra`
    # names): which extra would bring in a module its tests skip for (`environment_skips`).
    requires_dist: tuple[str, ...] = ()
    provides_extra: tuple[str, ...] = ()
    invocation: TestInvocation | None = None  # how its tests run, as its declaration says
    # The lock that pinned it (`uv.lock sha256:...`, "" for none) and why it did or did not.
    lock: str = ""
    lock_note: str = ""


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
    # Each file's time limit from what it is known to take (`domain/timing.py`): the gate's
    # pytest plugin ends the run at the first file past its limit, naming the test.
    file_limits: dict[str, float] = Field(default_factory=dict)
    # Declared environment sources that installed but ran no test at this revision, with
    # why (`SourceRejected`): the executor makes the environment from the next one.
    skip_sources: tuple[tuple[str, str], ...] = ()


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
    environment: EnvironmentReport | None = None  # where the revision's tests ran
    modified_files: tuple[str, ...] = ()  # tracked files the attempt changed in its checkout
    sandbox: str = ""  # how the suite was confined: bwrap, uid, pod, none ("" when not said)
    # The resident worker that ran it, `N.K`: the gate's worker N, its K-th shard ("" for a
    # process of its own): shards of one worker share module state, as plain pytest's files do.
    worker: str = ""
    # Set when the executor could not give a finished run: the kind from the closed
    # vocabulary (`domain.failures`), the executor's own word for it, and a detail.
    failure_kind: FailureKind | None = None
    failure_reason: str | None = None  # e.g. OOMKilled, Evicted, ssh-connect, ApiError
    failure_detail: str = ""
    extra: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _kind_with_reason(self) -> Observation:
        if (self.failure_kind is None) != (self.failure_reason is None):
            raise ValueError("failure_kind and failure_reason are set together or not at all")
        return self

    @classmethod
    def failed(
        cls, kind: FailureKind, reason: str, detail: str = "", **facts: object
    ) -> Observation:
        """An observation of a run the executor could not finish, in the closed vocabulary."""
        return cls(failure_kind=kind, failure_reason=reason, failure_detail=detail, **facts)

    @property
    def infrastructure(self) -> bool:
        return self.failure_kind == "infrastructure"

    def with_modified_checkout(self, files: Sequence[str]) -> Observation:
        """This observation once its tests are known to have changed `files` (tracked, outside
        the declared outputs) in their own checkout: what they reported cannot be trusted, so
        the attempt is unmeasured (`checkout-modified`) unless it already failed otherwise."""
        if not files:
            return self
        more = f" and {len(files) - 5} more" if len(files) > 5 else ""
        named = ", ".join(list(files)[:5]) + more
        update: dict[str, object] = {"modified_files": tuple(files)}
        if self.failure_kind is None:
            update.update(
                failure_kind="checkout-modified",
                failure_reason="checkout-modified",
                failure_detail=f"the tests changed tracked files of their checkout: {named}",
            )
        return self.model_copy(update=update)


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
