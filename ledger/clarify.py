"""Owner questions in the gate: assume or ask once measuring is done, wait, observe deadlines.

A step hook (`ledger/hooks.py`, wired in `ledger/bootstrap/gate.py`). Time enters only through
events: whoever observes a passed deadline (the waiting gate, `ledger resume`, a late
`ledger answer`) appends `QuestionExpired`, then `RecommendationTaken` or, for a critical question,
`QuestionParked`. A run is completed only once no question is open; without `--wait` the gate
stops with the run awaiting, and `ledger resume RUN` picks it up again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from release_ledger.adapters.store_errors import ConcurrencyConflict
from release_ledger.domain import events as ev
from release_ledger.domain.clarification import candidates, overdue, plan, waiting_on
from release_ledger.domain.run_state import RunState
from release_ledger.ledger.hooks import GateSuspended, HookContext
from release_ledger.ledger.read_side import verdict_of
from release_ledger.ledger.service import Ledger
from release_ledger.projections.timeline import describe

POLL_S = 0.5  # how often a waiting gate looks for answers another process appended


def expiry_events(ledger: Ledger, run_id: str, state: RunState, now: datetime) -> list[ev.Event]:
    """The events recording every deadline passed at `now`: expired, then taken or parked."""
    events: list[ev.Event] = []
    for q in overdue(state, now):
        assert q.deadline is not None
        if q.state == "open":
            events.append(
                ledger.make(ev.QuestionExpired, run_id, question_id=q.id, deadline=q.deadline)
            )
        if q.impact == "critical":
            events.append(ledger.make(ev.QuestionParked, run_id, question_id=q.id))
        else:
            events.append(
                ledger.make(ev.RecommendationTaken, run_id, question_id=q.id, choice=q.recommended)
            )
    return events


def question_events(
    ledger: Ledger, run_id: str, state: RunState, now: datetime, deadline_s: float, budget: int
) -> tuple[list[ev.Event], list[str]]:
    """Assumptions and questions for what the run raises now; plus notes on deferred ones."""
    asked = sum(1 for q in state.questions.values() if q.deadline is not None)
    decisions = plan(candidates(state, verdict_of(state)), asked=asked, budget=budget)
    events: list[ev.Event] = []
    deferred: list[str] = []
    for d in decisions:
        c = d.candidate
        common = {
            "question_id": c.id,
            "topic": c.topic,
            "text": c.text,
            "options": list(c.options),
            "impact": c.impact,
            "subject": list(c.subject),
        }
        if d.action == "assume":
            events.append(
                ledger.make(
                    ev.AssumptionMade, run_id, choice=c.recommended, reason=d.reason, **common
                )
            )
        elif d.action == "ask":
            deadline = now + timedelta(seconds=deadline_s)
            events.append(
                ledger.make(
                    ev.QuestionAsked, run_id, recommended=c.recommended, deadline=deadline, **common
                )
            )
        else:
            deferred.append(f"{c.id} not asked ({d.reason}): {c.text}")
    return events, deferred


def observe_deadlines(ledger: Ledger, run_id: str, state: RunState) -> list[ev.Event] | None:
    """Append the expiry of every deadline passed by now: the events appended, [] when none
    passed, None when another writer appended first (project again and look again)."""
    events = expiry_events(ledger, run_id, state, ledger.clock.now())
    if not events:
        return []
    try:
        ledger.append(run_id, events, expected_length=state.length)
    except ConcurrencyConflict:
        return None
    return events


def clarify(process: HookContext, state: RunState) -> bool:
    """The gate hook: True when it appended (or saw) something worth projecting again."""
    ledger, run_id = process.ledger, process.run_id
    expired = observe_deadlines(ledger, run_id, state)
    if expired is None or expired:
        _tell(process, expired or [])
        return True
    events, deferred = question_events(
        ledger,
        run_id,
        state,
        ledger.clock.now(),
        process.options.deadline_s,
        process.options.question_budget,
    )
    if events:
        try:
            ledger.append(run_id, events, expected_length=state.length)
        except ConcurrencyConflict:
            return True
        _tell(process, events)
        return True
    for note in sorted(set(deferred) - process.told):
        process.observer.notice(note)
        process.told.add(note)
    waiting = waiting_on(state)
    if not waiting:
        return False
    if not process.options.wait:
        ids = ", ".join(q.id for q in waiting)
        process.observer.notice(
            f"awaiting the owner ({ids}); answer with `ledger answer {run_id[:12]} QUESTION "
            f"CHOICE`, continue with `ledger resume {run_id[:12]}`"
        )
        raise GateSuspended(run_id)
    _wait(process, state, min(q.deadline for q in waiting if q.deadline is not None))
    return True


def _wait(process: HookContext, state: RunState, until: datetime) -> None:
    """Sleep until the earliest deadline or until anyone appends to the run."""
    ledger, clock = process.ledger, process.ledger.clock
    process.observer.notice(f"waiting for the owner's answers until {until.isoformat()}")
    while True:
        now = clock.now()
        if now >= until:
            return
        if ledger.store.tip(process.run_id)[0] != state.length:
            return
        clock.sleep(min(POLL_S, (until - now).total_seconds()))


def _tell(process: HookContext, events: Sequence[ev.Event]) -> None:
    """One notice per question event, so a person watching the gate knows what to answer."""
    for e in events:
        text = describe(e, {})
        if isinstance(e, ev.QuestionAsked):
            text += f" — answer with: ledger answer {process.run_id[:12]} {e.question_id} CHOICE"
        process.observer.notice(text)
