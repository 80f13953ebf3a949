"""`zero-failures`: any failing test at head fails the gate, even one that fails at base.
v3: a shard failure is flaky only when the test passed alone, not when it was missing
from its file's run alone (a file that failed to collect there); test files removed at head
and files much heavier or slower at head are reported, not failed on."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fold and the judge load when a rule decides, not when it is named
    from release_ledger.domain.run_state import RunState
    from release_ledger.domain.verdict import Verdict

NAME = "zero-failures"
VERSION = 3
DESCRIPTION = "any failure at head fails the gate, preexisting and flaky ones included"


def decide(state: RunState) -> Verdict:
    from release_ledger.domain.verdict import Policy, judge

    policy = Policy(skips_allowed=True, flaky_fails=True, any_failure_fails=True)
    return judge(state, policy, NAME, VERSION)
