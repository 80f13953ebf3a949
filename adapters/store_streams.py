"""Run streams: appending events at the end of a run's hash chain (fenced by the run's length
and its driver's lease) and reading them back, checked and validated; and the ledger's
notifications, every stream's events in commit order, for the read models.

Artifacts, the run's seal and the index rows the events change are written in the same
transaction as the events (one database holds a whole ledger), by their own parts of the
store (`store_artifacts`, `store_seals`, `store_index`), which an append is given.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from release_ledger.adapters.gc_pause import gc_paused
from release_ledger.adapters.store_chain import Link, lock_tip
from release_ledger.adapters.store_dialects import EVENTS_TABLE, es_error
from release_ledger.adapters.store_errors import ConcurrencyConflict
from release_ledger.adapters.store_records import RawRecord, Recorded, RunRow
from release_ledger.domain.chain import decode_state, link, split_state
from release_ledger.domain.errors import BrokenRun

if TYPE_CHECKING:
    from eventsourcing.persistence import StoredEvent

    from release_ledger.adapters.store_artifacts import Artifacts
    from release_ledger.adapters.store_chain import Chain
    from release_ledger.adapters.store_db import Database
    from release_ledger.adapters.store_index import LedgerIndex
    from release_ledger.adapters.store_leases import Leases
    from release_ledger.adapters.store_records import IndexWrite, Lease
    from release_ledger.adapters.store_seals import Seals
    from release_ledger.domain.events import Event, RunStarted


class Streams:
    """One hash-chained stream per run (`ledger_events`) and its head (`ledger_runs`)."""

    def __init__(
        self,
        db: Database,
        chain: Chain,
        *,
        seals: Seals,
        leases: Leases,
        artifacts: Artifacts,
        index: LedgerIndex,
    ) -> None:
        self._db = db
        self._chain = chain
        self._seals = seals
        self._leases = leases
        self._artifacts = artifacts
        self._index = index
        ph = db.ph
        started = ("started_at", "repo", "head", "base", "head_ref", "base_ref")
        self._sql_upsert_run = (
            "INSERT INTO ledger_runs (length, tip, "
            + ", ".join(started)
            + f", run_id) VALUES ({', '.join([ph] * 9)}) ON CONFLICT (run_id) DO UPDATE SET "
            "length = excluded.length, tip = excluded.tip, "
            + ", ".join(f"{col} = COALESCE(excluded.{col}, ledger_runs.{col})" for col in started)
        )

    # -- writing --

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
        """Append events atomically at the end of the run's stream, with what they change in
        the ledger's indexes (`index`) in the same transaction.

        The run's tip is read under a write lock in the appending transaction (SQLite: the
        database's write lock, PostgreSQL: the run's index row), so concurrent writers queue
        instead of colliding and never lose or overwrite an event. With `expected_length`, an
        append after another writer's raises `ConcurrencyConflict`. With `lease`, the append
        is refused (`LeaseLost`) unless that lease still holds the run, checked in the same
        transaction: a driver whose lease was taken over can never append again.
        """
        if not events:
            return []
        blobs = self._artifacts.checked(artifacts)
        from release_ledger.domain.events import RunStarted, event_to_json

        payloads = [event_to_json(e).encode() for e in events]
        started = next((e for e in events if isinstance(e, RunStarted)), None)
        length = 0
        try:
            with self._db.write() as c:
                length, tip = lock_tip(self._db, c, run_id)
                if lease is not None:
                    self._leases.check_lease(c, lease)
                if expected_length is not None and length != expected_length:
                    raise ConcurrencyConflict(
                        f"run {run_id} has {length} events, expected {expected_length}"
                    )
                stored, recorded = _linked(run_id, events, payloads, length, tip)
                new_length, new_tip = length + len(events), recorded[-1].hash
                self._insert(c, stored)
                self._artifacts.write(c, blobs)
                c.execute(self._sql_upsert_run, _run_update(run_id, started, new_length, new_tip))
                if self._seals.sealer is not None:
                    self._seals.write_seal(c, run_id, new_length, new_tip)
                if index is not None:
                    self._index.write_index(c, run_id, length, index)
        except (es_error("IntegrityError"), sqlite3.IntegrityError) as conflict:
            # Only when stored events and the run index disagree (e.g. a tampered index).
            raise ConcurrencyConflict(
                f"run {run_id}: position {length + 1} is already taken"
            ) from conflict
        return recorded

    def _insert(self, c: Any, stored: list[StoredEvent]) -> None:
        if self._db.dialect == "sqlite":
            c.executemany(
                self._db.recorder.insert_events_statement,
                [(s.originator_id, s.originator_version, s.topic, s.state) for s in stored],
            )
        else:
            # The library's own insert: locks the events table (commit order equals
            # notification order), notifies listeners, inserts.
            self._db.recorder._insert_stored_events(c, stored)

    # -- reading --

    def read(self, run_id: str) -> list[Recorded]:
        """The run's stream, its hash chain checked against the run index first: a broken
        or undecodable run raises `BrokenRun` (nothing may be concluded from it)."""
        # The recorder's table, read as plain tuples: the library's select_events builds a
        # StoredEvent per row, which costs as much as validating the event.
        with gc_paused():
            links = self._chain.verified(run_id)
            events = _parse_run(run_id, links)
            return [
                Recorded(position, event, prev, digest)
                for (position, _, digest, prev, _), event in zip(links, events, strict=True)
            ]

    def read_events(self, run_id: str) -> list[tuple[int, Event]]:
        """(position, event) of a run's stream, verified and validated as `read` does,
        without building the `Recorded` links that projections never use."""
        with gc_paused():
            links = self._chain.verified(run_id)
            events = _parse_run(run_id, links)
            return list(zip([link[0] for link in links], events, strict=True))

    def read_raw(self, run_id: str) -> list[RawRecord]:
        """The run's stored events as they are, undecoded (what `verify` and `export` check);
        a plain read, so a read-only ledger answers it too."""
        raw = []
        for position, topic, state in self._chain.stored(run_id):
            state = bytes(state)
            try:
                header, payload = decode_state(state)
            except ValueError:
                header, payload = {}, state
            raw.append(RawRecord(run_id, int(position), str(topic), header, payload))
        return raw

    def runs(self) -> list[RunRow]:
        rows = self._db.query(
            "SELECT run_id, started_at, repo, head, base, head_ref, base_ref, length, tip "
            "FROM ledger_runs ORDER BY (started_at IS NULL), started_at DESC, run_id"
        )
        return [
            RunRow(
                run_id=str(r[0]),
                started_at=str(r[1] or ""),
                repo=str(r[2] or ""),
                head=str(r[3] or ""),
                base=str(r[4] or ""),
                head_ref=str(r[5] or ""),
                base_ref=str(r[6] or ""),
                length=int(r[7]),
                tip=str(r[8]),
            )
            for r in rows
        ]

    def run_ids_matching(self, prefix: str, limit: int | None = None) -> list[str]:
        """Run ids starting with `prefix` (hexadecimal): a range read of the primary key."""
        clean = "".join(c for c in prefix if c in "0123456789abcdef")
        ph = self._db.ph
        sql = (
            f"SELECT run_id FROM ledger_runs WHERE run_id >= {ph} AND run_id < {ph} ORDER BY run_id"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self._db.query(sql, (clean, clean + "g"))
        return [str(r[0]) for r in rows if str(r[0]).startswith(clean)]

    def stream_ids(self) -> list[str]:
        """Every run id that has stored events (used by verify to catch unindexed streams)."""
        sql = f"SELECT DISTINCT originator_id FROM {EVENTS_TABLE}"
        return sorted(str(r[0]).replace("-", "") for r in self._db.query(sql))


class Notifications:
    """Every run's events in commit order (the library's notification log), for read models."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def max_notification_id(self) -> int:
        return int(self._db.recorder.max_notification_id() or 0)

    def notifications(self, after: int, limit: int = 1000) -> list[tuple[int, str, Event]]:
        """(notification id, run id, event) in commit order, after a tracking position."""
        with gc_paused():
            page = self._db.recorder.select_notifications(
                start=after, limit=limit, inclusive_of_start=False
            )
            events = _parse([split_state(n.state)[2] for n in page], [n.topic for n in page])
            return [
                (int(n.id), str(n.originator_id).replace("-", ""), event)
                for n, event in zip(page, events, strict=True)
            ]

    def touched_runs(self, after: int, until: int, page: int = 10_000) -> list[str]:
        """Run ids with events in (after, until], read without parsing the events."""
        runs: set[str] = set()
        position = after
        while position < until:
            notifications = self._db.recorder.select_notifications(
                start=position, limit=page, stop=until, inclusive_of_start=False
            )
            if not notifications:
                break
            runs.update(str(n.originator_id).replace("-", "") for n in notifications)
            position = int(notifications[-1].id)
        return sorted(runs)

    def subscribe(self, gt: int) -> Any:
        """Notifications after `gt` as they are committed (the library's subscription)."""
        return self._db.recorder.subscribe(gt=gt)


def _linked(
    run_id: str, events: Sequence[Event], payloads: list[bytes], length: int, tip: str
) -> tuple[list[StoredEvent], list[Recorded]]:
    """The events as stored after `length` events ending at `tip`, each linked to the one
    before it; and as recorded."""
    from eventsourcing.persistence import StoredEvent as stored_event

    stored: list[StoredEvent] = []
    recorded: list[Recorded] = []
    prev = tip
    for position, (event, payload) in enumerate(
        zip(events, payloads, strict=True), start=length + 1
    ):
        digest, state = link(prev, payload)
        stored.append(stored_event(run_id, position, event.kind, state))
        recorded.append(Recorded(position, event, prev, digest))
        prev = digest
    return stored, recorded


def _run_update(run_id: str, started: RunStarted | None, length: int, tip: str) -> tuple[Any, ...]:
    if started is None:
        return (length, tip, None, None, None, None, None, None, run_id)
    return (
        length,
        tip,
        started.at.isoformat(),
        started.repo,
        started.head,
        started.base,
        started.head_ref,
        started.base_ref,
        run_id,
    )


def _parse_run(run_id: str, links: list[Link]) -> list[Event]:
    """The run's events, each validated as the kind it was stored as and of this run."""
    try:
        events = _parse([link[4] for link in links], [link[1] for link in links])
    except ValueError:
        events = _first_undecodable(run_id, links)  # raises, naming the position
    for (position, _, _, _, _), event in zip(links, events, strict=True):
        if event.run_id != run_id:
            raise BrokenRun(run_id, position, "belongs to another run (moved event)")
    return events



def _first_undecodable(run_id: str, links: list[Link]) -> list[Event]:
    """Parse one event at a time to name the first that cannot be decoded as its stored kind."""
    from release_ledger.domain.events import event_from_json

    events: list[Event] = []
    for position, kind, _, _, payload in links:
        problem = None
        try:
            event = event_from_json(payload)
            if event.kind != kind:
                problem = f"stored {kind} holds a {event.kind}"
        except ValueError:
            problem = "its event cannot be decoded"
        if problem is not None:
            raise BrokenRun(run_id, position, problem)
        events.append(event)
    return events


def _parse(payloads: list[bytes], topics: list[str]) -> list[Event]:
    """Validate stored payloads, one call per kind; each must be the kind it was stored as."""
    from release_ledger.domain.events import events_as_stored, events_from_json

    fast = events_as_stored(payloads, topics)
    if fast is not None:
        return fast
    events = events_from_json(payloads)  # something is wrong: this names it
    for event, topic in zip(events, topics, strict=True):
        if event.kind != topic:
            raise ValueError(f"stored {topic} event holds a {event.kind} payload")
    return events
