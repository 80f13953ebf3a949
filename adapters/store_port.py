"""The port the ledger service uses to reach its event store (`adapters/event_store.py`
implements it over SQLite or PostgreSQL; `open_store("memory:")` gives a private in-memory
one, the fake for tests that need no file). `ledger/` names only these members, so the store's
internals (the `eventsourcing` recorder, its tables, the dialect code) stay in `adapters/`.

`Store` is one face made of one protocol per concern, each the contract of one part of the
store (`store_streams`, `store_seals`, `store_artifacts`, `store_leases`, `store_index`,
`store_readings`), which mypy holds each part to (`adapters/event_store.py`). The ledger keeps
the one face: it reaches the store only as `Ledger.store`, and an append spans every concern
(events, artifacts, seal and index rows in one transaction, fenced by the run's lease).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from release_ledger.adapters.store_records import (
        ContentHit,
        IndexedRun,
        IndexWrite,
        KeptReading,
        Lease,
        RawRecord,
        Recorded,
        RunRow,
        Sealer,
    )
    from release_ledger.domain.errors import BrokenRun
    from release_ledger.domain.events import Event


# The format of the index rows this code derives (`projections/content_index.py`): a ledger
# whose `index_format()` differs is re-indexed from its events once, when opened.
# 4: no results from an attempt in which no test ran (only collection errors)
INDEX_FORMAT = "4"  # 2: measurements by content; 3: files that collect nothing


class StreamStore(Protocol):
    """Streams: append at the end of a run's hash chain, read it back checked."""

    def append(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        artifacts: dict[str, bytes] | None = None,
        expected_length: int | None = None,
        lease: Lease | None = None,
        index: IndexWrite | None = None,
    ) -> list[Recorded]: ...

    def read(self, run_id: str) -> list[Recorded]: ...

    def read_events(self, run_id: str) -> list[tuple[int, Event]]: ...

    def read_raw(self, run_id: str) -> list[RawRecord]: ...

    def stream_ids(self) -> list[str]: ...

    def runs(self) -> list[RunRow]: ...

    def run_ids_matching(self, prefix: str, limit: int | None = None) -> list[str]: ...


class ChainStore(Protocol):
    """The runs' hash chains and heads, checked without parsing events."""

    def tip(self, run_id: str) -> tuple[int, str]: ...

    def verified_tip(self, run_id: str) -> tuple[int, str]: ...

    def check_chain(self, run_id: str) -> int: ...

    def broken_runs(self, runs: Sequence[RunRow]) -> dict[str, BrokenRun]: ...


class SealStore(Protocol):
    """Each run's (length, tip) sealed under the ledger's key (`Store.sealer`)."""

    def seal_of(self, run_id: str) -> list[tuple[Any, ...]] | None: ...

    def check_seal(
        self, run_id: str, hashes: Sequence[str], rows: list[tuple[Any, ...]] | None
    ) -> None: ...

    def seal_unsealed(self) -> int: ...


class ArtifactStore(Protocol):
    """Artifacts, by sha256."""

    def artifact(self, digest: str) -> bytes | None: ...

    def artifacts(self, digests: Iterable[str]) -> dict[str, bytes]: ...

    def put_artifacts(self, artifacts: dict[str, bytes]) -> None: ...

    def artifact_digests(self) -> Iterator[tuple[str, bytes]]: ...


class LeaseStore(Protocol):
    """Leases: one driver per run."""

    def acquire_lease(
        self,
        run_id: str,
        holder: str,
        seconds: float,
        *,
        holder_is_dead: Any = None,
    ) -> Lease: ...

    def renew_lease(self, lease: Lease) -> bool: ...

    def release_lease(self, lease: Lease) -> None: ...

    def lease_holder(self, run_id: str) -> tuple[str, float] | None: ...


class IndexStore(Protocol):
    """The run index, the open questions, the remembered status and the content index."""

    def runs_page(self, limit: int | None = None, offset: int = 0) -> list[IndexedRun]: ...

    def run_count(self) -> int: ...

    def open_questions(
        self, limit: int | None = None, offset: int = 0
    ) -> list[tuple[str, str, int, str, str]]: ...

    def open_question_count(self) -> int: ...

    def content(self, kind: str, keys: Iterable[str]) -> list[ContentHit]: ...

    def index_rows(self) -> list[tuple[Any, ...]]: ...

    def index_format(self) -> str: ...

    def set_index_format(self, value: str) -> None: ...

    def replace_index(self, run_id: str, length: int, index: IndexWrite) -> bool: ...

    def set_verdict(self, run_id: str, length: int, code: str, verdict: str) -> None: ...


class ReadingStore(Protocol):
    """Kept readings: a run's answers as the read side computed them (a memo)."""

    def kept_reading(self, run_id: str) -> KeptReading | None: ...

    def keep_reading(self, run_id: str, reading: KeptReading) -> bool: ...


class NotificationStore(Protocol):
    """Every run's events in commit order, for read models."""

    def max_notification_id(self) -> int: ...

    def notifications(self, after: int, limit: int = 1000) -> list[tuple[int, str, Event]]: ...

    def touched_runs(self, after: int, until: int, page: int = 10_000) -> list[str]: ...

    def subscribe(self, gt: int) -> AbstractContextManager[Any]:
        """Notifications after `gt` as they are committed (PostgreSQL: `ledger rebuild
        --follow`)."""
        ...


class Store(
    StreamStore,
    ChainStore,
    SealStore,
    ArtifactStore,
    LeaseStore,
    IndexStore,
    ReadingStore,
    NotificationStore,
    Protocol,
):
    """All the ledger service may name of its event store."""

    url: str | None  # how to reach the database again (PostgreSQL read models), or None
    dialect: str  # sqlite or postgresql
    description: str  # the path or server, for messages ("memory" for the in-memory store)
    read_only: bool  # a read-only SQLite ledger: derived data is not kept
    sealer: Sealer | None  # signs each run's (length, tip) in the appending transaction

    def ledger_id(self) -> str: ...

    def close(self) -> None: ...
