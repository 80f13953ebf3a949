"""`strict`: the reference rule. Skips make a shard unmeasured; flaky failures fail.
v3: a shard failure is flaky only when the test passed alone, not when it was missing
from its file's run alone (a file that failed to collect there); test files removed at head
(`removed-at-head`) and files much heavier or slower at head (`heavier`, `slower`) fail; a
failure exonerated with a reason (`FailureExonerated`) is still introduced.
v4: a harness changed between base and head (`harness-changed`: conftest.py, pytest
configuration, the test invocation) fails, and so do figures the supervisor's own do not bear
out (`figures-not-believed`: a report's seconds that do not add up to its run's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fold and the judge load when a rule decides, not when it is named
    from release_ledger.domain.run_state import RunState
    from release_ledger.domain.verdict import Verdict

NAME = "strict"
VERSION = 4
DESCRIPTION = (
    "reference rule: both revisions measured, reports cover exactly the shard's files, "
    "a skipped test makes its shard unmeasured, flaky failures fail, preexisting are allowed, "
    "a test that passed at base and is skipped or gone at head (skipped-at-head) fails, "
    "and so do test files removed at head, files much heavier or slower than at base, "
    "and a harness (conftest, pytest configuration, test invocation) changed at head"
)


def decide(state: RunState) -> Verdict:
    from release_ledger.domain.verdict import Policy, judge

    policy = Policy(
        skips_allowed=False, flaky_fails=True, lost_coverage_fails=True,
        resource_regressions_fail=True, harness_change_fails=True,
    )  # fmt: skip
    return judge(state, policy, NAME, VERSION)
