"""The event store: one hash-chained stream per run, plus content-addressed artifacts, leases,
the ledger's indexes and kept readings, in one database (SQLite or PostgreSQL, through the
`eventsourcing` library's application recorders).

`EventStore` is the store port's one face (`adapters/store_port.Store`); each concern is a
small part it composes and hands each call to:

- `store_db.Database`: the connections and transactions every part goes through;
- `store_streams.Streams`: appending (fenced by length and lease) and reading runs' streams,
  and `store_streams.Notifications`: every stream in commit order;
- `store_chain.Chain`: the hash chain and the run index's heads, checked;
- `store_seals.Seals`: each run's (length, tip) sealed under the ledger's key;
- `store_artifacts.Artifacts`, `store_leases.Leases`, `store_index.LedgerIndex` (run list,
  questions, status, content) and `store_readings.Readings` (kept readings);
- the tables and recorders per dialect are `store_dialects`, opening by URL `store_open`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from adapters.store_artifacts import Artifacts
from adapters.store_chain import Chain
from adapters.store_db import Database
from adapters.store_errors import ConcurrencyConflict, LeaseHeld, LeaseLost, StoreBusy
from adapters.store_index import LedgerIndex
from adapters.store_leases import Leases
from adapters.store_readings import Readings
from adapters.store_records import (
    ContentHit,
    ContentRowTuple,
    IndexedRun,
    IndexWrite,
    KeptReading,
    Lease,
    RawRecord,
    Recorded,
    RunRow,
    Sealer,
)
from adapters.store_seals import Seals
from adapters.store_streams import Notifications, Streams

if TYPE_CHECKING:
    from adapters.store_port import (
        ArtifactStore,
        ChainStore,
        IndexStore,
        LeaseStore,
        NotificationStore,
        ReadingStore,
        SealStore,
        StreamStore,
    )
    from domain.errors import BrokenRun
    from domain.events import Event

# The eventsourcing library (and, for PostgreSQL, its connection pool) loads the first time a
# process writes, subscribes or reads notifications: reading commands (`ledger runs`,
# `questions`, `show`, `verdict`) read through one plain connection and never import it.

__all__ = [  # what the store's callers name, wherever it is defined
    "ConcurrencyConflict",
    "ContentHit",
    "ContentRowTuple",
    "EventStore",
    "IndexWrite",
    "IndexedRun",
    "KeptReading",
    "Lease",
    "LeaseHeld",
    "LeaseLost",
    "RawRecord",
    "Recorded",
    "RunRow",
    "Sealer",
    "StoreBusy",
]


class EventStore:
    """Append-only, hash-chained run streams over an `eventsourcing` recorder, with the
    ledger's artifacts, leases, indexes and kept readings: the store port's one face."""

    def __init__(
        self,
        recorder: Any = None,
        *,
        dialect: str,
        description: str,
        datastore: Any = None,
        url: str | None = None,
        reader: Any = None,
        connect: Callable[[], tuple[Any, Any]] | None = None,
    ) -> None:
        """Over a built `recorder` and `datastore`, or lazily: `reader` (one plain sqlite3 or
        psycopg2 connection, `adapters.pg_reader`, in autocommit mode) answers the opening
        thread's reads until the first write, subscription or notification read, when
        `connect()` builds the library's recorder and datastore (its pool)."""
        db = self._db = Database(
            recorder,
            dialect=dialect,
            description=description,
            datastore=datastore,
            reader=reader,
            connect=connect,
        )
        self.url = url  # how to reach this database again (PostgreSQL read models use it)
        self.dialect = dialect
        self.description = description
        self._seals = Seals(db)
        self._chain = Chain(db, self._seals)
        self._artifacts = Artifacts(db)
        self._leases = Leases(db)
        self._index = LedgerIndex(db)
        self._readings = Readings(db)
        self._notifications = Notifications(db)
        self._streams = Streams(
            db,
            self._chain,
            seals=self._seals,
            leases=self._leases,
            artifacts=self._artifacts,
            index=self._index,
        )

    @property
    def read_only(self) -> bool:
        """A read-only SQLite ledger: derived data is not kept."""
        return self._db.read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self._db.read_only = value

    @property
    def sealer(self) -> Sealer | None:
        """Signs each run's (length, tip) in the appending transaction and checks it on every
        read, when the ledger's key is at hand (`Ledger.sealing_key` sets it)."""
        return self._seals.sealer

    @sealer.setter
    def sealer(self, value: Sealer | None) -> None:
        self._seals.sealer = value

    @property
    def recorder(self) -> Any:
        """The library's recorder (built on first need): `store_open` makes its tables."""
        return self._db.recorder

    # -- streams --

    def append(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        artifacts: dict[str, bytes] | None = None,
        expected_length: int | None = None,
        lease: Lease | None = None,
        index: IndexWrite | None = None,
    ) -> list[Recorded]:
        return self._streams.append(
            run_id,
            events,
            artifacts=artifacts,
            expected_length=expected_length,
            lease=lease,
            index=index,
        )

    def read(self, run_id: str) -> list[Recorded]:
        return self._streams.read(run_id)

    def read_events(self, run_id: str) -> list[tuple[int, Event]]:
        return self._streams.read_events(run_id)

    def read_raw(self, run_id: str) -> list[RawRecord]:
        return self._streams.read_raw(run_id)

    def stream_ids(self) -> list[str]:
        return self._streams.stream_ids()

    def runs(self) -> list[RunRow]:
        return self._streams.runs()

    def run_ids_matching(self, prefix: str, limit: int | None = None) -> list[str]:
        return self._streams.run_ids_matching(prefix, limit)

    # -- the chain and its seal --

    def tip(self, run_id: str) -> tuple[int, str]:
        return self._chain.tip(run_id)

    def verified_tip(self, run_id: str) -> tuple[int, str]:
        return self._chain.verified_tip(run_id)

    def check_chain(self, run_id: str) -> int:
        return self._chain.check_chain(run_id)

    def broken_runs(self, runs: Sequence[RunRow]) -> dict[str, BrokenRun]:
        return self._chain.broken_runs(runs)

    def seal_of(self, run_id: str) -> list[tuple[Any, ...]] | None:
        return self._seals.seal_of(run_id)

    def check_seal(
        self, run_id: str, hashes: Sequence[str], rows: list[tuple[Any, ...]] | None
    ) -> None:
        self._seals.check_seal(run_id, hashes, rows)

    def seal_unsealed(self) -> int:
        return self._seals.seal_unsealed()

    # -- artifacts --

    def artifact(self, digest: str) -> bytes | None:
        return self._artifacts.artifact(digest)

    def artifacts(self, digests: Iterable[str]) -> dict[str, bytes]:
        return self._artifacts.artifacts(digests)

    def put_artifacts(self, artifacts: dict[str, bytes]) -> None:
        self._artifacts.put_artifacts(artifacts)

    def artifact_digests(self) -> Iterator[tuple[str, bytes]]:
        return self._artifacts.artifact_digests()

    # -- leases --

    def acquire_lease(
        self, run_id: str, holder: str, seconds: float, *, holder_is_dead: Any = None
    ) -> Lease:
        return self._leases.acquire_lease(run_id, holder, seconds, holder_is_dead=holder_is_dead)

    def renew_lease(self, lease: Lease) -> bool:
        return self._leases.renew_lease(lease)

    def release_lease(self, lease: Lease) -> None:
        self._leases.release_lease(lease)

    def lease_holder(self, run_id: str) -> tuple[str, float] | None:
        return self._leases.lease_holder(run_id)

    # -- the ledger's indexes --

    def runs_page(self, limit: int | None = None, offset: int = 0) -> list[IndexedRun]:
        return self._index.runs_page(limit, offset)

    def run_count(self) -> int:
        return self._index.run_count()

    def open_questions(
        self, limit: int | None = None, offset: int = 0
    ) -> list[tuple[str, str, int, str, str]]:
        return self._index.open_questions(limit, offset)

    def open_question_count(self) -> int:
        return self._index.open_question_count()

    def content(self, kind: str, keys: Iterable[str]) -> list[ContentHit]:
        return self._index.content(kind, keys)

    def index_rows(self) -> list[tuple[Any, ...]]:
        return self._index.index_rows()

    def index_format(self) -> str:
        return self._index.index_format()

    def set_index_format(self, value: str) -> None:
        self._index.set_index_format(value)

    def replace_index(self, run_id: str, length: int, index: IndexWrite) -> bool:
        return self._index.replace_index(run_id, length, index)

    def set_verdict(self, run_id: str, length: int, code: str, verdict: str) -> None:
        self._index.set_verdict(run_id, length, code, verdict)

    # -- kept readings --

    def kept_reading(self, run_id: str) -> KeptReading | None:
        return self._readings.kept_reading(run_id)

    def keep_reading(self, run_id: str, reading: KeptReading) -> bool:
        return self._readings.keep_reading(run_id, reading)

    # -- notifications --

    def max_notification_id(self) -> int:
        return self._notifications.max_notification_id()

    def notifications(self, after: int, limit: int = 1000) -> list[tuple[int, str, Event]]:
        return self._notifications.notifications(after, limit)

    def touched_runs(self, after: int, until: int, page: int = 10_000) -> list[str]:
        return self._notifications.touched_runs(after, until, page)

    def subscribe(self, gt: int) -> Any:
        return self._notifications.subscribe(gt)

    # -- the database --

    def ledger_id(self) -> str:
        return self._db.ledger_id()

    def execute_raw(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Direct write, bypassing the chain: only for tamper tests and repair tools."""
        self._db.execute_raw(sql, params)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A plain read of the store's tables (tests and benchmarks look under the port)."""
        return self._db.query(sql, params)

    def close(self) -> None:
        self._db.close()


if TYPE_CHECKING:  # each part of the store keeps its concern's slice of the port

    def _parts_keep_the_port(store: EventStore) -> tuple[
        StreamStore, ChainStore, SealStore, ArtifactStore, LeaseStore, IndexStore,
        ReadingStore, NotificationStore,
    ]:  # fmt: skip
        return (
            store._streams, store._chain, store._seals, store._artifacts, store._leases,
            store._index, store._readings, store._notifications,
        )  # fmt: skip
