"""Which change introduced a failure: head's code, or the move from base's package set to
head's (issue 25). Pure: read from the run's `AttributionRecorded`, the rerun of head's
introduced failures at head with base's package set.

- `code`: the test fails with base's packages too: the code change broke it;
- `dependencies`: it passes with base's packages: the packages that moved broke it;
- `unknown`: base's package set does not install with head's code, or the rerun was not
  measured, or the test did not run.

Rules decide what a cause means (`Policy.dependency_introduced_fails`); the default rule
fails on both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the words below are read by `ledger show`, which loads no event model
    from release_ledger.domain.events import PackageMove
    from release_ledger.domain.run_state import RunState

CODE = "code"
DEPENDENCIES = "dependencies"
UNKNOWN = "unknown"
# How `ledger show` and the HTML page name each cause.
CAUSE_WORDS = {CODE: "the code", DEPENDENCIES: "the dependency change", UNKNOWN: "unknown"}


@dataclass(frozen=True)
class Cause:
    cause: str  # code, dependencies, unknown
    why: str


def causes(state: RunState) -> dict[str, Cause]:
    """Each rerun introduced test's cause (empty when the run attributed nothing)."""
    view = state.attribution
    if view is None:
        return {}
    if view.environment_error:
        why = f"base's package set does not install with head's code: {view.environment_error}"
        return {test: Cause(UNKNOWN, why) for test in view.tests}
    assessment = view.assessment
    if assessment is None or not assessment.measured or assessment.report is None:
        detail = assessment.detail if assessment is not None else ""
        reason = (assessment.reason if assessment is not None else None) or "unmeasured"
        why = f"the rerun with base's package set was not measured ({reason}: {detail})"
        return {test: Cause(UNKNOWN, why) for test in view.tests}
    from release_ledger.domain.junit import FAILING, test_id

    outcomes = {test_id(case): case.outcome for case in assessment.report.cases}
    found: dict[str, Cause] = {}
    for test in view.tests:
        outcome = outcomes.get(test)
        if outcome in FAILING:
            found[test] = Cause(CODE, "fails with base's package set too")
        elif outcome == "passed":
            found[test] = Cause(DEPENDENCIES, "passes with base's package set")
        else:
            found[test] = Cause(UNKNOWN, f"{outcome or 'not run'} with base's package set")
    return found


def moves_text(moved: Iterable[PackageMove]) -> list[str]:
    """`pytest 8.3.4 → 9.2.1`, `newdep (none) → 1.0`, `olddep 2.0 → (none)`, by name."""
    return [
        f"{m.name} {m.base or '(none)'} → {m.head or '(none)'}"
        for m in sorted(moved, key=lambda m: m.name)
    ]
