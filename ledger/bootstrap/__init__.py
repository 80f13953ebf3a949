"""The composition root (cosmicpython's bootstrap): the one place the application's ports are
built and injected — the ledger (the store, with its clock and post-commit subscribers), each
lane's executors, the workspace (the repository's commits), the observer the command line
passes in — and the one place a gate's options are checked (`checked`), before anything is
appended. The command line opens every ledger and starts every gate here: the ledger in this
module (light: every command imports it), the gate's ports in `bootstrap/gate.py`.

The ledger's subscribers now: the remembered verdict status of `ledger runs` (`read_side`).
Kept readings are made by their readers and the gate when it finishes; view tables by
`ledger rebuild`. The write side never calls the read side itself, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from release_ledger.ledger.read_side import refresh_status_after
from release_ledger.ledger.service import Clock, Ledger

# --- the ledger ------------------------------------------------------------------------------


def open_ledger(url: str | None, *, create: bool = True, clock: Clock | None = None) -> Ledger:
    """The ledger at `url` with its subscribers."""
    ledger = Ledger.open(url, create=create, clock=clock)
    ledger.subscribers.append(refresh_status_after)
    return ledger


@contextmanager
def opened(url: str | None, *, create: bool = True, clock: Clock | None = None) -> Iterator[Ledger]:
    """`open_ledger`, closed at the end of the block."""
    ledger = open_ledger(url, create=create, clock=clock)
    try:
        yield ledger
    finally:
        ledger.close()
