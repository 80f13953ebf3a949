"""The event store: one hash-chained stream per run, plus content-addressed artifacts.

Built on the `eventsourcing` library's application recorders (SQLite or PostgreSQL). Each
stored event's state is a one-line JSON header (`prev`, `hash`) followed by the event's
canonical JSON; the hash covers the previous hash and those exact bytes, so an edited,
removed or reordered event breaks the chain. Artifacts (JUnit reports, log tails) and the
run index (with the chain's head, so a truncated stream is detected too) are written in the
same transaction as the events that reference them: one database holds a whole ledger.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import hmac
import json
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.store_dialects import (
    EVENTS_TABLE,
    LOCK_WAIT_S,
    READINGS_TABLE,
    SEALS_TABLE,
    es_error,
    library_error,
)
from adapters.store_errors import ConcurrencyConflict, LeaseHeld, LeaseLost, StoreBusy
from domain.chain import (
    GENESIS,
    HEADER_END,
    HEADER_MIDDLE,
    HEADER_START,
    decode_state,
    intact,
    link,
    sha256_hex,
    split_state,
)
from domain.errors import BadInput, BrokenRun

if TYPE_CHECKING:  # the event models (pydantic) load only when events are read or written:
    # `ledger runs` and `ledger questions` read the store's own tables and never need them
    from eventsourcing.persistence import StoredEvent

    from domain.events import Event, RunStarted

# The eventsourcing library (and, for PostgreSQL, its connection pool) loads the first time a
# process writes, subscribes or reads notifications: reading commands (`ledger runs`,
# `questions`, `show`, `verdict`) read through one plain connection and never import it.



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


# --- the store ------------------------------------------------------------------------------


class EventStore:
    """Append-only, hash-chained run streams over an `eventsourcing` recorder."""

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
        `connect()` builds the library's recorder and datastore (its pool); from then on
        everything goes through them."""
        self._recorder = recorder
        self._ds = datastore
        self._connect = connect
        self._reader = reader
        self._reader_thread = threading.get_ident()
        self._building = threading.Lock()
        self.url = url  # how to reach this database again (PostgreSQL read models use it)
        self.read_only = False  # a read-only SQLite ledger: derived data is not kept
        # Signs each run's (length, tip) in the appending transaction and checks it on every
        # read, when the ledger's key is at hand (`Ledger.sealing_key` sets it).
        self.sealer: Sealer | None = None
        self._seals_table = False
        self._sql_upsert_seal = (
            "INSERT INTO ledger_seals (run_id, length, tip, key_id, seal) VALUES "
            f"({', '.join(['?' if dialect == 'sqlite' else '%s'] * 5)}) ON CONFLICT (run_id) "
            "DO UPDATE SET length = "
            "excluded.length, tip = excluded.tip, key_id = excluded.key_id, seal = excluded.seal"
        )
        self.dialect = dialect
        self.description = description
        ph = self._ph = "?" if dialect == "sqlite" else "%s"
        self._sql_ensure_run = (
            f"INSERT INTO ledger_runs (run_id, length, tip) VALUES ({ph}, 0, {ph}) "
            "ON CONFLICT (run_id) DO NOTHING"
        )
        self._sql_lock_tip = f"SELECT length, tip FROM ledger_runs WHERE run_id = {ph}" + (
            "" if dialect == "sqlite" else " FOR UPDATE"
        )
        started = ("started_at", "repo", "head", "base", "head_ref", "base_ref")
        self._sql_upsert_run = (
            "INSERT INTO ledger_runs (length, tip, "
            + ", ".join(started)
            + f", run_id) VALUES ({', '.join([ph] * 9)}) ON CONFLICT (run_id) DO UPDATE SET "
            "length = excluded.length, tip = excluded.tip, "
            + ", ".join(f"{col} = COALESCE(excluded.{col}, ledger_runs.{col})" for col in started)
        )
        self._sql_read = (
            "SELECT originator_version, topic, state FROM ledger_events "
            f"WHERE originator_id = {ph} ORDER BY originator_version"
        )
        self._sql_put_artifact = (
            "INSERT INTO ledger_artifacts (sha256, size, data) "
            f"VALUES ({ph}, {ph}, {ph}) ON CONFLICT (sha256) DO NOTHING"
        )
        self._sql_put_content = (
            "INSERT INTO ledger_index (kind, key, run_id, position, item, data) "
            f"VALUES ({', '.join([ph] * 6)}) ON CONFLICT DO NOTHING"
        )
        self._sql_question = {
            "open": "INSERT INTO ledger_questions (run_id, question_id, asked_at, position, "
            f"state, data) VALUES ({ph}, {ph}, {ph}, {ph}, 'open', {ph}) ON CONFLICT "
            "(run_id, question_id) DO UPDATE SET asked_at = excluded.asked_at, "
            "position = excluded.position, state = 'open', data = excluded.data",
            "expire": "UPDATE ledger_questions SET state = 'expired' "
            f"WHERE run_id = {ph} AND question_id = {ph} AND state = 'open'",
            "park": "UPDATE ledger_questions SET state = 'parked' "
            f"WHERE run_id = {ph} AND question_id = {ph}",
            "close": f"DELETE FROM ledger_questions WHERE run_id = {ph} AND question_id = {ph}",
        }
        self._sql_lifecycle = (
            "INSERT INTO ledger_status (run_id, lifecycle, asked, rule) "
            f"VALUES ({ph}, {ph}, {ph}, {ph}) ON CONFLICT (run_id) DO UPDATE SET "
            "lifecycle = COALESCE(excluded.lifecycle, ledger_status.lifecycle), "
            "asked = CASE WHEN excluded.asked = 1 THEN 1 ELSE ledger_status.asked END, "
            "rule = COALESCE(excluded.rule, ledger_status.rule)"
        )

    # -- the library's recorder, built on first need --

    @property
    def recorder(self) -> Any:
        if self._recorder is None:
            self._build()
        return self._recorder

    @property
    def _datastore(self) -> Any:
        if self._ds is None:
            self._build()
        return self._ds

    def _build(self) -> None:
        with self._building:
            if self._ds is None:
                assert self._connect is not None, "an EventStore needs a datastore"
                self._recorder, self._ds = self._connect()

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
        artifacts = dict(artifacts or {})
        for digest, data in artifacts.items():
            if sha256_hex(data) != digest:
                raise ValueError(f"artifact bytes do not match their hash {digest}")
        from domain.events import RunStarted, event_to_json

        payloads = [event_to_json(e).encode() for e in events]
        started = next((e for e in events if isinstance(e, RunStarted)), None)
        length = 0
        try:
            with self._write() as c:
                length, tip = self._lock_tip(c, run_id)
                if lease is not None:
                    self._check_lease(c, lease)
                if expected_length is not None and length != expected_length:
                    raise ConcurrencyConflict(
                        f"run {run_id} has {length} events, expected {expected_length}"
                    )
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
                self._insert(c, stored)
                if artifacts:
                    c.executemany(
                        self._sql_put_artifact, [(h, len(d), d) for h, d in artifacts.items()]
                    )
                c.execute(
                    self._sql_upsert_run,
                    self._run_update(run_id, started, length + len(events), prev),
                )
                if self.sealer is not None:
                    self._write_seal(c, run_id, length + len(events), prev)
                if index is not None:
                    self._write_index(c, run_id, length, index)
        except (es_error("IntegrityError"), sqlite3.IntegrityError) as conflict:
            # Only when stored events and the run index disagree (e.g. a tampered index).
            raise ConcurrencyConflict(
                f"run {run_id}: position {length + 1} is already taken"
            ) from conflict
        return recorded

    def _write_seal(self, c: Any, run_id: str, length: int, tip: str) -> None:
        """The run's seal over its new (length, tip), in the caller's transaction."""
        assert self.sealer is not None
        if not self._seals_table:
            c.execute(SEALS_TABLE)
            self._seals_table = True
        mac = self.sealer.sign(run_id, length, tip)
        c.execute(self._sql_upsert_seal, (run_id, length, tip, self.sealer.key_id, mac))

    def seal_unsealed(self) -> int:
        """Seal every run that has no seal yet (a ledger from before seals, or a key made
        just now: trusted on first use); how many were sealed."""
        if self.sealer is None:
            return 0
        with self._write() as c:
            c.execute(SEALS_TABLE)
            self._seals_table = True
            c.execute(
                "SELECT r.run_id, r.length, r.tip FROM ledger_runs r LEFT JOIN ledger_seals s "
                "ON s.run_id = r.run_id WHERE s.run_id IS NULL"
            )
            rows = list(c.fetchall())
            for row in rows:
                if isinstance(row, dict):  # PostgreSQL's datastore gives dicts
                    row = (row["run_id"], row["length"], row["tip"])
                self._write_seal(c, str(row[0]), int(row[1]), str(row[2]))
        return len(rows)

    def seal_of(self, run_id: str) -> list[tuple[Any, ...]] | None:
        """The run's seal as stored now, read before its events (`check_seal`): appends only
        move a seal forward with the events they add (one transaction), so the events read
        after it hold at least what it covers, whatever another writer commits between."""
        if self.sealer is None:
            return None
        try:
            rows = self._query(
                f"SELECT length, tip, key_id, seal FROM ledger_seals WHERE run_id = {self._ph}",
                (run_id,),
            )
        except Exception:  # no seals table: a ledger from before seals, not yet sealed
            return None
        return [tuple(row) for row in rows]

    def check_seal(
        self, run_id: str, hashes: Sequence[str], rows: list[tuple[Any, ...]] | None
    ) -> None:
        """BrokenRun unless the run's seal (made with this key) covers a prefix of its chain
        (`hashes`: each stored event's chain hash, in order): events removed behind the
        index's back, or an index row set by hand, show here. `rows` is `seal_of(run_id)`,
        read before the events (a seal read after them may cover a concurrent append)."""
        if self.sealer is None or rows is None:
            return
        if not rows:
            if hashes:
                raise BrokenRun(run_id, len(hashes), "the run is not sealed by the ledger's key")
            return
        length, tip, key_id, mac = int(rows[0][0]), str(rows[0][1]), str(rows[0][2]), rows[0][3]
        if key_id != self.sealer.key_id:
            return  # sealed by another runner's key (a shared ledger): not checked here
        if not hmac.compare_digest(str(mac), self.sealer.sign(run_id, length, tip)):
            raise BrokenRun(run_id, length, "the run's seal does not match (edited seal)")
        if length > len(hashes) or (length and hashes[length - 1] != tip):
            raise BrokenRun(
                run_id, min(length, len(hashes) + 1),
                f"the sealed run had {length} events ending at {tip[:12]}; the stored chain "
                f"has {len(hashes)} (events removed or replaced)",
            )  # fmt: skip

    def _write_index(self, c: Any, run_id: str, length: int, index: IndexWrite) -> None:
        """The index rows of events appended after `length` (inside the append's transaction)."""
        if index.content:
            c.executemany(
                self._sql_put_content,
                [
                    (kind, key, run_id, length + 1 + offset, item, data)
                    for kind, key, offset, item, data in index.content
                ],
            )
        for change, question_id, offset, data in index.questions:
            if change == "open":
                asked_at = str(json.loads(data)["asked_at"])
                c.execute(
                    self._sql_question[change],
                    (run_id, question_id, asked_at, length + 1 + offset, data),
                )
            else:
                c.execute(self._sql_question[change], (run_id, question_id))
        if index.lifecycle is not None:
            status, asked, rule = index.lifecycle
            c.execute(self._sql_lifecycle, (run_id, status, int(asked), rule))

    def replace_index(self, run_id: str, length: int, index: IndexWrite) -> bool:
        """Make the run's index rows exactly those of its first `length` events (a re-index
        from the events); False, writing nothing, when the run has moved on meanwhile."""
        ph = self._ph
        with self._write() as c:
            current, _ = self._lock_tip(c, run_id)
            if current != length:
                return False
            for table in ("ledger_index", "ledger_questions", "ledger_status"):
                c.execute(f"DELETE FROM {table} WHERE run_id = {ph}", (run_id,))
            self._write_index(c, run_id, 0, index)
        return True

    def index_format(self) -> str:
        rows = self._query("SELECT value FROM ledger_meta WHERE key = 'index_format'")
        return str(rows[0][0]) if rows else ""

    def set_index_format(self, value: str) -> None:
        ph = self._ph
        with self._write() as c:
            c.execute(
                f"INSERT INTO ledger_meta (key, value) VALUES ('index_format', {ph}) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (value,),
            )

    def set_verdict(self, run_id: str, length: int, code: str, verdict: str) -> None:
        """Remember the run's verdict status as of `length` events under `code` (rule and
        reader versions); an older computation never overwrites a newer one."""
        if self.read_only:
            return  # remembered by a reader that may write; computed again meanwhile
        ph = self._ph
        with self._transaction(commit=True) as c:
            c.execute(
                f"UPDATE ledger_status SET verdict = {ph}, verdict_length = {ph}, "
                f"verdict_code = {ph} WHERE run_id = {ph} "
                f"AND (verdict_length IS NULL OR verdict_length <= {ph})",
                (verdict, length, code, run_id, length),
            )

    # -- kept readings: a run's answers as the read side computed them (a memo, not a fact) --

    def kept_reading(self, run_id: str) -> KeptReading | None:
        """The reading kept for the run, if any (its validity is the read side's to judge);
        None too when no reading was ever kept in this ledger (no table yet)."""
        try:
            rows = self._query(
                "SELECT length, tip, code, seal, body FROM ledger_readings "
                f"WHERE run_id = {self._ph}",
                (run_id,),
            )
        except Exception:  # no table yet, or unreadable: nothing kept
            return None
        if not rows:
            return None
        length, tip, code, seal, body = rows[0]
        try:
            text = zlib.decompress(bytes(body)).decode()
        except (zlib.error, TypeError, UnicodeDecodeError):
            return None  # not a body this code wrote: as if nothing were kept
        return KeptReading(int(length), str(tip), str(code), str(seal), text)

    def keep_reading(self, run_id: str, reading: KeptReading) -> bool:
        """Keep (replace) the run's reading; best effort and never waiting long for a busy
        writer: False when it could not be written (read-only, locked, ...)."""
        ph = self._ph
        upsert = (
            "INSERT INTO ledger_readings (run_id, length, tip, code, seal, body) "
            f"VALUES ({', '.join([ph] * 6)}) ON CONFLICT (run_id) DO UPDATE SET "
            "length = excluded.length, tip = excluded.tip, code = excluded.code, "
            "seal = excluded.seal, body = excluded.body"
        )
        body = zlib.compress(reading.body.encode(), 1)
        row = (run_id, reading.length, reading.tip, reading.code, reading.seal, body)
        try:
            self._write_briefly([READINGS_TABLE, upsert], row)
        except Exception:
            return False
        return True

    def _write_briefly(self, statements: Sequence[str], row: Sequence[Any]) -> None:
        """Run `statements` (the last one with `row`) in one short transaction that gives up
        after a fraction of a second on a lock: for derived data a reader may keep."""

        def run(execute: Callable[..., Any]) -> None:
            for statement in statements[:-1]:
                execute(statement)
            execute(statements[-1], tuple(row))

        if self.read_only:
            raise BadInput(f"the ledger {self.description} is read-only")
        reader = self._direct_reader()
        if reader is not None and self.dialect == "sqlite":
            reader.execute("PRAGMA busy_timeout = 200")
            try:
                reader.execute("BEGIN IMMEDIATE")
                try:
                    run(reader.execute)
                    reader.execute("COMMIT")
                except BaseException:
                    reader.execute("ROLLBACK")
                    raise
            finally:
                reader.execute(f"PRAGMA busy_timeout = {LOCK_WAIT_S * 1000}")
        elif reader is not None:
            with reader.transaction():
                reader.execute("SET LOCAL lock_timeout = '200ms'")
                run(reader.execute)
        else:
            with self._transaction(commit=True) as c:
                if self.dialect != "sqlite":
                    c.execute("SET LOCAL lock_timeout = '200ms'")
                run(c.execute)

    def runs_page(self, limit: int | None = None, offset: int = 0) -> list[IndexedRun]:
        """Runs newest first (runs without a start last), with their status rows: one
        indexed range read."""
        columns = (
            "r.run_id, r.started_at, r.repo, r.head, r.base, r.head_ref, r.base_ref, r.length, "
            "r.tip, s.lifecycle, s.asked, s.rule, s.verdict, s.verdict_length, s.verdict_code"
        )
        join = "FROM ledger_runs r LEFT JOIN ledger_status s ON s.run_id = r.run_id"
        page = f" LIMIT {int(limit)} OFFSET {int(offset)}" if limit is not None else ""
        rows = self._query(
            f"SELECT {columns} {join} WHERE r.started_at IS NOT NULL "
            f"ORDER BY r.started_at DESC, r.run_id{page}"
        )
        if limit is None or len(rows) < limit:
            dated = self._query("SELECT count(*) FROM ledger_runs WHERE started_at IS NOT NULL")
            skip = max(0, offset - int(dated[0][0]))
            more = "" if limit is None else f" LIMIT {int(limit) - len(rows)} OFFSET {skip}"
            rows += self._query(
                f"SELECT {columns} {join} WHERE r.started_at IS NULL ORDER BY r.run_id{more}"
            )
        return [
            IndexedRun(
                RunRow(
                    str(r[0]), str(r[1] or ""), str(r[2] or ""), str(r[3] or ""),
                    str(r[4] or ""), str(r[5] or ""), str(r[6] or ""), int(r[7]), str(r[8]),
                ),
                lifecycle=str(r[9] or "running"),
                asked=bool(r[10]),
                rule=None if r[11] is None else str(r[11]),
                verdict=None if r[12] is None else str(r[12]),
                verdict_length=None if r[13] is None else int(r[13]),
                verdict_code=None if r[14] is None else str(r[14]),
            )
            for r in rows
        ]  # fmt: skip

    def run_count(self) -> int:
        return int(self._query("SELECT count(*) FROM ledger_runs")[0][0])

    def open_questions(
        self, limit: int | None = None, offset: int = 0
    ) -> list[tuple[str, str, int, str, str]]:
        """(run id, question id, position, state, data) of the questions not yet decided
        (open, expired or parked), newest first: a page of `limit` from `offset` (None: all)."""
        if limit is not None:
            page = f" LIMIT {int(limit)} OFFSET {int(offset)}"
        elif offset:  # SQLite needs a LIMIT before an OFFSET (-1: none)
            page = f"{' LIMIT -1' if self.dialect == 'sqlite' else ''} OFFSET {int(offset)}"
        else:
            page = ""
        rows = self._query(
            "SELECT run_id, question_id, position, state, data FROM ledger_questions "
            f"ORDER BY asked_at DESC, run_id DESC, position DESC{page}"
        )
        return [(str(r[0]), str(r[1]), int(r[2]), str(r[3]), str(r[4])) for r in rows]

    def open_question_count(self) -> int:
        return int(self._query("SELECT count(*) FROM ledger_questions")[0][0])

    def content(self, kind: str, keys: Iterable[str]) -> list[ContentHit]:
        """Every content row of `kind` under any of `keys` (one indexed lookup per 500)."""
        wanted = sorted(set(keys))
        hits: list[ContentHit] = []
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ", ".join([self._ph] * len(chunk))
            for row in self._query(
                "SELECT kind, key, run_id, position, item, data FROM ledger_index "
                f"WHERE kind = {self._ph} AND key IN ({marks})",
                [kind, *chunk],
            ):
                hits.append(
                    ContentHit(str(row[0]), str(row[1]), str(row[2]), int(row[3]),
                               str(row[4]), str(row[5]))
                )  # fmt: skip
        return hits

    def index_rows(self) -> list[tuple[Any, ...]]:
        """Every index row, sorted (for comparing the maintained index with a rebuild)."""
        rows: list[tuple[Any, ...]] = []
        for table, columns in (
            ("ledger_index", "kind, key, run_id, position, item, data"),
            ("ledger_questions", "run_id, question_id, asked_at, position, state, data"),
            ("ledger_status", "run_id, lifecycle, asked, rule"),
        ):
            found = [(table, *row) for row in self._query(f"SELECT {columns} FROM {table}")]
            rows += sorted(found, key=lambda r: tuple("" if v is None else v for v in r))
        return rows

    def touched_runs(self, after: int, until: int, page: int = 10_000) -> list[str]:
        """Run ids with events in (after, until], read without parsing the events."""
        runs: set[str] = set()
        position = after
        while position < until:
            notifications = self.recorder.select_notifications(
                start=position, limit=page, stop=until, inclusive_of_start=False
            )
            if not notifications:
                break
            runs.update(str(n.originator_id).replace("-", "") for n in notifications)
            position = int(notifications[-1].id)
        return sorted(runs)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Any]:
        """A writing transaction. SQLite's begins IMMEDIATE: it takes the database's write lock
        (waiting up to the busy timeout) before anything is read, so the tip read in it
        cannot be stale."""
        try:
            if self.dialect != "sqlite":
                with self._transaction(commit=True) as c:
                    # Row and table locks are waited for, but not forever.
                    c.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT_S}s'")
                    yield c
                return
            with self._datastore.get_connection(commit=True) as conn:
                c = conn.cursor().sqlite_cursor
                c.execute("BEGIN IMMEDIATE")  # waits up to the busy timeout (LOCK_WAIT_S)
                try:
                    yield c
                except BaseException:
                    conn.rollback()
                    raise
                conn.commit()
        except (sqlite3.OperationalError, es_error("OperationalError")) as error:
            text = str(error).lower()
            if "locked" in text or "lock timeout" in text or "busy" in text:
                raise StoreBusy(
                    f"the ledger {self.description} stayed locked by another writer for "
                    f"{LOCK_WAIT_S} s; nothing was written, try again"
                ) from error
            if "full" in text or "disk i/o error" in text:
                # SQLITE_FULL, or the I/O error a file size limit gives: rolled back whole.
                raise BadInput(
                    f"the ledger {self.description} could not be written ({text}: a full disk "
                    "or a file size limit); nothing was written"
                ) from error
            if "readonly" in text or "read-only" in text:
                raise BadInput(
                    f"the ledger {self.description} is read-only; nothing was written"
                ) from error
            raise

    def _lock_tip(self, c: Any, run_id: str) -> tuple[int, str]:
        """The run's (length, tip) under the write lock. PostgreSQL: the run's index row is
        created if new, then locked (SELECT ... FOR UPDATE) until commit."""
        if self.dialect != "sqlite":
            c.execute(self._sql_ensure_run, (run_id, GENESIS))
        c.execute(self._sql_lock_tip, (run_id,))
        row = c.fetchone()
        if row is None:
            return 0, GENESIS
        values = tuple(row.values()) if isinstance(row, dict) else tuple(row)
        return int(values[0]), str(values[1])

    def _insert(self, c: Any, stored: list[StoredEvent]) -> None:
        if self.dialect == "sqlite":
            c.executemany(
                self.recorder.insert_events_statement,
                [(s.originator_id, s.originator_version, s.topic, s.state) for s in stored],
            )
        else:
            # The library's own insert: locks the events table (commit order equals
            # notification order), notifies listeners, inserts.
            self.recorder._insert_stored_events(c, stored)

    @staticmethod
    def _run_update(
        run_id: str, started: RunStarted | None, length: int, tip: str
    ) -> tuple[Any, ...]:
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

    # -- leases: one driver per run --

    def _now(self, c: Any) -> float:
        """The lease clock: the database server's for PostgreSQL (runners on many machines
        share it), this machine's for a SQLite file (every writer is on this machine)."""
        if self.dialect == "sqlite":
            return time.time()
        c.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8 AS now")
        row = c.fetchone()
        return float(next(iter(row.values())) if isinstance(row, dict) else row[0])

    def _lease_row(self, c: Any, run_id: str) -> tuple[str, float] | None:
        sql = f"SELECT holder, expires FROM ledger_leases WHERE run_id = {self._ph}"
        c.execute(sql + ("" if self.dialect == "sqlite" else " FOR UPDATE"), (run_id,))
        row = c.fetchone()
        if row is None:
            return None
        values = tuple(row.values()) if isinstance(row, dict) else tuple(row)
        return str(values[0]), float(values[1])

    def _check_lease(self, c: Any, lease: Lease) -> None:
        row = self._lease_row(c, lease.run_id)
        if row is None or row[0] != lease.holder:
            by = f" by {row[0]}" if row else ""
            raise LeaseLost(
                f"run {lease.run_id}: this process's lease was taken over{by}; it stops here"
            )

    def acquire_lease(
        self,
        run_id: str,
        holder: str,
        seconds: float,
        *,
        holder_is_dead: Any = None,
    ) -> Lease:
        """Take the run's lease, or raise `LeaseHeld` naming the live holder. A lease whose
        expiry passed (its holder stopped renewing it: killed, hung, disconnected) is taken
        over; so is one whose holder `holder_is_dead` proves gone (a dead local process)."""
        ph = self._ph
        with self._write() as c:
            now = self._now(c)
            row = self._lease_row(c, run_id)
            live = row is not None and row[0] != holder and row[1] > now
            if row is not None and live and not (holder_is_dead and holder_is_dead(row[0])):
                raise LeaseHeld(run_id, row[0], row[1] - now)
            c.execute(
                f"INSERT INTO ledger_leases (run_id, holder, expires) VALUES ({ph}, {ph}, {ph}) "
                "ON CONFLICT (run_id) DO UPDATE SET holder = excluded.holder, "
                "expires = excluded.expires",
                (run_id, holder, now + seconds),
            )
        return Lease(run_id, holder, seconds)

    def renew_lease(self, lease: Lease) -> bool:
        """Extend a held lease; False when it was taken over (the holder must stop)."""
        ph = self._ph
        with self._write() as c:
            now = self._now(c)
            c.execute(
                f"UPDATE ledger_leases SET expires = {ph} WHERE run_id = {ph} AND holder = {ph}",
                (now + lease.seconds, lease.run_id, lease.holder),
            )
            return bool(c.rowcount == 1)

    def release_lease(self, lease: Lease) -> None:
        ph = self._ph
        with self._write() as c:
            c.execute(
                f"DELETE FROM ledger_leases WHERE run_id = {ph} AND holder = {ph}",
                (lease.run_id, lease.holder),
            )

    def lease_holder(self, run_id: str) -> tuple[str, float] | None:
        """(holder, seconds left) of a live lease on the run, else None."""
        with self._write() as c:
            now = self._now(c)
            row = self._lease_row(c, run_id)
        if row is None or row[1] <= now:
            return None
        return row[0], row[1] - now

    def put_artifacts(self, artifacts: dict[str, bytes]) -> None:
        """Store blobs ahead of the event that will reference them (idempotent)."""
        rows = [(h, len(d), d) for h, d in artifacts.items()]
        if not rows:
            return
        sql = self._sql_put_artifact
        with self._transaction(commit=True) as c:
            c.executemany(sql, rows)

    # -- reading --

    def tip(self, run_id: str) -> tuple[int, str]:
        """(number of events, hash of the last event) of a run; (0, GENESIS) when new."""
        rows = self._query(
            f"SELECT length, tip FROM ledger_runs WHERE run_id = {self._ph}", (run_id,)
        )
        if not rows:
            return 0, GENESIS
        return int(rows[0][0]), str(rows[0][1])

    def read(self, run_id: str) -> list[Recorded]:
        """The run's stream, its hash chain checked against the run index first: a broken
        or undecodable run raises `BrokenRun` (nothing may be concluded from it)."""
        # The recorder's table, read as plain tuples: the library's select_events builds a
        # StoredEvent per row, which costs as much as validating the event.
        with _gc_paused():
            links = self._verified(run_id)
            events = self._parse_run(run_id, links)
            return [
                Recorded(position, event, prev, digest)
                for (position, _, digest, prev, _), event in zip(links, events, strict=True)
            ]

    def broken_runs(self, runs: Sequence[RunRow]) -> dict[str, BrokenRun]:
        """Check the hash chains of several runs (as listed, with the index rows read first)
        in one read of their events: the broken ones, each with where. A run whose stored
        events disagree with its listed index is checked again on its own (`check_chain`),
        which tells a concurrent append from a break."""
        found: dict[str, BrokenRun] = {}
        if not runs:
            return found
        ids = [r.run_id for r in runs]
        if self.dialect != "sqlite":
            whole = self._intact_on_server(ids)
            if whole is not None:
                for row in runs:
                    count, last = whole.get(row.run_id, (0, None))
                    if not (count == row.length and (not count or last == row.tip)):
                        self._recheck(row.run_id, found)
                return found
        marks = ", ".join([self._ph] * len(ids))
        stored: dict[str, list[tuple[int, bytes]]] = {run_id: [] for run_id in ids}
        for run_id, position, state in self._query(
            "SELECT originator_id, originator_version, state FROM ledger_events "
            f"WHERE originator_id IN ({marks}) ORDER BY originator_id, originator_version",
            ids,
        ):
            bucket = stored.get(run_id)
            if bucket is None:  # PostgreSQL: the id as stored, perhaps with dashes
                bucket = stored.setdefault(str(run_id).replace("-", ""), [])
            bucket.append((int(position), state if type(state) is bytes else bytes(state)))
        for row in runs:
            events = stored.get(row.run_id, [])
            if not (
                len(events) == row.length
                and all(position == n for n, (position, _) in enumerate(events, start=1))
                and intact([state for _, state in events], row.tip)
            ):
                self._recheck(row.run_id, found)
        return found

    def _recheck(self, run_id: str, found: dict[str, BrokenRun]) -> None:
        """A run the quick check could not vouch for: the full chain check says what broke."""
        try:
            self.check_chain(run_id)
        except BrokenRun as broken:
            found[run_id] = broken

    def _intact_on_server(self, ids: Sequence[str]) -> dict[str, tuple[int, str | None]] | None:
        """PostgreSQL: `domain.chain.intact` computed by the server (its sha256), so a run
        list moves one row per run instead of every event. For each run with events: how
        many, and the last event's hash when every event has the header `link` writes, at
        positions 1..n, follows its predecessor and matches its hash (else None: the caller
        checks that run in full). None when the server cannot answer (then Python checks)."""
        from domain.chain import GENESIS, HEADER_END, HEADER_MIDDLE, HEADER_START

        marks = ", ".join(["%s"] * len(ids))
        digest = "substring(state from 11 for 64)"
        sql = (
            "SELECT run_id, count(*), bool_and(ok), (array_agg(digest ORDER BY position DESC))[1] "
            f"FROM (SELECT originator_id AS run_id, originator_version AS position, {digest} "
            "AS digest, coalesce(originator_version = row_number() OVER w "
            "AND substring(state from 1 for 10) = %s AND substring(state from 75 for 12) = %s "
            "AND substring(state from 151 for 3) = %s "
            f"AND substring(state from 87 for 64) = coalesce(lag({digest}) OVER w, %s) "
            "AND encode(sha256(substring(state from 87 for 64) || %s || substring(state from 154)),"
            f" 'hex') = encode({digest}, 'escape'), false) AS ok FROM ledger_events "
            f"WHERE originator_id IN ({marks}) "
            "WINDOW w AS (PARTITION BY originator_id ORDER BY originator_version)) AS e "
            "GROUP BY run_id"
        )
        params = [HEADER_START, HEADER_MIDDLE, HEADER_END, GENESIS.encode(), b"\n", *ids]
        try:
            rows = self._query(sql, params)
        except Exception:  # e.g. a server without sha256 (PostgreSQL < 11)
            return None
        found: dict[str, tuple[int, str | None]] = {}
        for run_id, events, ok, last in rows:
            tip = bytes(last).decode("ascii", "replace") if ok and last is not None else None
            found[str(run_id).replace("-", "")] = (int(events), tip)
        return found

    def check_chain(self, run_id: str) -> int:
        """The run's length after checking its hash chain against the run index, without
        parsing its events; `BrokenRun` when broken."""
        return self.verified_tip(run_id)[0]

    def verified_tip(self, run_id: str) -> tuple[int, str]:
        """(length, chain head) of the run after checking its hash chain as `read` does,
        without parsing its events; `BrokenRun` when broken."""
        links = self._verified(run_id)
        return len(links), (links[-1][2] if links else GENESIS)

    def read_events(self, run_id: str) -> list[tuple[int, Event]]:
        """(position, event) of a run's stream, verified and validated as `read` does,
        without building the `Recorded` links that projections never use."""
        with _gc_paused():
            links = self._verified(run_id)
            events = self._parse_run(run_id, links)
            return list(zip([link[0] for link in links], events, strict=True))

    def _verified(self, run_id: str) -> list[tuple[int, str, str, str, bytes]]:
        """(position, kind, hash, prev, payload) of each stored event, after checking the
        chain: positions 1..n, each event follows its predecessor and matches its hash, and
        the run index agrees on the length and the tip. The full check (artifacts too) is
        `ledger verify`; this one costs one sha256 per event.

        The index is read first: appends only add events (index and events in one
        transaction), so the events read after it hold at least the indexed ones, whatever
        another writer commits in between; a reader never mistakes a concurrent append for
        a broken chain.
        """
        index = self._query(
            f"SELECT length, tip FROM ledger_runs WHERE run_id = {self._ph}", (run_id,)
        )
        seal = self.seal_of(run_id)  # before the events, like the index
        rows = self._query(self._sql_read, (run_id,))
        links: list[tuple[int, str, str, str, bytes]] = []
        prev = GENESIS
        prev_bytes = prev.encode()
        sha256 = hashlib.sha256
        for expected, (position, kind, state) in enumerate(rows, start=1):
            if position != expected:
                raise BrokenRun(run_id, expected, f"event {expected} is missing")
            if type(state) is not bytes:
                state = bytes(state)
            # The header `link` writes, checked in bytes (`split_state` reads any other).
            stored = state[86:150]
            if (
                state[:10] == HEADER_START
                and state[74:86] == HEADER_MIDDLE
                and state[150:153] == HEADER_END
                and state[10:74].isalnum()
                and stored.isalnum()
            ):
                digest, payload = state[10:74].decode(), state[153:]
                follows = stored == prev_bytes
            else:
                try:
                    digest, stored_prev, payload = split_state(state)
                except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                    raise BrokenRun(run_id, position, "its chain header cannot be read") from None
                follows = stored_prev == prev
            if not follows:
                raise BrokenRun(run_id, position, "does not follow its predecessor")
            if sha256(prev_bytes + b"\n" + payload).hexdigest() != digest:
                raise BrokenRun(run_id, position, "content does not match its hash")
            links.append((position, str(kind), digest, prev, payload))
            prev = digest
            prev_bytes = digest.encode()
        checked = [(int(index[0][0]), str(index[0][1]))] if index else []
        if not checked or checked[0][0] < len(rows):
            # More events than indexed: appended since the index was read (then the index,
            # committed with them, now counts them all) or added behind the chain's back.
            again = self._query(
                f"SELECT length, tip FROM ledger_runs WHERE run_id = {self._ph}", (run_id,)
            )
            if rows and not again:
                raise BrokenRun(run_id, 1, "the run is missing from the run index")
            if again and int(again[0][0]) < len(rows):
                raise BrokenRun(
                    run_id,
                    int(again[0][0]) + 1,
                    f"{len(rows)} events are stored but the run index records {again[0][0]}",
                )
            checked += [(int(again[0][0]), str(again[0][1]))] if again else []
        for length, tip in checked:
            if len(rows) < length:
                if length == checked[0][0]:
                    raise BrokenRun(
                        run_id,
                        len(rows) + 1,
                        f"the run index records {length} events but {len(rows)} are stored",
                    )
                continue  # the second read saw appends committed after the events were read
            if length and links[length - 1][2] != tip:
                raise BrokenRun(run_id, length, "the last indexed event is not the recorded tip")
        self.check_seal(run_id, [link[2] for link in links], seal)
        return links

    @staticmethod
    def _parse_run(run_id: str, links: list[tuple[int, str, str, str, bytes]]) -> list[Event]:
        try:
            events = _parse([link[4] for link in links], [link[1] for link in links])
        except ValueError:
            events = _first_undecodable(run_id, links)  # raises, naming the position
        for (position, _, _, _, _), event in zip(links, events, strict=True):
            if event.run_id != run_id:
                raise BrokenRun(run_id, position, "belongs to another run (moved event)")
        return events

    def read_raw(self, run_id: str) -> list[RawRecord]:
        """The run's stored events as they are, undecoded (what `verify` and `export` check);
        a plain read, so a read-only ledger answers it too."""
        raw = []
        for position, topic, state in self._query(self._sql_read, (run_id,)):
            state = bytes(state)
            try:
                header, payload = decode_state(state)
            except ValueError:
                header, payload = {}, state
            raw.append(RawRecord(run_id, int(position), str(topic), header, payload))
        return raw

    def runs(self) -> list[RunRow]:
        rows = self._query(
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
        ph = self._ph
        sql = (
            f"SELECT run_id FROM ledger_runs WHERE run_id >= {ph} AND run_id < {ph} ORDER BY run_id"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self._query(sql, (clean, clean + "g"))
        return [str(r[0]) for r in rows if str(r[0]).startswith(clean)]

    def stream_ids(self) -> list[str]:
        """Every run id that has stored events (used by verify to catch unindexed streams)."""
        sql = f"SELECT DISTINCT originator_id FROM {EVENTS_TABLE}"
        return sorted(str(r[0]).replace("-", "") for r in self._query(sql))

    def artifact(self, digest: str) -> bytes | None:
        rows = self._query(
            f"SELECT data FROM ledger_artifacts WHERE sha256 = {self._ph}", (digest,)
        )
        return bytes(rows[0][0]) if rows else None

    def artifacts(self, digests: Iterable[str]) -> dict[str, bytes]:
        wanted = sorted(set(digests))
        found: dict[str, bytes] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ", ".join([self._ph] * len(chunk))
            for digest, data in self._query(
                f"SELECT sha256, data FROM ledger_artifacts WHERE sha256 IN ({marks})", chunk
            ):
                found[str(digest)] = bytes(data)
        return found

    def artifact_digests(self) -> Iterator[tuple[str, bytes]]:
        for digest, data in self._query("SELECT sha256, data FROM ledger_artifacts"):
            yield str(digest), bytes(data)

    def ledger_id(self) -> str:
        """This ledger's identity (random, made with the ledger): views know whose they are."""
        rows = self._query("SELECT value FROM ledger_meta WHERE key = 'ledger_id'")
        return str(rows[0][0]) if rows else ""

    def max_notification_id(self) -> int:
        return int(self.recorder.max_notification_id() or 0)

    def notifications(self, after: int, limit: int = 1000) -> list[tuple[int, str, Event]]:
        """(notification id, run id, event) in commit order, after a tracking position."""
        with _gc_paused():
            page = self.recorder.select_notifications(
                start=after, limit=limit, inclusive_of_start=False
            )
            events = _parse([split_state(n.state)[2] for n in page], [n.topic for n in page])
            return [
                (int(n.id), str(n.originator_id).replace("-", ""), event)
                for n, event in zip(page, events, strict=True)
            ]

    # -- plumbing --

    def _transaction(self, commit: bool) -> Any:
        return self._datastore.transaction(commit=commit)

    def _direct_reader(self) -> Any:
        """The plain connection, while it still answers this thread (no datastore built)."""
        reader = self._reader
        if reader is not None and self._ds is None and threading.get_ident() == self._reader_thread:
            return reader
        return None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        reader = self._direct_reader()
        if reader is not None:
            return self._read_direct(reader, sql, params)
        with self._transaction(commit=False) as c:
            if self.dialect == "sqlite":
                c.sqlite_cursor.row_factory = None  # plain tuples, not sqlite3.Row
                c.execute(sql, tuple(params))
                return list(c.fetchall())
            from psycopg.rows import tuple_row

            c.row_factory = tuple_row  # plain tuples, not the datastore's dicts
            c.execute(sql, tuple(params))
            return list(c.fetchall())

    def execute_raw(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Direct write, bypassing the chain: only for tamper tests and repair tools."""
        with self._transaction(commit=True) as c:
            c.execute(sql, tuple(params))

    def _read_direct(self, reader: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """One statement on the plain connection (autocommit: its own snapshot, as the
        datastore's BEGIN ... ROLLBACK around it gave); errors as the datastore raises them."""
        if self.dialect == "sqlite":
            try:
                return list(reader.execute(sql, tuple(params)).fetchall())
            except sqlite3.Error as error:
                raise library_error(error, sqlite3) from error
        from adapters.pg_reader import dbapi

        try:
            return list(reader.execute(sql, tuple(params)).fetchall())
        except dbapi.Error as error:
            raise library_error(error, dbapi) from error

    def subscribe(self, gt: int) -> Any:
        """Notifications after `gt` as they are committed (the library's subscription)."""
        return self.recorder.subscribe(gt=gt)

    def close(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
        if self._ds is not None:
            with contextlib.suppress(Exception):
                self._ds.close()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a stream is decoded: tens of thousands of
    fresh, acyclic event objects otherwise trigger repeated collections (~20-40% of a read)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _first_undecodable(run_id: str, links: list[tuple[int, str, str, str, bytes]]) -> list[Event]:
    """Parse one event at a time to name the first that cannot be decoded as its stored kind."""
    from domain.events import event_from_json

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
    from domain.events import events_as_stored, events_from_json

    fast = events_as_stored(payloads, topics)
    if fast is not None:
        return fast
    events = events_from_json(payloads)  # something is wrong: this names it
    for event, topic in zip(events, topics, strict=True):
        if event.kind != topic:
            raise ValueError(f"stored {topic} event holds a {event.kind} payload")
    return events

