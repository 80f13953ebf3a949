"""The event store's database: the connections every concern of the store (streams, artifacts,
leases, indexes, readings) reads and writes through, for SQLite and PostgreSQL alike.

A plain connection (`reader`) answers the opening thread's reads until the first write,
subscription or notification read builds the `eventsourcing` library's recorder and datastore
(its pool); from then on everything goes through them. Writes take the database's write lock
up front and turn a lock, a full disk or a read-only file into one clear error.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from release_ledger.adapters.store_dialects import LOCK_WAIT_S, es_error, library_error
from release_ledger.adapters.store_errors import StoreBusy
from release_ledger.domain.errors import BadInput


class Database:
    """One ledger database: its dialect, its connections and its transactions."""

    def __init__(
        self,
        recorder: Any = None,
        *,
        dialect: str,
        description: str,
        datastore: Any = None,
        reader: Any = None,
        connect: Callable[[], tuple[Any, Any]] | None = None,
    ) -> None:
        """Over a built `recorder` and `datastore`, or lazily: `reader` (one plain sqlite3 or
        psycopg2 connection, `adapters.pg_reader`, in autocommit mode) answers the opening
        thread's reads until the first write, subscription or notification read, when
        `connect()` builds the library's recorder and datastore (its pool)."""
        self._recorder = recorder
        self._ds = datastore
        self._connect = connect
        self._reader = reader
        self._reader_thread = threading.get_ident()
        self._building = threading.Lock()
        self.dialect = dialect
        self.description = description
        self.read_only = False  # a read-only SQLite ledger: derived data is not kept
        self.ph = "?" if dialect == "sqlite" else "%s"  # the driver's parameter mark

    # -- the library's recorder, built on first need --

    @property
    def recorder(self) -> Any:
        if self._recorder is None:
            self._build()
        return self._recorder

    @property
    def datastore(self) -> Any:
        if self._ds is None:
            self._build()
        return self._ds

    def _build(self) -> None:
        with self._building:
            if self._ds is None:
                assert self._connect is not None, "an EventStore needs a datastore"
                self._recorder, self._ds = self._connect()

    # -- reading --

    def transaction(self, commit: bool) -> Any:
        return self.datastore.transaction(commit=commit)

    def direct_reader(self) -> Any:
        """The plain connection, while it still answers this thread (no datastore built)."""
        reader = self._reader
        if reader is not None and self._ds is None and threading.get_ident() == self._reader_thread:
            return reader
        return None

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        reader = self.direct_reader()
        if reader is not None:
            return self._read_direct(reader, sql, params)
        with self.transaction(commit=False) as c:
            if self.dialect == "sqlite":
                c.sqlite_cursor.row_factory = None  # plain tuples, not sqlite3.Row
                c.execute(sql, tuple(params))
                return list(c.fetchall())
            from psycopg.rows import tuple_row

            c.row_factory = tuple_row  # plain tuples, not the datastore's dicts
            c.execute(sql, tuple(params))
            return list(c.fetchall())

    def _read_direct(self, reader: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """One statement on the plain connection (autocommit: its own snapshot, as the
        datastore's BEGIN ... ROLLBACK around it gave); errors as the datastore raises them."""
        if self.dialect == "sqlite":
            try:
                return list(reader.execute(sql, tuple(params)).fetchall())
            except sqlite3.Error as error:
                raise library_error(error, sqlite3) from error
        from release_ledger.adapters.pg_reader import dbapi

        try:
            return list(reader.execute(sql, tuple(params)).fetchall())
        except dbapi.Error as error:
            raise library_error(error, dbapi) from error

    def query_in(
        self, sql: str, keys: Iterable[str], before: Sequence[Any] = ()
    ) -> list[tuple[Any, ...]]:
        """`sql`, whose `{marks}` stands for the parameters of an IN list, for the distinct
        `keys` 500 at a time (one indexed lookup each), after the parameters `before`."""
        wanted = sorted(set(keys))
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ", ".join([self.ph] * len(chunk))
            rows += self.query(sql.replace("{marks}", marks), [*before, *chunk])
        return rows

    def ledger_id(self) -> str:
        """This ledger's identity (random, made with the ledger): views know whose they are."""
        rows = self.query("SELECT value FROM ledger_meta WHERE key = 'ledger_id'")
        return str(rows[0][0]) if rows else ""

    # -- writing --

    @contextlib.contextmanager
    def write(self) -> Iterator[Any]:
        """A writing transaction. SQLite's begins IMMEDIATE: it takes the database's write lock
        (waiting up to the busy timeout) before anything is read, so the tip read in it
        cannot be stale."""
        try:
            if self.dialect != "sqlite":
                with self.transaction(commit=True) as c:
                    # Row and table locks are waited for, but not forever.
                    c.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT_S}s'")
                    yield c
                return
            with self.datastore.get_connection(commit=True) as conn:
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

    def write_briefly(self, statements: Sequence[str], row: Sequence[Any]) -> None:
        """Run `statements` (the last one with `row`) in one short transaction that gives up
        after a fraction of a second on a lock: for derived data a reader may keep."""

        def run(execute: Callable[..., Any]) -> None:
            for statement in statements[:-1]:
                execute(statement)
            execute(statements[-1], tuple(row))

        if self.read_only:
            raise BadInput(f"the ledger {self.description} is read-only")
        reader = self.direct_reader()
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
            with self.transaction(commit=True) as c:
                if self.dialect != "sqlite":
                    c.execute("SET LOCAL lock_timeout = '200ms'")
                run(c.execute)

    def execute_raw(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Direct write, bypassing the chain: only for tamper tests and repair tools."""
        with self.transaction(commit=True) as c:
            c.execute(sql, tuple(params))

    def close(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
        if self._ds is not None:
            with contextlib.suppress(Exception):
                self._ds.close()
