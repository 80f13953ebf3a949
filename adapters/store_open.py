"""Opening an event store by URL (`sqlite:///path`, `postgresql://...`): a SQLite file is
checked before anything is created or chmod-ed (never a device, a directory or a foreign
database), a PostgreSQL server is reached with the library's pool.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

from release_ledger.adapters.event_store import EventStore
from release_ledger.adapters.store_db import Database
from release_ledger.adapters.store_dialects import (
    DEFAULT_SQLITE_PATH,
    EVENTS_TABLE,
    FORMAT,
    LOCK_WAIT_S,
    pg_recorder_class,
    sqlite_datastore,
    sqlite_recorder,
)
from release_ledger.domain.errors import BadInput
from release_ledger.domain.text import masked

# --- opening by URL -------------------------------------------------------------------------


def default_url() -> str:
    return f"sqlite:///{DEFAULT_SQLITE_PATH}"


def sqlite_path(url: str) -> Path:
    """`sqlite:///` followed by the path: `sqlite:///.ledger/ledger.db` is relative to the
    current directory, `sqlite:////var/ledger.db` (that is, f"sqlite:///{abs_path}") absolute."""
    if not url.startswith("sqlite:///"):
        raise BadInput(f"malformed ledger URL {masked(url)!r}: expected sqlite:///PATH")
    path = unquote(url[len("sqlite:///") :])
    if not path or path.endswith("/") or "?" in path or "\x00" in path:
        raise BadInput(f"malformed ledger URL {masked(url)!r}: expected sqlite:///PATH/TO/FILE.db")
    return Path(path)


MEMORY_URL = "memory:"  # a private in-memory ledger (tests, experiments): gone when closed
MEMORY_DESCRIPTION = "memory"


def open_store(url: str | None, *, create: bool = True) -> EventStore:
    """Open the ledger named by a URL; BadInput (exit 2) for anything wrong with it."""
    url = url or default_url()
    if url == MEMORY_URL:
        return _open_sqlite_memory(MEMORY_DESCRIPTION, name=f"ledger-{uuid.uuid4().hex}")
    scheme = urlparse(url).scheme
    if scheme == "sqlite":
        return _open_sqlite(sqlite_path(url), create=create)
    if scheme in ("postgresql", "postgres"):
        return _open_postgres(url)
    raise BadInput(f"malformed ledger URL {masked(url)!r}: use sqlite:///PATH or postgresql://...")


def _pathname2url(path: str) -> str:
    """`urllib.request.pathname2url` without importing urllib.request at start-up (it pulls in
    http.client and email, ~8 ms): on POSIX before Python 3.13 it is exactly `quote`."""
    if os.name == "nt" or sys.version_info >= (3, 13):
        from urllib.request import pathname2url

        return pathname2url(path)
    return quote(path)


def _sqlite_file_state(path: Path) -> str:
    """`absent` (no file, an empty one, no tables), `complete` (a release-ledger database
    with every table and index made: opened without DDL) or `partial`; BadInput when
    foreign."""
    if not path.exists():
        return "absent"
    if path.is_dir():
        raise BadInput(f"ledger path {path} is a directory, not a database file")
    if not path.is_file():  # a device, a FIFO, a socket: never opened, created or chmod-ed
        raise BadInput(f"ledger path {path} is not a regular file")
    try:
        with path.open("rb") as f:
            head = f.read(16)
    except OSError as error:
        raise BadInput(f"cannot read ledger file {path}: {error.strerror}") from error
    if not head:
        return "absent"  # an empty file: SQLite treats it as a new database
    if head != b"SQLite format 3\x00":
        raise BadInput(f"{path} is not a SQLite database (not a release-ledger file)")
    try:
        # Without a -wal file nobody has the database open and its content is all in the main
        # file: read it as immutable, so that checking a file (even a foreign one) never
        # leaves -wal/-shm files behind. With one, those files exist already.
        wal = path.with_name(path.name + "-wal").exists()
        where = _pathname2url(str(path.absolute()))
        uri = f"file:{where}?mode=ro" + ("" if wal else "&immutable=1")
        conn = sqlite3.connect(uri, uri=True, timeout=5)
        try:
            names = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
            tables = {name for kind, name in names if kind == "table"}
            if not tables:
                return "absent"
            if "ledger_meta" not in tables:
                raise BadInput(f"{path} is a foreign SQLite database, not a release-ledger file")
            row = conn.execute("SELECT value FROM ledger_meta WHERE key='format'").fetchone()
            # The tables are made in one transaction, the index of the run index last; the
            # ledger's id is written with them.
            made = ("index", "ledger_index_run") in {(kind, name) for kind, name in names}
            if made:
                made = bool(
                    conn.execute("SELECT 1 FROM ledger_meta WHERE key='ledger_id'").fetchone()
                )
        finally:
            conn.close()
    except sqlite3.DatabaseError as error:
        raise BadInput(f"cannot read ledger file {path}: {error}") from error
    if not row or row[0] != FORMAT:
        raise BadInput(f"{path} is a release-ledger file of an unknown format {row and row[0]!r}")
    return "complete" if made else "partial"


def _open_sqlite(path: Path, *, create: bool) -> EventStore:
    state = _sqlite_file_state(path)
    exists = state != "absent"
    if not exists and not create:
        return _open_sqlite_memory(f"{path} (not created yet)")
    if not exists:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                pass  # an empty file of the user's: SQLite makes it a database, mode kept
            else:
                os.fchmod(fd, stat.S_IRUSR | stat.S_IWUSR)
                os.close(fd)
        except OSError as error:
            raise BadInput(f"cannot create ledger file {path}: {error.strerror}") from error
    elif not os.access(path, os.R_OK | os.W_OK):
        if not create and os.access(path, os.R_OK):
            pass
        else:
            raise BadInput(f"cannot open ledger file {path}: permission denied")

    def connect() -> tuple[Any, Any]:
        datastore = sqlite_datastore(str(path), lock_timeout=LOCK_WAIT_S, pool_size=4)
        return sqlite_recorder(datastore), datastore

    if state == "complete" and not _writable(path):
        # A read-only ledger (a read-only mount, another user's file): every reading command
        # answers through a read-only connection; anything that writes is refused in one line.
        wal = path.with_name(path.name + "-wal").exists()
        where = _pathname2url(str(path.absolute()))
        uri = f"file:{where}?mode=ro" + ("" if wal else "&immutable=1")

        def refuse() -> tuple[Any, Any]:
            raise BadInput(f"the ledger {path} is read-only: this command writes to it")

        try:
            reader = sqlite3.connect(
                uri, uri=True, timeout=LOCK_WAIT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise BadInput(f"cannot open ledger file {path}: {error}") from error
        store = EventStore(
            Database(dialect="sqlite", description=str(path), reader=reader, connect=refuse)
        )
        store.read_only = True
        return store
    if state == "complete":
        # Every table is there: no DDL (and no write lock) to open it. Reads go through one
        # plain connection until the first write builds the library's datastore.
        try:
            reader = sqlite3.connect(
                str(path), timeout=LOCK_WAIT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise BadInput(f"cannot open ledger file {path}: {error}") from error
        return EventStore(
            Database(dialect="sqlite", description=str(path), reader=reader, connect=connect)
        )
    from eventsourcing.persistence import PersistenceError

    recorder, datastore = connect()
    try:
        recorder.create_table()
        with datastore.transaction(commit=False) as c:
            c.execute("PRAGMA busy_timeout = 30000")
    except PersistenceError as error:
        raise BadInput(f"cannot open ledger file {path}: {error}") from error
    return EventStore(
        Database(recorder, dialect="sqlite", description=str(path), datastore=datastore)
    )


def _writable(path: Path) -> bool:
    """Whether this process may write the ledger file and create its -wal/-shm files."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


def _open_sqlite_memory(description: str, name: str = "ledger-empty") -> EventStore:
    """A SQLite database in this process's memory: `ledger-empty` stands for a ledger not
    created yet (read, never written); `memory:` gets one of its own, the store port's
    in-memory fake (it lives while the store is open)."""
    datastore = sqlite_datastore(f"file:{name}?mode=memory&cache=shared")
    recorder = sqlite_recorder(datastore)
    recorder.create_table()
    return EventStore(
        Database(recorder, dialect="sqlite", description=description, datastore=datastore)
    )


def _open_postgres(url: str) -> EventStore:
    parsed = urlparse(url)
    dbname = unquote(parsed.path.lstrip("/"))
    if not parsed.hostname or not dbname:
        raise BadInput(
            f"malformed ledger URL {masked(url)!r}: expected postgresql://user:pass@host:port/db"
        )
    try:
        port = parsed.port or 5432
    except ValueError as error:
        raise BadInput(f"malformed ledger URL {masked(url)!r}: bad port") from error
    where = f"{parsed.hostname}:{port}/{dbname}"
    user, password = unquote(parsed.username or ""), unquote(parsed.password or "")
    try:
        from release_ledger.adapters import pg_reader

        # A direct connection first: the pool's own error hides the reason (refused, auth,
        # ...). It stays open as the reader: a reading command needs no pool (nor psycopg 3).
        reader = pg_reader.connect(
            dbname=dbname,
            host=parsed.hostname,
            port=port,
            user=user,
            password=password,
            connect_timeout=5,
        )
    except Exception as error:  # every failure to connect is one message
        reason = " ".join(str(error).split()) or type(error).__name__
        raise BadInput(f"cannot reach PostgreSQL at {where}: {reason}") from error
    try:
        # A ledger whose tables all exist (the last one made is the index's) is opened
        # without DDL: no schema locks taken by readers and writers that only open it.
        made = reader.execute("SELECT to_regclass('ledger_index_run') IS NOT NULL").fetchone()
        exists = bool(made and made[0])
    except Exception as error:
        reader.close()
        reason = " ".join(str(error).split()) or type(error).__name__
        raise BadInput(f"cannot reach PostgreSQL at {where}: {reason}") from error

    def connect() -> tuple[Any, Any]:
        from eventsourcing.postgres import PostgresDatastore

        datastore = PostgresDatastore(
            dbname=dbname,
            host=parsed.hostname or "",
            port=port,
            user=user,
            password=password,
            connect_timeout=5,
            pool_size=2,
            max_overflow=4,
            pool_open_timeout=5,
            lock_timeout=LOCK_WAIT_S,
            originator_id_type="text",
        )
        return pg_recorder_class()(datastore, events_table_name=EVENTS_TABLE), datastore

    store = EventStore(
        Database(dialect="postgresql", description=where, reader=reader, connect=connect), url=url
    )
    if not exists:
        try:
            store.recorder.create_table()
        except Exception as error:
            store.close()
            reason = " ".join(str(error).split()) or type(error).__name__
            raise BadInput(f"cannot reach PostgreSQL at {where}: {reason}") from error
    return store
