"""The port every executor implements: run one shard, report what was observed."""

from __future__ import annotations

from typing import Protocol

from domain.events import MemberLease
from domain.execution import Observation, ShardRun


class Executor(Protocol):
    """Runs shards somewhere. `run` blocks and is called from several worker threads at once."""

    name: str

    def prepare(self, commits: list[str]) -> None:
        """Make the commits available where shards run (checkouts, mirrors, images)."""

    def run(self, shard: ShardRun) -> Observation:
        """Run one shard at one commit and observe it. Never raises for test failures."""

    def cancel_all(self) -> None:
        """Kill everything still running (Ctrl-C, SIGTERM); safe to call from any thread."""

    def close(self) -> None:
        """Release resources (worktrees stay cached; remote temporaries are removed)."""


class PoolExecutor(Executor, Protocol):
    """An executor over several members (clusters) whose free capacity must be measured.

    The gate measures the pool before each round (`PoolMeasured`), places shards with the
    pure placement in `domain/`, and sets `ShardRun.member` before calling `run`.
    """

    def members(self) -> list[str]:
        """The configured member names, in configuration order."""

    def measure_pool(self) -> list[MemberLease]:
        """Readiness, capacity, running/pending gate Jobs and free memory per node, per member.

        A member that cannot be measured is returned with `ready=False` and its reason.
        Never waits unbounded.
        """
