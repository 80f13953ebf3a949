"""`default`: as `strict`, but skips are allowed and flaky failures and lost coverage
(`skipped-at-head`) are only reported. v2: no test measured at head is `unmeasured`.
v3: a shard failure is flaky only when the test passed alone, not when it was missing
from its file's run alone (a file that failed to collect there); test files removed at head
and files much heavier or slower at head are reported, not failed on; a failure exonerated
with a reason (flaky at base or at this head, quarantined) is listed, not introduced."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fold and the judge load when a rule decides, not when it is named
    from release_ledger.domain.run_state import RunState
    from release_ledger.domain.verdict import Verdict

NAME = "default"
VERSION = 3
DESCRIPTION = (
    "as strict, but skipped tests are allowed and flaky failures (not reproduced alone) "
    "are reported without failing the gate, as are failures exonerated with a reason "
    "(flaky at base in earlier gates or at this head, quarantined)"
)


def decide(state: RunState) -> Verdict:
    from release_ledger.domain.verdict import Policy, judge

    policy = Policy(skips_allowed=True, flaky_fails=False, exonerated_fails=False)
    return judge(state, policy, NAME, VERSION)
