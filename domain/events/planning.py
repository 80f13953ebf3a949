"""Before the shards run: the test files discovered, each file's measurement (or why it
failed, or whose measurement was reused), the plan, and a pool's measurement and placement."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from release_ledger.domain.events.base import (
    Event,
    OnInterpreter,
)
from release_ledger.domain.harness import HarnessChange


class TestFilesDiscovered(Event):
    __test__ = False  # not a pytest test class
    kind: Literal["TestFilesDiscovered"] = "TestFilesDiscovered"
    files: list[str]
    missing_at_base: list[str] = Field(default_factory=list)
    # Test files base has and head does not: deleted (`removed_at_head`), or moved to a new
    # path, as git's rename detection pairs them by content (`renamed_at_head`: old -> new).
    removed_at_head: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    renamed_at_head: dict[str, str] = Field(
        default_factory=dict, exclude_if=lambda value: not value
    )
    # conftest.py files and pytest configuration that differ between base and head
    # (`domain/harness.py`); None in events from before the gate compared them.
    harness_changed: list[HarnessChange] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    # What discovery read of each file at head, for the first plan's nominal costs.
    sizes: dict[str, int] = Field(default_factory=dict)
    test_functions: dict[str, int] = Field(default_factory=dict)
    # Items the declared invocation collected in each file (a parametrized case each), where
    # it was collected: a better first cost than `def test` counts. Empty in events recorded
    # before it, or where the file walk found the files, and then left out.
    collected_items: dict[str, int] = Field(
        default_factory=dict, exclude_if=lambda value: not value
    )
    # The files in the order the project's own run collects them (`domain/order.py`): a
    # failure at both revisions is confirmed in that order before it is called preexisting.
    # Empty in events recorded before: those runs are judged as they were.
    order: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    # How the files were found: the items the declared invocation collected, or the file
    # walk as the fallback and why (empty in events recorded before it, and left out).
    collected_by: str = Field(default="", exclude_if=lambda value: value == "")


class FileMeasured(OnInterpreter, Event):
    kind: Literal["FileMeasured"] = "FileMeasured"
    file: str
    rss_mb: float
    seconds: float
    exit_code: int | None = None
    signal: int | None = None
    # The file collected no test case at all (not even a module-level skip). None in events
    # recorded before this field: then pytest's exit code 5 says it.
    empty: bool | None = None
    # Where the figures come from: `solo` (the file run alone before planning) or `shard` (the
    # gate's pytest plugin inside a head shard attempt, named by `shard` and `attempt`).
    source: Literal["solo", "shard"] = "solo"
    shard: str | None = None
    attempt: int | None = None
    # Content identity (domain/content.py): the file's blob at head and the measurement key
    # (blob, environment, command) a later gate reuses it by. None: recorded before reuse by
    # content, never reused.
    commit: str | None = None
    blob: str | None = None
    key: str | None = None
    # The memory model's split (domain/memory.py), MB; None when only a peak is known.
    baseline_mb: float | None = None
    retained_mb: float | None = None
    transient_mb: float | None = None
    # The file was its process's first: what collecting it took (the imports its shard's
    # files share, and its own), kept out of `retained_mb`. None: not first, or recorded before.
    shared_mb: float | None = None
    # How far the process had grown above its baseline when the file finished: an upper bound
    # of what the file holds run cold (domain/memory.py). None: not measured, or recorded before.
    ceiling_mb: float | None = None

    @property
    def holds_no_test(self) -> bool:
        return self.empty if self.empty is not None else self.exit_code == 5


class MeasurementFailed(OnInterpreter, Event):
    kind: Literal["MeasurementFailed"] = "MeasurementFailed"
    file: str
    reason: str  # signal, timeout, oom, no-output, ...
    exit_code: int | None = None
    signal: int | None = None
    rss_mb: float = 0.0
    seconds: float = 0.0
    log_tail_hash: str | None = None
    # Set when the executor could not finish the run: its own word (ssh-dropped, Evicted) and
    # the kind (`domain.failures`). Unless the kind is the tests' own outcome, the file is
    # not a culprit and is measured again in the next round.
    infrastructure_failure: str | None = None
    failure_kind: str | None = None
    detail: str = ""

    def artifact_hashes(self) -> list[str]:
        return [self.log_tail_hash] if self.log_tail_hash else []


class MeasurementReused(OnInterpreter, Event):
    kind: Literal["MeasurementReused"] = "MeasurementReused"
    file: str
    from_run: str
    rss_mb: float
    seconds: float
    key: str | None = None  # the measurement key it matched (None: matched by path, before keys)
    baseline_mb: float | None = None
    retained_mb: float | None = None
    transient_mb: float | None = None
    shared_mb: float | None = None
    ceiling_mb: float | None = None


class PlannedShard(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    files: list[str]
    rss_mb: float
    seconds: float


class ShardsPlanned(OnInterpreter, Event):
    kind: Literal["ShardsPlanned"] = "ShardsPlanned"
    budget_mb: float
    count: int
    shards: list[PlannedShard]


class MemberLease(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    member: str
    ready: bool
    capacity: int = 0
    running: int = 0
    pending: int = 0
    free_mb_per_node: dict[str, float] = Field(default_factory=dict)
    reason: str = ""


class PoolMeasured(OnInterpreter, Event):
    kind: Literal["PoolMeasured"] = "PoolMeasured"
    round: int
    members: list[MemberLease]


class ShardPlaced(OnInterpreter, Event):
    kind: Literal["ShardPlaced"] = "ShardPlaced"
    shard: str
    member: str
    round: int
    node: str = ""
    reservation_mb: int = 0
