"""The event store's tables and the `eventsourcing` recorders that make them, for SQLite and
PostgreSQL: the dialect half of `adapters/event_store.py` (which holds the streams, artifacts,
leases and indexes over any recorder) and `adapters/store_open.py` (which opens one by URL).
"""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path
from typing import Any

FORMAT = "release-ledger/1"
DEFAULT_SQLITE_PATH = Path(".ledger") / "ledger.db"
EVENTS_TABLE = "ledger_events"
LOCK_WAIT_S = 30  # how long a writer waits for another's lock before giving up (both backends)

# --- recorders: the library's event tables plus the ledger's artifact, run and meta tables --

# The ledger's own indexes, written in the same transaction as the events they derive from
# (`projections/content_index.py` derives them; `Ledger.reindex` rebuilds them from the
# events): the run list's order and status, open questions, and per-item content lookups.
# (The format of their rows, which a ledger is re-indexed on changing: `store_port.INDEX_FORMAT`.)
# Kept readings (`ledger show`, `ledger verdict`): derived and replaceable, made with a new
# ledger and on first need in an older one. The body is zlib-compressed JSON (6-12x smaller:
# 3.4 KB for a 100-event run); BYTEA is PostgreSQL's binary type, and SQLite stores a blob
# as it is whatever the declared type.
READINGS_TABLE = (
    "CREATE TABLE IF NOT EXISTS ledger_readings (run_id TEXT PRIMARY KEY, "
    "length INTEGER NOT NULL, tip TEXT NOT NULL, code TEXT NOT NULL, seal TEXT NOT NULL, "
    "body BYTEA NOT NULL)"
)
# The run index's seal (HMAC under the ledger's key file, `adapters/ledger_key.py`) over each
# run's (length, tip), written in the appending transaction: removing a run's last events and
# fixing its index row to match is then told from an honest run. Made on first need.
SEALS_TABLE = (
    "CREATE TABLE IF NOT EXISTS ledger_seals (run_id TEXT PRIMARY KEY, "
    "length INTEGER NOT NULL, tip TEXT NOT NULL, key_id TEXT NOT NULL, seal TEXT NOT NULL)"
)
INDEX_TABLES = (
    READINGS_TABLE,
    "CREATE INDEX IF NOT EXISTS ledger_runs_newest ON ledger_runs (started_at DESC, run_id)",
    "CREATE TABLE IF NOT EXISTS ledger_status (run_id TEXT PRIMARY KEY, lifecycle TEXT, "
    "asked INTEGER NOT NULL DEFAULT 0, rule TEXT, verdict TEXT, verdict_length INTEGER, "
    "verdict_code TEXT)",
    "CREATE TABLE IF NOT EXISTS ledger_questions (run_id TEXT NOT NULL, "
    "question_id TEXT NOT NULL, asked_at TEXT NOT NULL, position INTEGER NOT NULL, "
    "state TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, question_id))",
    "CREATE INDEX IF NOT EXISTS ledger_questions_newest ON ledger_questions (asked_at)",
    "CREATE TABLE IF NOT EXISTS ledger_index (kind TEXT NOT NULL, key TEXT NOT NULL, "
    "run_id TEXT NOT NULL, position INTEGER NOT NULL, item TEXT NOT NULL, data TEXT NOT NULL, "
    "PRIMARY KEY (kind, key, run_id, position, item))",
    "CREATE INDEX IF NOT EXISTS ledger_index_run ON ledger_index (run_id)",
)


@functools.cache
def _sqlite_classes() -> tuple[type, type]:
    """The library's SQLite recorder and pool, adapted (built on first use: see above)."""
    from eventsourcing.persistence import InterfaceError
    from eventsourcing.sqlite import (
        SQLiteApplicationRecorder,
        SQLiteConnection,
        SQLiteConnectionPool,
    )

    class _SQLiteRecorder(SQLiteApplicationRecorder):  # type: ignore[misc]
        def create_table(self) -> None:
            """The library's, but in a transaction that takes the write lock up front: a
            deferred one that reads the schema and then writes cannot wait for a busy database
            (SQLite refuses the upgrade at once: "database is locked") when many processes
            open it."""
            with self.datastore.get_connection(commit=True) as conn:
                c = conn.cursor().sqlite_cursor
                c.execute("BEGIN IMMEDIATE")
                try:
                    for statement in self.create_table_statements:
                        c.execute(statement)
                except BaseException:
                    conn.rollback()
                    raise
                conn.commit()

        def construct_create_table_statements(self) -> list[str]:
            return [
                *super().construct_create_table_statements(),
                "CREATE TABLE IF NOT EXISTS ledger_artifacts ("
                "sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL)",
                "CREATE TABLE IF NOT EXISTS ledger_runs ("
                "run_id TEXT PRIMARY KEY, started_at TEXT, repo TEXT, head TEXT, base TEXT, "
                "head_ref TEXT, base_ref TEXT, length INTEGER NOT NULL, tip TEXT NOT NULL)",
                "CREATE TABLE IF NOT EXISTS ledger_meta (key TEXT PRIMARY KEY, value TEXT)",
                "CREATE TABLE IF NOT EXISTS ledger_leases ("
                "run_id TEXT PRIMARY KEY, holder TEXT NOT NULL, expires REAL NOT NULL)",
                *INDEX_TABLES,
                f"INSERT OR IGNORE INTO ledger_meta (key, value) VALUES ('format', '{FORMAT}')",
                "INSERT OR IGNORE INTO ledger_meta (key, value) "
                "VALUES ('ledger_id', lower(hex(randomblob(16))))",
            ]

    class _SQLitePool(SQLiteConnectionPool):  # type: ignore[misc]
        """The library's pool, but with a real statement cache: eventsourcing 9.5 connects
        with `cached_statements=True`, a cache of ONE statement, so every execute re-prepared
        its SQL (~25 us each, most of an append's CPU)."""

        def _create_connection(self) -> Any:
            try:
                c = sqlite3.connect(
                    database=self.db_name,
                    uri=True,
                    check_same_thread=False,
                    isolation_level=None,
                    cached_statements=128,
                    timeout=self.lock_timeout or 5,
                )
            except (sqlite3.Error, TypeError) as e:
                raise InterfaceError(e) from e
            if not self.is_sqlite_memory_mode and not self.is_journal_mode_wal:
                mode = c.execute("PRAGMA journal_mode;").fetchone()[0]
                if str(mode).lower() != "wal":
                    c.execute("PRAGMA journal_mode=WAL;")
                    self.journal_mode_was_changed_to_wal = True
                self.is_journal_mode_wal = True
            c.row_factory = sqlite3.Row
            return SQLiteConnection(sqlite_conn=c, max_age=self.max_age)

    return _SQLiteRecorder, _SQLitePool


def sqlite_datastore(db_name: str, **kwargs: Any) -> Any:
    from eventsourcing.sqlite import SQLiteDatastore

    datastore = SQLiteDatastore(db_name, originator_id_type="text", **kwargs)
    datastore.pool.close()  # never used: no connection is opened before the first request
    datastore.pool = _sqlite_classes()[1](db_name=db_name, **kwargs)
    return datastore


def sqlite_recorder(datastore: Any) -> Any:
    return _sqlite_classes()[0](datastore, events_table_name=EVENTS_TABLE)


_DBAPI_ERRORS = (
    "InterfaceError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "DatabaseError",
)


def es_error(name: str) -> type[Exception]:
    """An eventsourcing exception class, for `except` clauses of the write path (evaluated
    only when something is raised there, after the library is loaded)."""
    from eventsourcing import persistence

    error: type[Exception] = getattr(persistence, name)
    return error


def library_error(error: Exception, dbapi: Any) -> Exception:
    """The eventsourcing exception the library's datastore raises for a driver's `error`
    (`dbapi`: the sqlite3 or psycopg2 module), so a direct read fails as a pooled one did."""
    from eventsourcing import persistence

    for name in _DBAPI_ERRORS:
        if isinstance(error, getattr(dbapi, name)):
            mapped: Exception = getattr(persistence, name)(str(error))
            return mapped
    return persistence.PersistenceError(str(error))


def pg_recorder_class() -> type:
    from eventsourcing.postgres import PostgresApplicationRecorder

    class _PostgresRecorder(PostgresApplicationRecorder):  # type: ignore[misc]
        def __init__(self, datastore: Any, **kwargs: Any) -> None:
            super().__init__(datastore, **kwargs)
            from psycopg.sql import SQL

            self.sql_create_statements.extend(
                [
                    SQL(
                        "CREATE TABLE IF NOT EXISTS ledger_artifacts (sha256 text PRIMARY KEY, "
                        "size bigint NOT NULL, data bytea NOT NULL)"
                    ).format(),
                    SQL(
                        "CREATE TABLE IF NOT EXISTS ledger_runs (run_id text PRIMARY KEY, "
                        "started_at text, repo text, head text, base text, head_ref text, "
                        "base_ref text, length bigint NOT NULL, tip text NOT NULL)"
                    ).format(),
                    SQL(
                        "CREATE TABLE IF NOT EXISTS ledger_meta (key text PRIMARY KEY, value text)"
                    ).format(),
                    SQL(
                        "CREATE TABLE IF NOT EXISTS ledger_leases (run_id text PRIMARY KEY, "
                        "holder text NOT NULL, expires double precision NOT NULL)"
                    ).format(),
                    SQL(
                        "INSERT INTO ledger_meta (key, value) VALUES ('format', '"
                        + FORMAT
                        + "') ON CONFLICT DO NOTHING"
                    ).format(),
                    SQL(
                        "INSERT INTO ledger_meta (key, value) VALUES ('ledger_id', "
                        "md5(random()::text || clock_timestamp()::text)) ON CONFLICT DO NOTHING"
                    ).format(),
                ]
            )

        def _create_table(self, curs: Any) -> None:
            # Creators serialise on an advisory lock: concurrent `CREATE TABLE IF NOT EXISTS`
            # from several processes otherwise fails ("tuple concurrently updated").
            curs.execute("SELECT pg_advisory_xact_lock(7239016482731)", prepare=False)
            super()._create_table(curs)
            # The ledger's indexes only when missing: `CREATE INDEX IF NOT EXISTS` locks its
            # table before it looks, and would deadlock with appends (row lock on the run
            # index, then the events table lock) while the library's DDL holds the latter.
            curs.execute("SELECT to_regclass('ledger_index_run') IS NULL AS missing", prepare=False)
            row = curs.fetchone()
            if row is None or (row["missing"] if isinstance(row, dict) else row[0]):
                for statement in INDEX_TABLES:
                    curs.execute(statement, prepare=False)

    return _PostgresRecorder
