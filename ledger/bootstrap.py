"""The composition root of the ledger (cosmicpython's bootstrap): a `Ledger` wired to its
post-commit subscribers. The command line opens every ledger here; the write side never calls
the read side itself, so neither imports the other.

Subscribers now: the remembered verdict status of `ledger runs` (`read_side`). Kept readings
are made by their readers and the gate when it finishes; view tables by `ledger rebuild`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from release_ledger.ledger.read_side import refresh_status_after
from release_ledger.ledger.service import Clock, Ledger


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
