"""What every event is: `Event` (its kind, run and time, its declared traits) and the
`OnInterpreter` trait of facts observed on one interpreter of a matrix."""

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

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
