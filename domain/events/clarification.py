"""The owner's questions: asked, answered, assumed, expired, the recommendation taken,
parked."""

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import Field

from release_ledger.domain.events.base import (
    AFFECTS_VERDICT,
    OWNER_INPUT,
    QUESTION,
    Event,
)

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
