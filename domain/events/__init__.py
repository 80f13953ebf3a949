"""Domain events: the facts a gate run records, one stream per run.

Every event is an immutable pydantic model with a `schema_version`, serialised to JSON and back
without loss. Events record observations (exit codes, report hashes, answers, deadlines
passing) and never conclusions: verdicts are projections rebuilt from these facts.

The event types live by concept in this package's modules (`lifecycle`, `environment`,
`planning`, `attempts`, `blame`, `clarification`, `approval`; `base` holds `Event`, `outcome`
the fields of how a run of tests ended, declared once); this module registers every one once
(`ALL_EVENTS`) and reads and writes them as JSON.
"""

import functools
import json
import operator
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from release_ledger.domain.events.approval import (
    ApprovalIssued,
    AttestationIssued,
    ChangelogFile,
    CheckRecorded,
    DistributionFile,
    DistributionsBuilt,
    MetricVerdict,
    ReleaseInspected,
    UpgradeChecked,
    UpgradeStep,
)
from release_ledger.domain.events.attempts import (
    BaselineReused,
    ChildShard,
    InOrderRecorded,
    IsolationRecorded,
    PodFailed,
    ShardAttemptRecorded,
    ShardSplit,
)
from release_ledger.domain.events.base import (
    AFFECTS_VERDICT,
    LIFECYCLE,
    OWNER_INPUT,
    QUESTION,
    Event,
    OnInterpreter,
    Revision,
)
from release_ledger.domain.events.blame import (
    EXONERATION_REASONS,
    AttributionRecorded,
    ExonerationsLookedUp,
    FailureExonerated,
    PackageMove,
    Proof,
)
from release_ledger.domain.events.clarification import (
    AssumptionMade,
    Impact,
    QuestionAnswered,
    QuestionAsked,
    QuestionExpired,
    QuestionParked,
    RecommendationTaken,
)
from release_ledger.domain.events.environment import (
    EnvironmentPrepared,
    EnvironmentSource,
    SourceRejected,
)
from release_ledger.domain.events.lifecycle import (
    RunCompleted,
    RunInterrupted,
    RunResumed,
    RunStarted,
)
from release_ledger.domain.events.planning import (
    FileMeasured,
    MeasurementFailed,
    MeasurementReused,
    MemberLease,
    PlannedShard,
    PoolMeasured,
    ShardPlaced,
    ShardsPlanned,
    TestFilesDiscovered,
)

__all__ = [
    "AFFECTS_VERDICT",
    "ALL_EVENTS",
    "EVENT_TYPES",
    "EXONERATION_REASONS",
    "LIFECYCLE",
    "OWNER_INPUT",
    "QUESTION",
    "ApprovalIssued",
    "AssumptionMade",
    "AttestationIssued",
    "AttributionRecorded",
    "BaselineReused",
    "ChangelogFile",
    "CheckRecorded",
    "ChildShard",
    "DistributionFile",
    "DistributionsBuilt",
    "EnvironmentPrepared",
    "EnvironmentSource",
    "Event",
    "ExonerationsLookedUp",
    "FailureExonerated",
    "FileMeasured",
    "Impact",
    "InOrderRecorded",
    "IsolationRecorded",
    "MeasurementFailed",
    "MeasurementReused",
    "MemberLease",
    "MetricVerdict",
    "OnInterpreter",
    "PackageMove",
    "PlannedShard",
    "PodFailed",
    "PoolMeasured",
    "Proof",
    "QuestionAnswered",
    "QuestionAsked",
    "QuestionExpired",
    "QuestionParked",
    "RecommendationTaken",
    "ReleaseInspected",
    "Revision",
    "RunCompleted",
    "RunInterrupted",
    "RunResumed",
    "RunStarted",
    "ShardAttemptRecorded",
    "ShardPlaced",
    "ShardSplit",
    "ShardsPlanned",
    "SourceRejected",
    "TestFilesDiscovered",
    "UpgradeChecked",
    "UpgradeStep",
]


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
