"""The event store's values: what its port takes and gives (a stored event, a run's index row,
a lease, a seal, a kept reading, an index change). Plain dataclasses in a module that loads
nothing else, so the ledger names them without loading the store."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from release_ledger.domain.events import Event


@dataclass(frozen=True)
class Lease:
    """A driver's hold on a run: only its holder appends the gate's own events."""

    run_id: str
    holder: str
    seconds: float


@dataclass(frozen=True)
class Recorded:
    """An event as stored: its position in the run's stream and its place in the chain."""

    position: int
    event: Event
    prev: str
    hash: str
    notification_id: int | None = None


@dataclass(frozen=True)
class RawRecord:
    """A stored event before parsing, for verification and export."""

    run_id: str
    position: int
    kind: str
    header: dict[str, str]
    payload: bytes


@dataclass(frozen=True)
class RunRow:
    run_id: str
    started_at: str
    repo: str
    head: str
    base: str
    head_ref: str
    base_ref: str
    length: int
    tip: str


ContentRowTuple = tuple[str, str, int, str, str]  # kind, key, offset in the batch, item, data


@dataclass(frozen=True)
class Sealer:
    """Signs a run's (length, tip) with the ledger's key; `key_id` names the key (a digest of
    it), so runners sharing a ledger with different keys skip each other's seals."""

    key_id: str
    sign: Callable[[str, int, str], str]


@dataclass(frozen=True)
class KeptReading:
    """A run's answers as computed from its first `length` events (chain head `tip`) by the
    code with digest `code`; `seal` covers all of it, so an edited row is never believed."""

    length: int
    tip: str
    code: str
    seal: str
    body: str


@dataclass(frozen=True)
class IndexWrite:
    """What one append changes in the ledger's indexes (derived by the caller, pure)."""

    content: Sequence[ContentRowTuple] = ()
    # (open | expire | park | close, question id, offset in the batch, data as JSON)
    questions: Sequence[tuple[str, str, int, str]] = ()
    lifecycle: tuple[str | None, bool, str | None] | None = None  # status, asked, rule


@dataclass(frozen=True)
class IndexedRun:
    """A run as the run list shows it: the run index joined with its status row."""

    row: RunRow
    lifecycle: str
    asked: bool
    rule: str | None
    verdict: str | None
    verdict_length: int | None
    verdict_code: str | None


@dataclass(frozen=True)
class ContentHit:
    kind: str
    key: str
    run_id: str
    position: int
    item: str
    data: str
