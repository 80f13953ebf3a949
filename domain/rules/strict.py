"""`strict`: the reference rule. Skips make a shard unmeasured; flaky failures fail."""

from __future__ import annotations

from domain.run_state import RunState
from domain.verdict import Policy, Verdict, judge

NAME = "strict"
VERSION = 1
DESCRIPTION = (
    "reference rule: both revisions measured, reports cover exactly the shard's files, "
    "a skipped test makes its shard unmeasured, flaky failures fail, preexisting are allowed"
)


def decide(state: RunState) -> Verdict:
    return judge(state, Policy(skips_allowed=False, flaky_fails=True), NAME, VERSION)
