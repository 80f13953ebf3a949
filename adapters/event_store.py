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

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from release_ledger.adapters.store_artifacts import Artifacts
from release_ledger.adapters.store_chain import Chain
from release_ledger.adapters.store_db import Database
from release_ledger.adapters.store_errors import (
    ConcurrencyConflict,
    LeaseHeld,
    LeaseLost,
    StoreBusy,
)
from release_ledger.adapters.store_index import LedgerIndex
from release_ledger.adapters.store_leases import Leases
from release_ledger.adapters.store_readings import Readings
from release_ledger.adapters.store_records import Sealer
from release_ledger.adapters.store_seals import Seals
from release_ledger.adapters.store_streams import Notifications, Streams

if TYPE_CHECKING:
    from release_ledger.adapters.store_port import (
        ArtifactStore,
        ChainStore,
        IndexStore,
        LeaseStore,
        NotificationStore,
        ReadingStore,
        SealStore,
        StreamStore,
    )

# The eventsourcing library (and, for PostgreSQL, its connection pool) loads the first time a
# process writes, subscribes or reads notifications: reading commands (`ledger runs`,
# `questions`, `show`, `verdict`) read through one plain connection and never import it.

P = ParamSpec("P")
R = TypeVar("R")

__all__ = [  # its errors, named here by tests and tools (the ledger names store_errors)
    "ConcurrencyConflict",
    "EventStore",
    "LeaseHeld",
    "LeaseLost",
    "StoreBusy",
]


def _to(part: str, method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """`method` of the store's part held as `part`, as a method of the store: one line per
    member of the port, typed and documented as the part's own."""

    @functools.wraps(method)
    def call(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(getattr(self, part), *args, **kwargs)

    return call


class EventStore:
    """Append-only, hash-chained run streams over an `eventsourcing` recorder, with the
    ledger's artifacts, leases, indexes and kept readings: the store port's one face."""

    def __init__(self, db: Database, *, url: str | None = None) -> None:
        """Over `db` (`store_open` opens it by URL); `url` is how to reach the database again
        (PostgreSQL read models use it)."""
        self._db = db
        self.url = url
        self.dialect = db.dialect
        self.description = db.description
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

    # -- each call to the part that answers it (typed as the part's own method) --

    append = _to("_streams", Streams.append)
    read = _to("_streams", Streams.read)
    read_events = _to("_streams", Streams.read_events)
    read_raw = _to("_streams", Streams.read_raw)
    stream_ids = _to("_streams", Streams.stream_ids)
    runs = _to("_streams", Streams.runs)
    run_ids_matching = _to("_streams", Streams.run_ids_matching)

    tip = _to("_chain", Chain.tip)
    verified_tip = _to("_chain", Chain.verified_tip)
    check_chain = _to("_chain", Chain.check_chain)
    broken_runs = _to("_chain", Chain.broken_runs)

    seal_of = _to("_seals", Seals.seal_of)
    check_seal = _to("_seals", Seals.check_seal)
    seal_unsealed = _to("_seals", Seals.seal_unsealed)

    artifact = _to("_artifacts", Artifacts.artifact)
    artifacts = _to("_artifacts", Artifacts.artifacts)
    put_artifacts = _to("_artifacts", Artifacts.put_artifacts)
    artifact_digests = _to("_artifacts", Artifacts.artifact_digests)

    acquire_lease = _to("_leases", Leases.acquire_lease)
    renew_lease = _to("_leases", Leases.renew_lease)
    release_lease = _to("_leases", Leases.release_lease)
    lease_holder = _to("_leases", Leases.lease_holder)

    runs_page = _to("_index", LedgerIndex.runs_page)
    run_count = _to("_index", LedgerIndex.run_count)
    open_questions = _to("_index", LedgerIndex.open_questions)
    open_question_count = _to("_index", LedgerIndex.open_question_count)
    content = _to("_index", LedgerIndex.content)
    index_rows = _to("_index", LedgerIndex.index_rows)
    index_format = _to("_index", LedgerIndex.index_format)
    set_index_format = _to("_index", LedgerIndex.set_index_format)
    replace_index = _to("_index", LedgerIndex.replace_index)
    set_verdict = _to("_index", LedgerIndex.set_verdict)

    kept_reading = _to("_readings", Readings.kept_reading)
    keep_reading = _to("_readings", Readings.keep_reading)

    max_notification_id = _to("_notifications", Notifications.max_notification_id)
    notifications = _to("_notifications", Notifications.notifications)
    touched_runs = _to("_notifications", Notifications.touched_runs)
    subscribe = _to("_notifications", Notifications.subscribe)

    ledger_id = _to("_db", Database.ledger_id)
    close = _to("_db", Database.close)
    execute_raw = _to("_db", Database.execute_raw)  # bypasses the chain: tamper tests only
    _query = _to("_db", Database.query)  # tests and benchmarks look under the port with it


if TYPE_CHECKING:  # each part of the store keeps its concern's slice of the port

    def _parts_keep_the_port(store: EventStore) -> tuple[
        StreamStore, ChainStore, SealStore, ArtifactStore, LeaseStore, IndexStore,
        ReadingStore, NotificationStore,
    ]:  # fmt: skip
        return (
            store._streams, store._chain, store._seals, store._artifacts, store._leases,
            store._index, store._readings, store._notifications,
        )  # fmt: skip
