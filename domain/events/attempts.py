"""What ran: each shard attempt, a pool member's failure, a shard split for bisection, a file
run alone (isolation), and base's results reused from an earlier run."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from release_ledger.domain.events.base import (
    Event,
    OnInterpreter,
    Revision,
)
from release_ledger.domain.events.outcome import Confined, EndedAtTimeLimit, PeakMemory, RunEnded


class ShardAttemptRecorded(OnInterpreter, RunEnded, EndedAtTimeLimit, Confined, Event):
    kind: Literal["ShardAttemptRecorded"] = "ShardAttemptRecorded"
    shard: str
    attempt: int
    revision: Revision
    files: list[str]  # the files run at this revision (files new at head are not run at base)
    member: str = "local"
    # Always recorded (unlike `PeakMemory`'s, which are left out when not).
    oom: bool = False
    rss_mb: float = 0.0
    infrastructure_failure: str | None = None  # the executor's word: Evicted, ssh-connect
    infrastructure_detail: str = ""
    failure_kind: str | None = None  # its kind in `domain.failures` (None in older events)
    # Tracked files the attempt's tests changed in its own checkout (no other attempt saw it).
    modified_files: list[str] = Field(default_factory=list)
    # What the results are valid for (`domain/content.py`), so they can be reused by content:
    # the commit run, each file's git blob hash, the environment and command keys. Empty in
    # events recorded before the result cache: those results are never reused.
    commit: str | None = None
    blobs: dict[str, str] = Field(default_factory=dict)
    environment_key: str | None = None
    command_key: str | None = None


class PodFailed(OnInterpreter, Event):
    kind: Literal["PodFailed"] = "PodFailed"
    member: str
    shard: str
    attempt: int
    revision: Revision
    reason: str  # the executor's word: OOMKilled, Evicted, ImagePullBackOff, ApiError, ...
    detail: str = ""
    failure_kind: str | None = None  # its kind in `domain.failures` (None in older events)


class ChildShard(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    files: list[str]


class ShardSplit(OnInterpreter, Event):
    kind: Literal["ShardSplit"] = "ShardSplit"
    parent: str
    children: list[ChildShard]
    reason: str


class IsolationRecorded(
    OnInterpreter, RunEnded, EndedAtTimeLimit, Confined, PeakMemory, Event
):
    """A file run alone at one revision. Its `oom` is over the isolation budget: a file that
    needs more alone at head than it may have, where base ran within it, is a finding `oom`."""

    kind: Literal["IsolationRecorded"] = "IsolationRecorded"
    file: str
    revision: Revision


class InOrderRecorded(OnInterpreter, RunEnded, PeakMemory, Event):
    """Files run in the project's own order (`domain/order.py`): every file that precedes the
    ones it `confirms` in the collection, then them, at one revision, in one process. A
    failure at both revisions in shards is preexisting only if it fails here too."""

    kind: Literal["InOrderRecorded"] = "InOrderRecorded"
    revision: Revision
    files: list[str]  # as run, in order
    confirms: list[str]  # the files whose failures this run judges
    infrastructure_failure: str | None = None
    failure_kind: str | None = None


class BaselineReused(OnInterpreter, Event):
    kind: Literal["BaselineReused"] = "BaselineReused"
    base: str
    from_run: str
    shard: str
    files: list[str]
    exit_code: int | None = None
    signal: int | None = None
    report_hash: str | None = None
    log_tail_hash: str | None = None
    rss_mb: float = 0.0
    seconds: float = 0.0
    # Per-file reuse from the result cache (absent in whole-shard reuses recorded before it):
    # `files` are the files whose results are taken from the earlier attempt at `from_position`
    # of `from_run` (shard `from_shard`, attempt `from_attempt`, revision `from_revision`),
    # which ran `source_files`; its report (`report_hash`) is read with those files, so a
    # replay needs no other run's events. `result_keys` are the content keys matched.
    source_files: list[str] = Field(default_factory=list)
    from_position: int | None = None
    from_shard: str | None = None
    from_attempt: int | None = None
    from_revision: str | None = None
    result_keys: dict[str, str] = Field(default_factory=dict)

    @property
    def per_file(self) -> bool:
        """A per-file reuse (the result cache), not a whole-shard one."""
        return bool(self.source_files)

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.report_hash, self.log_tail_hash) if h]
