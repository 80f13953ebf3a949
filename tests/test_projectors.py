"""Every event type has a declared home in every projector: folded or named as not folded,
described in the timeline, fed to the ledger's indexes or named as not indexed, and read by
the read models directly or through the fold. A new event that no projector handles fails
here, naming the projector and the event (docs/extending.md, "Adding an event")."""

from __future__ import annotations

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.lifecycles import QUESTION_STEPS, RUN_STEPS
from release_ledger.domain.run_state import FOLDED, NOT_FOLDED
from release_ledger.projections.content_index import NOT_INDEXED, index_feeds
from release_ledger.projections.read_models import READ_FROM_EVENTS
from release_ledger.projections.timeline import DESCRIBERS

ALL = set(ev.ALL_EVENTS)


def _names(types: set[type[ev.Event]]) -> list[str]:
    return sorted(t.__name__ for t in types)


def test_the_wire_names_are_the_one_list_of_event_types() -> None:
    assert set(ev.EVENT_TYPES.values()) == ALL
    assert len(ev.ALL_EVENTS) == len(ALL)  # listed once each


def test_the_run_fold_handles_or_names_every_event_type() -> None:
    assert _names(ALL - set(FOLDED) - NOT_FOLDED) == []
    assert _names(set(FOLDED) & NOT_FOLDED) == []
    assert _names(set(FOLDED) - ALL) == []


def test_the_timeline_describes_every_event_type() -> None:
    assert _names(ALL - set(DESCRIBERS)) == []


def test_the_ledger_index_feeds_on_or_names_every_event_type() -> None:
    fed = {t for t in ALL if index_feeds(t)}
    assert _names(ALL - fed - NOT_INDEXED) == []
    assert _names(fed & NOT_INDEXED) == []


def test_the_read_models_read_every_event_type_directly_or_through_the_fold() -> None:
    assert _names(ALL - READ_FROM_EVENTS - set(FOLDED) - NOT_FOLDED) == []


def test_the_lifecycles_are_written_once_and_cover_their_traits() -> None:
    """The question and run lifecycles (domain/lifecycles.py) step exactly the events that
    declare those traits, so the hand-kept kind lists they replaced cannot drift."""
    assert {t.__name__ for t in QUESTION_STEPS} == ev.kinds_with(ev.QUESTION)
    assert {t.__name__ for t in RUN_STEPS} == ev.kinds_with(ev.LIFECYCLE)


@pytest.mark.parametrize(
    ("trait", "kinds"),
    [
        (ev.OWNER_INPUT, {"QuestionAnswered", "QuestionExpired", "QuestionParked",
                          "RecommendationTaken", "CheckRecorded", "ApprovalIssued",
                          "AttestationIssued"}),
        (ev.AFFECTS_VERDICT, {"RunCompleted", "QuestionAsked", "QuestionAnswered",
                              "QuestionExpired", "QuestionParked", "RecommendationTaken",
                              "AssumptionMade"}),
    ],
)  # fmt: skip
def test_traits_name_the_kinds_the_write_side_used_to_list(trait: str, kinds: set[str]) -> None:
    assert ev.kinds_with(trait) == kinds


def test_a_new_event_type_without_handlers_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above can fail: an event type added to the list and to no projector."""

    class Unhandled(ev.Event):
        kind: str = "Unhandled"

    monkeypatch.setattr(ev, "ALL_EVENTS", (*ev.ALL_EVENTS, Unhandled))
    everything = set(ev.ALL_EVENTS)
    assert _names(everything - set(FOLDED) - NOT_FOLDED) == ["Unhandled"]
    assert _names(everything - set(DESCRIBERS)) == ["Unhandled"]
