"""Where an introduced failure's blame lies: the rerun with base's package set
(attribution) and the lookups that exonerate head (flaky at base or head, quarantined)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict

from release_ledger.domain.events.base import (
    Event,
    OnInterpreter,
)
from release_ledger.domain.events.outcome import Confined, RunEnded


class PackageMove(BaseModel):
    """One package whose version differs between base's package set and head's ("" where a
    revision has none of it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    base: str = ""
    head: str = ""


class AttributionRecorded(OnInterpreter, RunEnded, Confined, Event):
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
    failure_kind: str | None = None  # as in ShardAttemptRecorded
    failure_reason: str | None = None

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
