"""Each revision's environment as it was prepared: the declared sources tried, how it was
made, its frozen package list (an artifact), the test invocation it declares."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from release_ledger.domain.events.base import (
    Event,
    OnInterpreter,
    Revision,
)
from release_ledger.domain.invocation import TestInvocation


class EnvironmentSource(BaseModel):
    """One declared environment source tried for a revision, and what became of it."""

    model_config = ConfigDict(frozen=True)

    source: str
    detail: str = ""
    outcome: Literal["used", "failed"] = "used"
    error: str = ""
    log_tail_hash: str | None = None  # the install log's end, as an artifact


class EnvironmentPrepared(OnInterpreter, Event):
    """The environment one revision's tests ran in, where they ran (or why it failed)."""

    kind: Literal["EnvironmentPrepared"] = "EnvironmentPrepared"
    revision: Revision
    commit: str
    where: str  # local, the SSH host, the pool member
    status: Literal["ready", "failed"]
    how: str  # uv, pip, command, none, gate-interpreter
    key: str = ""
    python: str = ""
    python_version: str = ""
    reused: bool = False
    seconds: float = 0.0
    packages_hash: str | None = None  # the frozen package list, as an artifact
    packages: int = 0  # how many
    imports: dict[str, str] = Field(default_factory=dict)  # package -> where it resolved
    warnings: list[str] = Field(default_factory=list)
    error: str = ""
    log_tail_hash: str | None = None
    project: str | None = None
    extra: str | None = None
    group: str | None = None
    files_read: list[str] = Field(default_factory=list)
    source: str = ""  # the declared source used: tox, dependency-group, extras, ...
    deps_key: str = ""
    exclude_newer: str = ""  # resolved as the index stood then (`--resolve-as-of`)
    tried: list[EnvironmentSource] = Field(default_factory=list)
    # The project's wheel metadata: every `Requires-Dist` line and `Provides-Extra` name, as
    # declared (left out of the JSON when empty, as events recorded before them were).
    requires_dist: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    provides_extra: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    # The test invocation this revision runs on this interpreter (domain/invocation.py). A
    # field here, not an event of its own: it is resolved from the same declared source, in
    # the same environment and at the same moment, and a revision's environment and how its
    # tests are run are one fact for a postmortem. None in events recorded before it.
    invocation: TestInvocation | None = Field(default=None, exclude_if=lambda value: value is None)
    # The lock file that pinned the packages (`uv.lock sha256:<hex>`; empty: none) and why it
    # was or was not applied: only where the declared source's own tool reads it.
    lock: str = Field(default="", exclude_if=lambda value: not value)
    lock_note: str = Field(default="", exclude_if=lambda value: not value)

    def artifact_hashes(self) -> list[str]:
        tails = [t.log_tail_hash for t in self.tried if t.log_tail_hash]
        return [h for h in (self.packages_hash, self.log_tail_hash, *tails) if h]


class SourceRejected(OnInterpreter, Event):
    """A declared environment source that installed but whose tests could not run: every shard
    of the revision stopped before running a test (`domain/unrunnable.py`). Its attempts no
    longer count; the revision's shards run again with the next declared source."""

    kind: Literal["SourceRejected"] = "SourceRejected"
    revision: Revision
    commit: str
    where: str = "local"
    source: str  # `EnvironmentPrepared.source`: dependency-group, extras, ...
    detail: str = ""  # what the source named (`group test`), from the environment's record
    key: str = ""  # the environment that was rejected
    reason: str  # usage-error, collection-errors
    error: str = ""  # one line from the log: what stopped the run
    log_tail_hash: str | None = None  # a shard's log tail, as an artifact
    stopped_shards: list[str] = Field(default_factory=list)  # every one of the revision
    # base files whose results came from the result cache, made in this source's environment
    # (the same key): dropped with its attempts, so they run again in the next source
    reused_dropped: list[str] = Field(default_factory=list)

    def artifact_hashes(self) -> list[str]:
        return [self.log_tail_hash] if self.log_tail_hash else []
