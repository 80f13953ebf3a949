"""`code-only`: as `default`, but a failure introduced by the dependency change alone (it
passes at head with base's package set: `domain/attribution.py`) is reported, not failed on.
For an owner who releases the code and lets users' resolvers pick the dependencies.
v2: a shard failure is flaky only when the test passed alone, not when it was missing
from its file's run alone (a file that failed to collect there); test files removed at head
and files much heavier or slower at head are reported, not failed on; exonerated failures
are listed, not introduced, as under `default`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fold and the judge load when a rule decides, not when it is named
    from release_ledger.domain.run_state import RunState
    from release_ledger.domain.verdict import Verdict

NAME = "code-only"
VERSION = 2
DESCRIPTION = (
    "as default, but failures that pass with base's package set (introduced by the "
    "dependency change alone) are reported without failing the gate"
)


def decide(state: RunState) -> Verdict:
    from release_ledger.domain.verdict import Policy, judge

    policy = Policy(
        skips_allowed=True,
        flaky_fails=False,
        dependency_introduced_fails=False,
        exonerated_fails=False,
    )
    return judge(state, policy, NAME, VERSION)
