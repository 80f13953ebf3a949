"""The run's lifecycle and each question's, written once: which state each event moves them
to, and from which states. The fold (`domain/run_state.py`) keeps them per run; the ledger
index (`projections/content_index.py`: the run's status row, the list of undecided questions)
and its re-index (`ledger/service.rebuilt_index_rows`) take their steps from the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from release_ledger.domain import events as ev

# A question's states: undecided ones are listed by `ledger questions`.
OPEN, EXPIRED, PARKED = "open", "expired", "parked"
ANSWERED, ASSUMED, TAKEN = "answered", "assumed", "taken"
LISTED = frozenset({OPEN, EXPIRED, PARKED})


@dataclass(frozen=True, slots=True)
class QuestionStep:
    """Where an event moves a question: `to`, from any state in `source` (None: from any
    state the question is in); `new` steps create the question."""

    to: str
    source: frozenset[str] | None = None
    new: bool = False

    def moves(self, current: str | None) -> bool:
        """Whether the step applies to a question now in `current` (None: not asked yet)."""
        if self.new:
            return True
        return current is not None and (self.source is None or current in self.source)


QUESTION_STEPS: dict[type[ev.Event], QuestionStep] = {
    ev.QuestionAsked: QuestionStep(OPEN, new=True),
    ev.AssumptionMade: QuestionStep(ASSUMED, new=True),  # decided by the policy at once
    ev.QuestionAnswered: QuestionStep(ANSWERED),  # an answer counts even after a deadline
    ev.QuestionExpired: QuestionStep(EXPIRED, frozenset({OPEN})),
    ev.RecommendationTaken: QuestionStep(TAKEN, LISTED),
    ev.QuestionParked: QuestionStep(PARKED, LISTED),
}

# How the open-question index follows a step: insert, mark, or drop the decided question.
INDEX_CHANGES = {OPEN: "open", EXPIRED: "expire", PARKED: "park"}
CLOSE = "close"


def index_change(step: QuestionStep) -> str:
    """The open-question index's change for a step (`close` once decided)."""
    return INDEX_CHANGES.get(step.to, CLOSE)


# The run's states, as the status row shows them.
RUNNING, INTERRUPTED, COMPLETED = "running", "interrupted", "completed"

RUN_STEPS: dict[type[ev.Event], str] = {
    ev.RunStarted: RUNNING,
    ev.RunInterrupted: INTERRUPTED,
    ev.RunResumed: RUNNING,
    ev.RunCompleted: COMPLETED,
}
