"""When the gate cannot decide alone: candidate questions, and whether to assume, ask or defer.

Pure. A candidate question is validated when built (a malformed question is a programming
error, raised at once); the policy spends a per-run question budget on the most important
questions first and never assumes an answer to a critical one. `candidates` derives the
questions from a run's state and verdict, with deterministic ids, so a resumed gate asks the
same questions and never asks one twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from release_ledger.domain.run_state import QuestionView, RunState
from release_ledger.domain.verdict import (
    ALLOW,
    BLOCK,
    TOPIC_FLAKY,
    TOPIC_NEW_FILE,
    TOPIC_UNMEASURED,
    WAIVE,
    Verdict,
)

IMPACTS = ("low", "high", "critical")
DEFAULT_BUDGET = 3
NEW_TEST = "new-test"
RENAMED = "renamed-or-moved"

Action = Literal["assume", "ask", "defer"]


@dataclass(frozen=True)
class Candidate:
    """A question the gate may put to the owner; invalid ones raise ValueError when built."""

    id: str
    topic: str
    text: str
    options: tuple[str, ...]
    recommended: str
    impact: str
    subject: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("id", "topic", "text"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"question {name} must be a non-empty string, got {value!r}")
        if not isinstance(self.options, tuple) or not 2 <= len(self.options) <= 4:
            raise ValueError(f"question {self.id}: 2 to 4 options, got {self.options!r}")
        if any(not isinstance(o, str) or not o.strip() for o in self.options):
            raise ValueError(f"question {self.id}: options must be non-empty strings")
        if len(set(self.options)) != len(self.options):
            raise ValueError(f"question {self.id}: options must be distinct, got {self.options}")
        if self.recommended not in self.options:
            raise ValueError(
                f"question {self.id}: exactly one recommended option among {self.options}, "
                f"got {self.recommended!r}"
            )
        if self.impact not in IMPACTS:
            raise ValueError(f"question {self.id}: impact must be one of {IMPACTS}")


@dataclass(frozen=True)
class Decision:
    action: Action
    candidate: Candidate
    reason: str


def decide(candidate: Candidate, *, asked: int, budget: int = DEFAULT_BUDGET) -> Decision:
    """Low impact is assumed; high is asked while the budget lasts, then assumed; critical is
    asked while the budget lasts, then deferred (a critical answer is never assumed)."""
    if budget < 0 or asked < 0:
        raise ValueError(f"budget and asked must be >= 0, got {budget}, {asked}")
    left = asked < budget
    if candidate.impact == "low":
        return Decision("assume", candidate, "low impact: the recommended option is assumed")
    if left:
        return Decision("ask", candidate, f"{candidate.impact} impact: the owner decides")
    spent = f"the question budget ({budget}) is spent"
    if candidate.impact == "high":
        return Decision("assume", candidate, f"{spent}: the recommended option is assumed")
    return Decision("defer", candidate, f"{spent}: a critical question is never assumed")


_RANK = {"critical": 0, "high": 1, "low": 2}


def plan(
    candidates: Iterable[Candidate], *, asked: int, budget: int = DEFAULT_BUDGET
) -> list[Decision]:
    """Decide every candidate, most important first (then by id), spending the budget."""
    decisions = []
    for candidate in sorted(candidates, key=lambda c: (_RANK[c.impact], c.id)):
        decision = decide(candidate, asked=asked, budget=budget)
        asked += decision.action == "ask"
        decisions.append(decision)
    return decisions


# --- where the gate asks ----------------------------------------------------------------------


def _covered(state: RunState, topic: str) -> tuple[set[str], int]:
    subjects: set[str] = set()
    count = 0
    for q in state.questions.values():
        if q.topic == topic:
            subjects.update(q.subject)
            count += 1
    return subjects, count


def _listing(items: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _count(items: Sequence[str], noun: str) -> str:
    return f"{len(items)} {noun}" + ("" if len(items) == 1 else "s")


def candidates(state: RunState, verdict: Verdict) -> list[Candidate]:
    """The questions this run raises now that its measuring is done, not yet put to anyone.

    Ids are `q-<topic>-<n>`, n counting that topic's questions in the run; a question covers
    only subjects (files, tests) no earlier question of its topic covered.
    """
    found: list[Candidate] = []
    covered, count = _covered(state, TOPIC_UNMEASURED)
    culprits = sorted({f for u in verdict.unmeasured for f in u.culprits} - covered)
    if culprits:
        found.append(
            Candidate(
                id=f"q-{TOPIC_UNMEASURED}-{count + 1}",
                topic=TOPIC_UNMEASURED,
                text=(
                    f"Unmeasured after every retry and bisection: {_count(culprits, 'test file')}"
                    f" ({_listing(culprits)}). Block the release (the verdict stays unmeasured)"
                    f" or waive the culprits (conclude without them)?"
                ),
                options=(BLOCK, WAIVE),
                recommended=BLOCK,
                impact="critical",
                subject=tuple(culprits),
            )
        )
    covered, count = _covered(state, TOPIC_FLAKY)
    flaky = sorted(set(verdict.flaky) - covered)
    if flaky and verdict.status != "failed":
        found.append(
            Candidate(
                id=f"q-{TOPIC_FLAKY}-{count + 1}",
                topic=TOPIC_FLAKY,
                text=(
                    f"Not reproduced when their file ran alone (flaky): "
                    f"{_count(flaky, 'new failure')} ({_listing(flaky)}). Allow them (reported, "
                    f"not failing the gate) or block the release?"
                ),
                options=(ALLOW, BLOCK),
                recommended=ALLOW,
                impact="high",
                subject=tuple(flaky),
            )
        )
    covered, count = _covered(state, TOPIC_NEW_FILE)
    new_files = sorted(set(state.missing_at_base) - covered)
    if new_files:
        found.append(
            Candidate(
                id=f"q-{TOPIC_NEW_FILE}-{count + 1}",
                topic=TOPIC_NEW_FILE,
                text=(
                    f"At head but absent at base: {_count(new_files, 'test file')} "
                    f"({_listing(new_files)}). New tests, whose failures count as introduced?"
                ),
                options=(NEW_TEST, RENAMED),
                recommended=NEW_TEST,
                impact="low",
                subject=tuple(new_files),
            )
        )
    return found


# --- deadlines --------------------------------------------------------------------------------


def overdue(state: RunState, now: datetime) -> list[QuestionView]:
    """Questions whose deadline has passed at `now` and whose expiry is not yet complete:
    open ones (expire them) and expired ones still lacking their recommendation or parking."""
    found = [
        q
        for q in state.questions.values()
        if q.deadline is not None
        and not q.decided
        and (q.state == "expired" or (q.state == "open" and now >= q.deadline))
    ]
    return sorted(found, key=lambda q: q.position)


def waiting_on(state: RunState) -> list[QuestionView]:
    """Questions asked and still open (not answered, not expired)."""
    return sorted(
        (q for q in state.questions.values() if q.state == "open"), key=lambda q: q.position
    )
