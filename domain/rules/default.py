"""`default`: as `strict`, but skips are allowed and flaky failures are only reported."""

from __future__ import annotations

from domain.run_state import RunState
from domain.verdict import Policy, Verdict, judge

NAME = "default"
VERSION = 1
DESCRIPTION = (
    "as strict, but skipped tests are allowed and flaky failures (not reproduced alone) "
    "are reported without failing the gate"
)


def decide(state: RunState) -> Verdict:
    return judge(state, Policy(skips_allowed=True, flaky_fails=False), NAME, VERSION)
