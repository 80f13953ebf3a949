"""The closed vocabulary of what an executor can report instead of a finished test run.

Every executor (local, SSH, Kubernetes, any new one) maps its own words (`ssh-dropped`,
`ImagePullBackOff`, `Evicted`, an API error) onto one of these kinds and keeps its own word as
the failure's `reason`. The rest of the gate decides on the kind alone, so `domain/` knows no
executor's vocabulary:

- `oom`, `timeout`, `signal` (and `checkout-modified`, below): the tests' own outcome (a
  shard that ran out of its own memory or time is bisected like any other; the member it ran
  on did nothing wrong);
- `unplaced`: no pool member had room, so the shard never ran (never a culprit);
- `cancelled`: the gate was interrupted (measured again on resume);
- `infrastructure`: the machinery failed (a dropped connection, an evicted or unpullable pod):
  retried, and on a pool the member is excluded;
- `env-setup`: the revision's own environment could not be built (its dependency declaration
  does not resolve or build): that revision is unmeasured, with the install log as evidence;
- `checkout-modified`: the tests changed tracked files of their own checkout outside the
  suite's declared outputs, so nothing they reported can be trusted: the tests' own outcome,
  bisected like a crash so the file that does it is named unmeasured and the rest measured.
"""

from __future__ import annotations

from typing import Literal, get_args

FailureKind = Literal[
    "oom", "timeout", "signal", "unplaced", "cancelled", "infrastructure", "env-setup",
    "checkout-modified",
]
FAILURE_KINDS: tuple[str, ...] = get_args(FailureKind)

# Kinds that are the tests' own outcome, not the executor's: they never exclude a pool member.
OWN_OUTCOMES = frozenset({"oom", "timeout", "signal", "checkout-modified"})

# Words recorded as `infrastructure_failure` before kinds were recorded beside them. Events
# from those ledgers are read with this table; new events carry their kind.
_LEGACY_KINDS: dict[str, FailureKind] = {
    "OOMKilled": "oom",
    "DeadlineExceeded": "timeout",
    "timeout": "timeout",
    "unplaced": "unplaced",
    "cancelled": "cancelled",
}


def blames_executor(kind: str | None, reason: str | None) -> bool:
    """Did the executor fail (not the tests)? Then the files are not culprits: run them again."""
    resolved = failure_kind(kind, reason)
    return resolved is not None and resolved not in OWN_OUTCOMES


def excludes_member(kind: str | None, reason: str | None) -> bool:
    """Only a failure of the machinery itself takes a pool member out of the run."""
    return failure_kind(kind, reason) == "infrastructure"


def failure_kind(kind: str | None, reason: str | None) -> FailureKind | None:
    """The kind of a recorded failure: its own, or (older events) the one its reason implies."""
    if kind in FAILURE_KINDS:
        return kind  # type: ignore[return-value]
    if not reason:
        return None
    return _LEGACY_KINDS.get(reason, "infrastructure")
