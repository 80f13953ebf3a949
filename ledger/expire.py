"""`ledger expire`: deadlines that act on their own.

For every run (or one), append the expiry of each passed deadline — `QuestionExpired`, then
`RecommendationTaken`, or `QuestionParked` for a critical question — and complete each run
that can now conclude (nothing left to run, no question open), as `ledger resume` would,
without an executor: a run with shards still to run is left to `ledger resume`.

Safe from cron or a scheduled CI job: every append carries the stream length it was decided
on (`expected_length`), so two `expire`s, a waiting gate and a late `answer` racing on one
run never record a deadline twice; run again, it finds nothing more to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from release_ledger.adapters.store_errors import ConcurrencyConflict
from release_ledger.domain import events as ev
from release_ledger.domain.clarification import overdue, waiting_on
from release_ledger.domain.run_state import fold
from release_ledger.ledger.clarify import expiry_events, question_events
from release_ledger.ledger.options import options_from
from release_ledger.ledger.projection import project, verdict_of
from release_ledger.ledger.service import Ledger
from release_ledger.projections.next_step import next_step, release_step

ATTEMPTS = 20
# What the first look folds: the questions' lives and the run's own.
_LOOK_KINDS = ev.kinds_with(ev.QUESTION) | ev.kinds_with(ev.LIFECYCLE)


@dataclass
class Expired:
    run_id: str
    observed: list[str] = field(default_factory=list)  # "q-flaky-1: RecommendationTaken"
    concluded: bool = False
    asked: list[str] = field(default_factory=list)  # questions the conclusion raised
    status: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "observed": self.observed,
            "concluded": self.concluded,
            "asked": self.asked,
            "status": self.status,
            "note": self.note,
        }


def _label(e: ev.Event) -> str:
    return f"{getattr(e, 'question_id', '')}: {e.kind}".lstrip(": ")


def _needs_look(ledger: Ledger, run_id: str) -> bool:
    """Cheap first look (no artifacts): a passed deadline, or a run not completed."""
    records = ledger.store.read_events(run_id)
    state = fold([(p, e) for p, e in records if e.kind in _LOOK_KINDS], {})
    if state.started is None:
        return False
    return bool(overdue(state, ledger.clock.now())) or not state.completed


def expire_run(ledger: Ledger, run_id: str) -> Expired:
    result = Expired(run_id)
    for _ in range(ATTEMPTS):
        state = project(ledger, run_id)
        if state.started is None:
            result.note = "no RunStarted event"
            return result
        now = ledger.clock.now()
        events = expiry_events(ledger, run_id, state, now)
        note = ""
        if not events and not state.completed:
            options = options_from(state.started)
            step = next_step(state, rounds=options.rounds, measure=options.measure)
            if step.kind != "complete":
                note = f"shards still to {step.kind}: continue with `ledger resume {run_id[:12]}`"
            elif release_step(state) is not None:  # builds are the gate's, not a deadline's
                note = f"release builds still to do: continue with `ledger resume {run_id[:12]}`"
            else:
                options = options_from(state.started)
                events, _ = question_events(
                    ledger, run_id, state, now, options.deadline_s, options.question_budget
                )
                if not events and not waiting_on(state):
                    if state.interrupted:
                        events.append(ledger.make(ev.RunResumed, run_id))
                    events.append(ledger.make(ev.RunCompleted, run_id))
        if not events:
            after = state
            waiting = waiting_on(after)
            if not note and waiting and not after.completed:
                note = "awaiting the owner: " + ", ".join(q.id for q in waiting)
            result.note = note
            result.status = verdict_of(after).status
            return result
        try:
            ledger.append(run_id, events, expected_length=state.length)
        except ConcurrencyConflict:
            continue  # someone else appended: look again
        for e in events:
            if isinstance(e, ev.RunCompleted):
                result.concluded = True
            elif isinstance(e, ev.QuestionAsked | ev.AssumptionMade):
                result.asked.append(_label(e))
            elif not isinstance(e, ev.RunResumed):
                result.observed.append(_label(e))
    result.note = "the run kept changing; run `ledger expire` again"
    return result


def expire(ledger: Ledger, run_prefix: str | None = None) -> dict[str, Any]:
    """Observe every passed deadline in the ledger (or one run's) and conclude what can."""
    run_ids = [ledger.resolve(run_prefix)] if run_prefix else [r.run_id for r in ledger.runs()]
    results = [expire_run(ledger, rid) for rid in run_ids if _needs_look(ledger, rid)]
    acted = [r for r in results if r.observed or r.concluded or r.asked]
    return {
        "now": ledger.clock.now().isoformat(),
        "runs_examined": len(results),
        "observed": sum(len(r.observed) for r in results),
        "concluded": [r.run_id for r in results if r.concluded],
        "runs": [r.as_dict() for r in results if r in acted or r.note],
    }
