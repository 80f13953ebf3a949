"""Domain events: the facts a gate run records, one stream per run.

Every event is an immutable pydantic model with a `schema_version`, serialised to JSON and back
without loss. Events record observations (exit codes, report hashes, answers, deadlines
passing) and never conclusions: verdicts are projections rebuilt from these facts.
"""

import functools
import json
import operator
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from release_ledger.domain.harness import HarnessChange
from release_ledger.domain.invocation import TestInvocation

Revision = Literal["head", "base"]


class Event(BaseModel):
    """Base of every event. `kind` names the type on the wire; `at` comes from the clock."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    SCHEMA_VERSION: ClassVar[int] = 1
    # What kind of fact it is, declared once here and read by the write side and every
    # projector instead of lists of kind names kept by hand (`kinds_with`):
    # - OWNER_INPUT: an owner's act, appended beside whichever process drives the run;
    # - AFFECTS_VERDICT: the run's verdict status is computed again after it;
    # - QUESTION: a step in a question's life (asked, assumed, answered, expired, ...);
    # - LIFECYCLE: a step in the run's own life (started, interrupted, resumed, completed).
    TRAITS: ClassVar[frozenset[str]] = frozenset()

    kind: str
    schema_version: int = 1
    run_id: str
    at: datetime

    def artifact_hashes(self) -> list[str]:
        """Hashes of the artifacts (reports, log tails) this event references."""
        return []


OWNER_INPUT = "owner-input"
AFFECTS_VERDICT = "affects-verdict"
QUESTION = "question"
LIFECYCLE = "lifecycle"


class OnInterpreter(BaseModel):
    """Trait of the facts observed on one interpreter of a matrix gate (`--python`).

    `interpreter` is the matrix label (`3.12`); empty in a gate of one interpreter, and then
    left out of the stored JSON, so such events are byte for byte what they were before the
    matrix. The fold keeps each interpreter's facts apart (`domain/run_state.fold`).
    """

    interpreter: str = Field(default="", exclude_if=lambda value: value == "")


# --- run lifecycle -------------------------------------------------------------------------


class RunStarted(Event):
    kind: Literal["RunStarted"] = "RunStarted"
    TRAITS: ClassVar[frozenset[str]] = frozenset({LIFECYCLE})
    repo: str
    head_ref: str
    base_ref: str
    head: str  # full commit SHA
    base: str  # full commit SHA
    rule: str
    executor: str
    command: list[str]
    options: dict[str, Any] = Field(default_factory=dict)
    tool_version: str
    python_version: str = ""
    runtime_pin: str | None = None  # .python-version or requires-python of the repository


class RunInterrupted(Event):
    kind: Literal["RunInterrupted"] = "RunInterrupted"
    TRAITS: ClassVar[frozenset[str]] = frozenset({LIFECYCLE})
    reason: str


class RunResumed(Event):
    kind: Literal["RunResumed"] = "RunResumed"
    TRAITS: ClassVar[frozenset[str]] = frozenset({LIFECYCLE})
    pid: int = 0


class RunCompleted(Event):
    kind: Literal["RunCompleted"] = "RunCompleted"
    TRAITS: ClassVar[frozenset[str]] = frozenset({LIFECYCLE, AFFECTS_VERDICT})


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


# --- measurement and planning --------------------------------------------------------------


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


# --- execution -----------------------------------------------------------------------------


class ShardAttemptRecorded(OnInterpreter, Event):
    kind: Literal["ShardAttemptRecorded"] = "ShardAttemptRecorded"
    shard: str
    attempt: int
    revision: Revision
    files: list[str]  # the files run at this revision (files new at head are not run at base)
    member: str = "local"
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    # Ended by the gate's pytest plugin at its file's time limit (`domain/timing.py`):
    # the test that was running and the limit.
    killed_test: str | None = Field(default=None, exclude_if=lambda value: value is None)
    time_limit_s: float | None = Field(default=None, exclude_if=lambda value: value is None)
    # A time-limit line in the log that the supervisor's figures do not bear out (the run
    # did not end as the plugin ends one, or ended before the limit): why it was not believed.
    time_limit_not_believed: str | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    oom: bool = False
    report_hash: str | None = None
    log_tail_hash: str | None = None
    rss_mb: float = 0.0
    seconds: float = 0.0
    infrastructure_failure: str | None = None  # the executor's word: Evicted, ssh-connect
    infrastructure_detail: str = ""
    failure_kind: str | None = None  # its kind in `domain.failures` (None in older events)
    # Tracked files the attempt's tests changed in its own checkout (no other attempt saw it).
    modified_files: list[str] = Field(default_factory=list)
    # How the suite was confined (`bwrap`, `pod`, or `none`: it ran with the gate's rights);
    # empty in events of executors that do not say, and in events from before sandboxes.
    sandbox: str = Field(default="", exclude_if=lambda value: value == "")
    # The size of a report over --max-report-mb; `report_hash` is then only its head.
    report_too_large: int | None = None
    # What the results are valid for (`domain/content.py`), so they can be reused by content:
    # the commit run, each file's git blob hash, the environment and command keys. Empty in
    # events recorded before the result cache: those results are never reused.
    commit: str | None = None
    blobs: dict[str, str] = Field(default_factory=dict)
    environment_key: str | None = None
    command_key: str | None = None

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.report_hash, self.log_tail_hash) if h]


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


class IsolationRecorded(OnInterpreter, Event):
    kind: Literal["IsolationRecorded"] = "IsolationRecorded"
    file: str
    revision: Revision
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    # Ended by the gate's pytest plugin at its file's time limit (`domain/timing.py`):
    # the test that was running and the limit.
    killed_test: str | None = Field(default=None, exclude_if=lambda value: value is None)
    time_limit_s: float | None = Field(default=None, exclude_if=lambda value: value is None)
    # A time-limit line in the log that the supervisor's figures do not bear out (the run
    # did not end as the plugin ends one, or ended before the limit): why it was not believed.
    time_limit_not_believed: str | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    report_hash: str | None = None
    log_tail_hash: str | None = None
    seconds: float = 0.0
    report_too_large: int | None = None  # as in ShardAttemptRecorded
    sandbox: str = Field(default="", exclude_if=lambda value: value == "")  # as there
    # Killed over its memory limit (the isolation budget), and its peak: a file that needs
    # more alone at head than it may have, where base ran within it, is a finding `oom`.
    oom: bool = Field(default=False, exclude_if=lambda value: not value)
    rss_mb: float = Field(default=0.0, exclude_if=lambda value: not value)

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.report_hash, self.log_tail_hash) if h]


class InOrderRecorded(OnInterpreter, Event):
    """Files run in the project's own order (`domain/order.py`): every file that precedes the
    ones it `confirms` in the collection, then them, at one revision, in one process. A
    failure at both revisions in shards is preexisting only if it fails here too."""

    kind: Literal["InOrderRecorded"] = "InOrderRecorded"
    revision: Revision
    files: list[str]  # as run, in order
    confirms: list[str]  # the files whose failures this run judges
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    report_hash: str | None = None
    log_tail_hash: str | None = None
    seconds: float = 0.0
    report_too_large: int | None = None
    oom: bool = Field(default=False, exclude_if=lambda value: not value)
    rss_mb: float = Field(default=0.0, exclude_if=lambda value: not value)
    infrastructure_failure: str | None = None
    failure_kind: str | None = None

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.report_hash, self.log_tail_hash) if h]


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

    def artifact_hashes(self) -> list[str]:
        return [self.log_tail_hash] if self.log_tail_hash else []


class PackageMove(BaseModel):
    """One package whose version differs between base's package set and head's ("" where a
    revision has none of it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    base: str = ""
    head: str = ""


class AttributionRecorded(OnInterpreter, Event):
    """Head's introduced failures run again at head with base's package set (issue 25): the
    observation that tells a failure the code introduced from one the dependency change did.

    `tests` were introduced at head and `moved` the packages whose versions differ between the
    revisions' environments; `pins_hash` is base's package set as installed for the run (an
    artifact). When that set does not install with head's code, `environment_error` says why
    and nothing ran. The classification is a projection (`domain/attribution.py`)."""

    kind: Literal["AttributionRecorded"] = "AttributionRecorded"
    tests: list[str]
    files: list[str]
    moved: list[PackageMove]
    pins_hash: str | None = None
    environment_key: str = ""
    environment_error: str = ""
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    report_hash: str | None = None
    log_tail_hash: str | None = None
    seconds: float = 0.0
    report_too_large: int | None = None
    failure_kind: str | None = None  # as in ShardAttemptRecorded
    failure_reason: str | None = None
    sandbox: str = Field(default="", exclude_if=lambda value: value == "")

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.pins_hash, self.report_hash, self.log_tail_hash) if h]


# Why a failure the gate would call introduced is not blamed on head (issue 29): the test
# was flaky at base in earlier gates, flaky at this head in an earlier attempt, or is listed
# in the project's `quarantine`. A closed set: rules and readers know every one.
EXONERATION_REASONS = ("flaky-at-base", "flaky-at-head", "quarantined")


class Proof(BaseModel):
    """One event that proves an exoneration: its run and position in that run's stream, what
    it observed of the test (`outcome` at `revision`), or the setting it recorded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    position: int
    revision: str = ""
    outcome: str = ""


class ExonerationsLookedUp(OnInterpreter, Event):
    """The gate looked head's introduced failures up in the ledger's history and the run's
    quarantine (issue 29), before calling them introduced; each one found appends a
    `FailureExonerated` beside this event. Recorded even when none was, so the lookup is
    done once and a resumed run does not repeat it."""

    kind: Literal["ExonerationsLookedUp"] = "ExonerationsLookedUp"
    tests: list[str]


class FailureExonerated(OnInterpreter, Event):
    """A failure the gate would call introduced, with the reason it is not blamed on head
    (`EXONERATION_REASONS`) and the events that prove it. What it means is the rule's to say
    (`default`: listed, not introduced; `strict`: still introduced)."""

    kind: Literal["FailureExonerated"] = "FailureExonerated"
    test: str
    reason: Literal["flaky-at-base", "flaky-at-head", "quarantined"]
    proof: list[Proof]


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


# --- clarification -------------------------------------------------------------------------

Impact = Literal["low", "high", "critical"]


class QuestionAsked(Event):
    kind: Literal["QuestionAsked"] = "QuestionAsked"
    TRAITS: ClassVar[frozenset[str]] = frozenset({QUESTION, AFFECTS_VERDICT})
    question_id: str
    topic: str
    text: str
    options: list[str]
    recommended: str
    impact: Impact
    deadline: datetime
    subject: list[str] = Field(default_factory=list)  # files or tests the question is about


class QuestionAnswered(Event):
    kind: Literal["QuestionAnswered"] = "QuestionAnswered"
    TRAITS: ClassVar[frozenset[str]] = frozenset({QUESTION, AFFECTS_VERDICT, OWNER_INPUT})
    question_id: str
    choice: str
    by: str
    late: bool = False


class AssumptionMade(Event):
    kind: Literal["AssumptionMade"] = "AssumptionMade"
    TRAITS: ClassVar[frozenset[str]] = frozenset({QUESTION, AFFECTS_VERDICT})
    question_id: str
    topic: str
    text: str
    options: list[str]
    choice: str
    impact: Impact
    reason: str
    subject: list[str] = Field(default_factory=list)


class QuestionExpired(Event):
    kind: Literal["QuestionExpired"] = "QuestionExpired"
    TRAITS: ClassVar[frozenset[str]] = frozenset({QUESTION, AFFECTS_VERDICT, OWNER_INPUT})
    question_id: str
    deadline: datetime


class RecommendationTaken(Event):
    kind: Literal["RecommendationTaken"] = "RecommendationTaken"
    TRAITS: ClassVar[frozenset[str]] = frozenset({QUESTION, AFFECTS_VERDICT, OWNER_INPUT})
    question_id: str
    choice: str


class QuestionParked(Event):
    kind: Literal["QuestionParked"] = "QuestionParked"
    TRAITS: ClassVar[frozenset[str]] = frozenset({QUESTION, AFFECTS_VERDICT, OWNER_INPUT})
    question_id: str


# --- approval ------------------------------------------------------------------------------

MetricVerdict = Literal["pass", "fail", "unmeasured"]


class CheckRecorded(Event):
    kind: Literal["CheckRecorded"] = "CheckRecorded"
    TRAITS: ClassVar[frozenset[str]] = frozenset({OWNER_INPUT})
    name: str  # the safe key (letters, digits, '.', '_', '-')
    verdict: MetricVerdict
    value: str = ""
    by: str = ""
    display_name: str = ""  # as the owner typed it ("installation files"); empty: the key


class ChangelogFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    sha256: str  # the file's bytes at head (first `limit` bytes), stored as an artifact
    size: int
    truncated: bool = False


class ReleaseInspected(Event):
    """What head's tree says about the release, read once at gate start (git, no checkout):
    the project's name and version, tags at head, changelog files and towncrier fragments,
    and the `[tool.release-ledger]` settings. The built-in checks and the approval report
    are pure functions of this evidence."""

    kind: Literal["ReleaseInspected"] = "ReleaseInspected"
    project: str | None = None
    version: str | None = None
    version_source: str = ""  # "pyproject.toml [project] version", "tag v1.2.0", ...
    # How the build declares a version the tree does not name ("setuptools_scm", "hatch-vcs",
    # "flit (the module's __version__)", ...): the release is then what head's wheel states.
    version_dynamic: str = Field(default="", exclude_if=lambda value: not value)
    base_version: str | None = None
    tags_at_head: list[str] = Field(default_factory=list)
    tag: str | None = None  # the release's tag: one at head naming the version, else v<version>
    changelog_files: list[ChangelogFile] = Field(default_factory=list)
    towncrier: bool = False  # [tool.towncrier] configured at head
    fragments: list[str] = Field(default_factory=list)  # towncrier fragments left at head
    rollback: list[str] | None = None  # [tool.release-ledger] rollback, one command a line
    required_checks: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)  # settings that could not be read

    def artifact_hashes(self) -> list[str]:
        return [f.sha256 for f in self.changelog_files]


class DistributionFile(BaseModel):
    """One built distribution (sdist or wheel) as its own metadata describes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["sdist", "wheel"]
    filename: str
    sha256: str  # of the file's bytes (the file itself is not kept in the ledger)
    size: int
    name: str = ""  # metadata Name
    version: str = ""  # metadata Version
    metadata_version: str = ""
    description_content_type: str = ""
    description: bool = False  # a long description (the README) is in the metadata
    readme: str = ""  # twine check's word for it: passed, warned, failed; empty: not checked


class DistributionsBuilt(Event):
    """A revision's sdist and wheel built with its PEP 517 backend from a clean checkout of
    the commit (or why not), their metadata and hashes, and `twine check`'s output. Made at
    gate time by `adapters/distributions.py`; the `distributions` check is a pure function of
    it (and `upgrade` reads base's and head's)."""

    kind: Literal["DistributionsBuilt"] = "DistributionsBuilt"
    revision: Revision
    commit: str
    # error: the gate itself could not build (its own fault, not the project's)
    status: Literal["built", "failed", "not-packaged", "error"]
    how: str = ""  # "uv build", "python -m build"
    python_version: str = ""
    files: list[DistributionFile] = Field(default_factory=list)
    top_level: list[str] = Field(default_factory=list)  # the wheel's importable packages
    readme_check: str = ""  # how the README was checked ("twine check"); empty: not checked
    readme_error: str = ""  # why the README could not be checked (twine not installable, ...)
    check_output_hash: str | None = None  # twine check's output, as an artifact
    error: str = ""
    log_tail_hash: str | None = None  # the build log's end, as an artifact
    seconds: float = 0.0
    reused: bool = False  # taken from the build cache (same commit, same interpreter)

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.check_output_hash, self.log_tail_hash) if h]


class UpgradeStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    step: str  # "install base", "upgrade to head", "pip check"
    exit_code: int | None = None
    error: str = ""


class UpgradeChecked(Event):
    """Base's wheel installed, then head's over it, in a fresh environment: what each step
    did, the version installed after each, and what importing head's packages gave."""

    kind: Literal["UpgradeChecked"] = "UpgradeChecked"
    base_commit: str
    head_commit: str
    project: str = ""  # the distribution name installed
    base_wheel: str = ""  # file name
    base_wheel_sha256: str = ""
    head_wheel: str = ""
    head_wheel_sha256: str = ""
    how: str = ""  # uv, pip
    python_version: str = ""
    steps: list[UpgradeStep] = Field(default_factory=list)
    version_before: str | None = None  # importlib.metadata after installing base
    version_after: str | None = None  # after installing head over it
    imports: dict[str, str] = Field(default_factory=dict)  # module -> "ok" or the error
    skipped: str = ""  # why it was not attempted (no base wheel, ...)
    packages_hash: str | None = None  # the environment's frozen list after the upgrade
    log_tail_hash: str | None = None
    seconds: float = 0.0
    reused: bool = False

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.packages_hash, self.log_tail_hash) if h]


class ApprovalIssued(Event):
    kind: Literal["ApprovalIssued"] = "ApprovalIssued"
    TRAITS: ClassVar[frozenset[str]] = frozenset({OWNER_INPUT})
    outcome: str
    rule: str
    rule_version: int = 1
    report_sha256: str
    required: list[str] = Field(default_factory=list)
    # 1: the first report (gate, checks, runtime pin); 2: titled by version, built-in release
    # checks, rollback commands from the recorded `ReleaseInspected`; 3: also dependencies,
    # distributions and upgrade, and only the required metrics decide; 4: the gate's why also
    # names tests skipped at both revisions for a missing module. Audit derives by it.
    report_format: int = 1


class AttestationIssued(Event):
    """A signed (or unsigned) bundle of in-toto statements given out for the run: the ledger
    knows what evidence it issued. The statements derive from the events up to `position`."""

    kind: Literal["AttestationIssued"] = "AttestationIssued"
    TRAITS: ClassVar[frozenset[str]] = frozenset({OWNER_INPUT})
    envelope_sha256: list[str]  # sha256 of each envelope's JSON line, in the bundle's order
    key_id: str = ""  # the signing key's id; empty: unsigned statements
    position: int  # the chain position the statements derive from
    chain_tip: str  # that position's chain hash
    verification_result: str  # the VSA's PASSED / FAILED
    rule: str


# Every event type, once: the wire names (`EVENT_TYPES`) and the any-event validator derive
# from it. Adding an event: its class above (with its TRAITS), a line here, and one handler in
# each projector (`tests/test_projectors.py` names any that has none); see docs/extending.md,
# "Adding an event".
ALL_EVENTS: tuple[type[Event], ...] = (
    RunStarted,
    RunInterrupted,
    RunResumed,
    RunCompleted,
    EnvironmentPrepared,
    TestFilesDiscovered,
    FileMeasured,
    MeasurementFailed,
    MeasurementReused,
    ShardsPlanned,
    PoolMeasured,
    ShardPlaced,
    ShardAttemptRecorded,
    PodFailed,
    ShardSplit,
    IsolationRecorded,
    InOrderRecorded,
    SourceRejected,
    BaselineReused,
    AttributionRecorded,
    ExonerationsLookedUp,
    FailureExonerated,
    QuestionAsked,
    QuestionAnswered,
    AssumptionMade,
    QuestionExpired,
    RecommendationTaken,
    QuestionParked,
    CheckRecorded,
    ReleaseInspected,
    DistributionsBuilt,
    UpgradeChecked,
    ApprovalIssued,
    AttestationIssued,
)

EVENT_TYPES: dict[str, type[Event]] = {cls.model_fields["kind"].default: cls for cls in ALL_EVENTS}


def kinds_with(trait: str) -> frozenset[str]:
    """The wire names of the event types that declare `trait` (see `Event.TRAITS`)."""
    return frozenset(kind for kind, cls in EVENT_TYPES.items() if trait in cls.TRAITS)


def _any_event_type() -> Any:
    """`ALL_EVENTS` as one discriminated union, for pydantic's validators."""
    union = functools.reduce(operator.or_, ALL_EVENTS)
    return Annotated[union, Field(discriminator="kind")]


@functools.cache
def _any_event() -> TypeAdapter[Any]:
    """Built on first use: the union's validator costs start-up time most commands never use."""
    return TypeAdapter(_any_event_type())


@functools.cache
def _any_events() -> TypeAdapter[list[Any]]:
    many: TypeAdapter[list[Any]] = TypeAdapter(list[_any_event_type()])  # type: ignore[misc,arg-type]
    return many


def event_to_json(event: Event) -> str:
    """Canonical JSON of an event (sorted keys, no spaces): the bytes the hash chain covers."""
    return json.dumps(event.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def events_from_json(payloads: Sequence[bytes]) -> list[Event]:
    """Parse and validate many events in one validator call (fully validated, like
    `event_from_json`, but without the per-call overhead that dominates reading a stream)."""
    if not payloads:
        return []
    events: list[Event] = _any_events().validate_json(b"[" + b",".join(payloads) + b"]")
    if len(events) != len(payloads):
        raise ValueError("a stored event payload is not a single JSON object")
    return events


@functools.cache
def _many_of(kind: str) -> TypeAdapter[list[Any]]:
    """One kind's list validator, built the first time that kind is read (models defer their
    own build: a command pays only for the kinds it meets)."""
    many: TypeAdapter[list[Any]] = TypeAdapter(list[EVENT_TYPES[kind]])  # type: ignore[valid-type]
    return many


def events_as_stored(payloads: Sequence[bytes], kinds: Sequence[str]) -> list[Event] | None:
    """Validate each payload as the kind it was stored as, one validator call per kind (fully
    validated: a payload of another kind fails its model's `kind`). None when any payload is
    not exactly one valid event of its stored kind: the caller then parses them as any event,
    which names what is wrong."""
    if len(payloads) != len(kinds):
        raise ValueError("one stored kind per payload is needed")
    groups: dict[str, list[int]] = {}
    for index, kind in enumerate(kinds):
        if kind not in EVENT_TYPES:
            return None
        groups.setdefault(kind, []).append(index)
    events: list[Any] = [None] * len(payloads)
    for kind, indexes in groups.items():
        try:
            parsed = _many_of(kind).validate_json(
                b"[" + b",".join([payloads[i] for i in indexes]) + b"]"
            )
        except ValueError:
            return None
        if len(parsed) != len(indexes):
            return None
        for index, event in zip(indexes, parsed, strict=True):
            events[index] = event
    return events


def event_from_json(data: str | bytes, kind: str | None = None) -> Event:
    """Parse and validate one event; with its `kind` known, skip the discriminator search."""
    if kind is not None and kind in EVENT_TYPES:
        return EVENT_TYPES[kind].model_validate_json(data)
    event: Event = _any_event().validate_json(data)
    return event
