"""The run's own life: started (with everything it was asked to do), interrupted, resumed,
completed."""

from typing import Any, ClassVar, Literal

from pydantic import Field

from release_ledger.domain.events.base import (
    AFFECTS_VERDICT,
    LIFECYCLE,
    Event,
)


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
