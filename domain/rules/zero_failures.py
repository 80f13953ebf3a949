"""`zero-failures`: any failing test at head fails the gate, even one that fails at base."""

from __future__ import annotations

from domain.run_state import RunState
from domain.verdict import Policy, Verdict, judge

NAME = "zero-failures"
VERSION = 2
DESCRIPTION = "any failure at head fails the gate, preexisting and flaky ones included"


def decide(state: RunState) -> Verdict:
    policy = Policy(skips_allowed=True, flaky_fails=True, any_failure_fails=True)
    return judge(state, policy, NAME, VERSION)
