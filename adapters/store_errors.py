"""What the event store refuses with: its own exceptions, in a module that imports nothing, so
the command line's error boundary (`cli.options.common`) can name them without loading the
store (eventsourcing, the event models) in commands that never open a ledger."""

from __future__ import annotations


class ConcurrencyConflict(Exception):
    """Another writer appended to the same run first; the caller's expectation is stale."""


class LeaseHeld(Exception):
    """Another process drives the run (its lease is live); names the holder."""

    def __init__(self, run_id: str, holder: str, seconds_left: float) -> None:
        self.run_id = run_id
        self.holder = holder
        self.seconds_left = seconds_left
        super().__init__(
            f"run {run_id} is being driven by {holder} (lease for {seconds_left:.0f} s more, "
            "renewed while it works); wait for it, or resume after it stops"
        )


class StoreBusy(Exception):
    """Another writer held the ledger's lock longer than a writer waits: nothing was written."""


class LeaseLost(Exception):
    """This process's lease on a run was taken over: it must stop driving the run."""
