"""The `exonerate` step (issue 29): before head's introduced failures are called
introduced, each is looked up in the ledger's test history (`test_history`, a read model) and
in the run's quarantine; each one found appends `FailureExonerated` with its reason and the
events that prove it, and `ExonerationsLookedUp` records the lookup was done.

Reasons, first that applies: `flaky-at-base` (at this run's base commit the test both failed
and passed, an earlier gate among them), `flaky-at-head` (at this head commit it passed in an
earlier attempt, of this run or another), `quarantined` (listed in `quarantine`, proved by
this run's `RunStarted`). Without read models (a large ledger never rebuilt, a PostgreSQL
schema not created) only the quarantine is looked up: the history is optional evidence.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from release_ledger.domain import events as ev
from release_ledger.domain.junit import FAILING
from release_ledger.domain.run_state import RunState
from release_ledger.ledger.service import Ledger
from release_ledger.ledger.steps.context import StepContext
from release_ledger.projections.next_step import Step


def exonerate(ctx: StepContext, state: RunState, step: Step) -> None:
    """Look head's introduced failures up in the history and the quarantine before they
    are called introduced."""
    found = record_exonerations(
        ctx.ledger, ctx.run_id, tests=step.tests, interpreter=ctx.interpreter,
        head=ctx.started.head, base=ctx.started.base,
        quarantine=ctx.options.quarantine, started_position=1,
    )  # fmt: skip
    for e in found:
        ctx.observer.notice(f"{e.test} exonerated ({e.reason})")


# (run id, position, revision, outcome): one observation of a test at a commit.
Seen = tuple[str, int, str, str]


def observations(views: Any, test: str, interpreter: str, commit: str) -> list[Seen]:
    """Every outcome of `test` on `interpreter` at `commit` the history holds, oldest run first."""
    rows = views.select(
        "SELECT run_id, revision, outcomes, at FROM {test_history} "
        "WHERE test = ? AND interpreter = ? AND commit_sha = ?",
        (test, interpreter, commit),
    )
    seen: list[tuple[str, Seen]] = []
    for run_id, revision, outcomes, at in rows:
        for position, outcome in json.loads(outcomes):
            seen.append((str(at or ""), (str(run_id), int(position), str(revision), str(outcome))))
    seen.sort(key=lambda item: (item[0], item[1][0], item[1][1]))
    return [s for _, s in seen]


def _proof(seen: Sequence[Seen]) -> list[ev.Proof]:
    return [ev.Proof(run_id=r, position=p, revision=rev, outcome=o) for r, p, rev, o in seen]


def flaky_at(seen: Sequence[Seen], run_id: str, *, earlier_needed: bool) -> list[ev.Proof]:
    """The proof that outcomes differed at one commit: the first failing and the first
    passing observation (from earlier runs when there are), or [] when they never differed
    (or, with `earlier_needed`, when no earlier run saw the test there)."""
    if earlier_needed and not any(r != run_id for r, *_ in seen):
        return []
    failing = [s for s in seen if s[3] in FAILING]
    passing = [s for s in seen if s[3] == "passed"]
    if not failing or not passing:
        return []

    def first(of: list[Seen]) -> Seen:
        return next((s for s in of if s[0] != run_id), of[0])

    return _proof(sorted({first(failing), first(passing)}, key=lambda s: (s[0] == run_id, s)))


def find(
    views: Any | None,
    *,
    run_id: str,
    test: str,
    interpreter: str,
    head: str,
    base: str,
    quarantine: Sequence[str],
    started_position: int,
) -> tuple[str, list[ev.Proof]] | None:
    """(reason, proof) of one introduced failure, or None: it stays introduced."""
    if views is not None:
        proof = flaky_at(observations(views, test, interpreter, base), run_id, earlier_needed=True)
        if proof:
            return "flaky-at-base", proof
        proof = flaky_at(observations(views, test, interpreter, head), run_id, earlier_needed=False)
        if proof:
            return "flaky-at-head", proof
    if test in quarantine:
        return "quarantined", [ev.Proof(run_id=run_id, position=started_position)]
    return None


def record_exonerations(
    ledger: Ledger,
    run_id: str,
    *,
    tests: Sequence[str],
    interpreter: str,
    head: str,
    base: str,
    quarantine: Sequence[str],
    started_position: int,
) -> list[ev.FailureExonerated]:
    """Look each test up and append what was found with the lookup itself, in one batch."""
    views = _history(ledger)
    try:
        found: list[ev.FailureExonerated] = []
        for test in tests:
            hit = find(
                views, run_id=run_id, test=test, interpreter=interpreter, head=head, base=base,
                quarantine=quarantine, started_position=started_position,
            )  # fmt: skip
            if hit is not None:
                reason, proof = hit
                found.append(
                    ledger.make(ev.FailureExonerated, run_id, test=test, reason=reason, proof=proof)
                )
    finally:
        if views is not None:
            views.close()
    looked_up = ledger.make(ev.ExonerationsLookedUp, run_id, tests=list(tests))
    ledger.append(run_id, [looked_up, *found])
    return found


def _history(ledger: Ledger) -> Any | None:
    """The read models, caught up with every event so far (this run's included), or None
    when there are none to read (`ledger.views.catch_up_after_gate` says why)."""
    from release_ledger.ledger import views

    if views.catch_up_after_gate(ledger) is not None:
        return None
    try:
        return views.open_target(ledger, views.views_path(ledger, None))
    except Exception:
        return None
