"""Errors the domain raises; the command line turns `BadInput` into exit code 2."""

from __future__ import annotations


class BadInput(Exception):
    """Input that the user must correct: one readable sentence, never a traceback."""


class IntegrityProblem(Exception):
    """The ledger's stored history does not match its hash chain."""


class BrokenRun(IntegrityProblem):
    """A run whose stored stream fails its hash chain or cannot be decoded: nothing may be
    concluded from it, nor appended to it."""

    def __init__(self, run_id: str, position: int, problem: str) -> None:
        self.run_id = run_id
        self.position = position
        self.problem = problem
        super().__init__(
            f"run {run_id} is broken at position {position} ({problem}): run `ledger verify`"
        )


class PlacementError(BadInput):
    """Placement cannot proceed: duplicate shards or members, or a shard with no room."""

    def __init__(self, message: str, shard: str = "", reservation_mb: int = 0) -> None:
        super().__init__(message)
        self.shard = shard
        self.reservation_mb = reservation_mb
