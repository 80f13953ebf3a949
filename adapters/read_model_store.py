"""The read-model file: SQLite tables written with `sqlite-utils`, queryable by any SQLite tool.

Rows are replaced per run in one transaction together with the tracking position (the last
ledger notification reflected), so a crash between batches loses nothing and repeating a
catch-up changes nothing. The schema comes from the caller (`projections.read_models.TABLES`)
so this adapter knows tables, not events.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import sqlite_utils

from release_ledger.adapters.read_model_totals import Changes, SummarySpec, is_summary
from release_ledger.domain.errors import BadInput

TRACKING = "tracking"
TRACKING_NAME = "views"
META = "views_meta"  # which ledger the views are of (outside the digest)
# Assessments of stored reports by content key (`domain.run_state.content_key`), kept so a
# rebuild or catch-up need not read every JUnit report again; outside the digest, never
# dropped by a reset (a key is the same for any ledger), and never used by `--check`'s rebuild.
ASSESSMENTS = "assessments"
_ASSESSMENTS_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {ASSESSMENTS} (key TEXT PRIMARY KEY, "
    "reader_version INTEGER NOT NULL, report_hash TEXT NOT NULL, data TEXT NOT NULL)"
)
_ASSESSMENTS_INDEX = (
    f"CREATE INDEX IF NOT EXISTS idx_{ASSESSMENTS}_report ON {ASSESSMENTS} (report_hash)"
)


class TableSpec(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def columns(self) -> tuple[tuple[str, type], ...]: ...

    @property
    def pk(self) -> tuple[str, ...]: ...

    @property
    def indexes(self) -> tuple[tuple[str, ...], ...]: ...

    @property
    def column_names(self) -> tuple[str, ...]: ...


def _in_key_order(rows: Iterable[tuple[Any, ...]], keys: Sequence[int]) -> list[tuple[Any, ...]]:
    """Rows sorted by their primary key (`keys`: its columns' positions; never null)."""
    return sorted(rows, key=lambda row: tuple(row[i] for i in keys))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class ReadModelStore:
    """One views file. Writes happen only inside `transaction()` (BEGIN IMMEDIATE).
    `tables` are the run tables (rows replaced per run) and the summaries kept from them
    (`adapters/read_model_totals.py`)."""

    def __init__(self, path: Path, tables: Sequence[TableSpec], *, timeout: float = 60) -> None:
        self.path = path
        self.tables = tuple(tables)
        self.run_tables = tuple(t for t in self.tables if not is_summary(t))
        self.summaries: tuple[SummarySpec, ...] = tuple(
            t for t in self.tables if is_summary(t)  # type: ignore[misc]
        )
        self._pending = Changes(self.summaries)  # a rebuild's totals, written at its end
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # private, as the ledger
            self.conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
            self.db = sqlite_utils.Database(self.conn)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
        except (OSError, sqlite3.DatabaseError) as error:
            raise BadInput(f"cannot open views file {path}: {error}") from error
        self._insert_sql = {
            t.name: f"INSERT INTO {_quote(t.name)} ({', '.join(map(_quote, t.column_names))}) "
            f"VALUES ({', '.join('?' * len(t.columns))})"
            for t in self.tables
        }
        names = {t.name: t.column_names for t in self.tables}
        self._keys = {t.name: tuple(names[t.name].index(c) for c in t.pk) for t in self.tables}
        self._keys[TRACKING] = (0,)
        self._select_run_sql = {
            t.name: f"SELECT {', '.join(map(_quote, t.column_names))} FROM {_quote(t.name)} "
            "WHERE run_id = ?"
            for t in self.run_tables
        }
        self._delete_sql = {
            t.name: f"DELETE FROM {_quote(t.name)} WHERE "
            + " AND ".join(f"{_quote(c)} = ?" for c in t.pk)
            for t in self.tables
        }
        self.schema_version = _schema_version(self.tables)
        try:
            self.conn.execute(_ASSESSMENTS_TABLE)
            self.conn.execute(_ASSESSMENTS_INDEX)
        except sqlite3.DatabaseError as error:
            raise BadInput(f"cannot open views file {path}: {error}") from error
        if not self._current():
            with self.transaction():
                if not self._current():  # another process may have just made it current
                    self.reset()
                    self._create_indexes()

    # -- schema --

    def has_schema(self) -> bool:
        names = set(self.db.table_names())
        return TRACKING in names and all(t.name in names for t in self.tables)

    def _current(self) -> bool:
        """Tables exist in this very schema (an older layout is dropped and caught up anew)."""
        version = int(self.conn.execute("PRAGMA user_version").fetchone()[0])
        return version == self.schema_version and self.has_schema()

    def _create(self, *, indexes: bool) -> None:
        self.db[TRACKING].create(  # type: ignore[union-attr]
            {"name": str, "notification_id": int},
            pk="name",
            not_null={"notification_id"},
            if_not_exists=True,
        )
        for t in self.tables:
            self.db[t.name].create(  # type: ignore[union-attr]
                dict(t.columns),
                pk=t.pk[0] if len(t.pk) == 1 else t.pk,
                not_null=set(t.pk),
                column_order=list(t.column_names),
                if_not_exists=True,
            )
        if indexes:
            self._create_indexes()

    def _create_indexes(self) -> None:
        for t in self.tables:
            for columns in t.indexes:
                self.db[t.name].create_index(  # type: ignore[union-attr]
                    list(columns), index_name=f"idx_{t.name}_{'_'.join(columns)}",
                    if_not_exists=True,
                )  # fmt: skip

    # -- writing --

    @contextlib.contextmanager
    def transaction(self) -> Iterator[ReadModelStore]:
        """One write transaction, taken up front so concurrent catch-ups serialise."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def ledger_id(self) -> str | None:
        """The identity of the ledger these views were built from (None: unknown)."""
        try:
            row = self.conn.execute(f"SELECT value FROM {META} WHERE key = 'ledger_id'").fetchone()
        except sqlite3.OperationalError:
            return None
        return str(row[0]) if row else None

    def set_ledger_id(self, ledger_id: str) -> None:
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS {META} (key TEXT PRIMARY KEY, value TEXT)")
        self.conn.execute(
            f"INSERT INTO {META} (key, value) VALUES ('ledger_id', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (ledger_id,),
        )

    def position(self) -> int:
        row = self.conn.execute(
            f"SELECT notification_id FROM {TRACKING} WHERE name = ?", (TRACKING_NAME,)
        ).fetchone()
        return int(row[0]) if row else 0

    def set_position(self, notification_id: int) -> None:
        self.conn.execute(
            f"INSERT INTO {TRACKING} (name, notification_id) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET notification_id = excluded.notification_id",
            (TRACKING_NAME, notification_id),
        )

    def replace_runs(self, runs: Mapping[str, Mapping[str, Sequence[tuple[Any, ...]]]]) -> None:
        """Make these runs' rows exactly the given ones (inside a transaction), and the
        summaries' totals follow. Only rows that changed are written: a new event rarely
        changes more than a few rows of its run, and rewriting thousands of indexed rows would
        dominate the catch-up. They are written in primary-key order: a set's order is its
        hashes', and 126,000 history rows written in it took twice as long."""
        changes = Changes(self.summaries)
        for t in self.run_tables:
            keys = self._keys[t.name]
            for run_id, tables in runs.items():
                new = set(tables.get(t.name, ()))
                old = set(self.conn.execute(self._select_run_sql[t.name], (run_id,)).fetchall())
                gone = old - new
                if gone:
                    self.conn.executemany(
                        self._delete_sql[t.name],
                        sorted(tuple(row[i] for i in keys) for row in gone),
                    )
                    changes.add(t.name, gone, -1)
                added = new - old
                if added:
                    self.conn.executemany(self._insert_sql[t.name], _in_key_order(added, keys))
                    changes.add(t.name, added)
        for summary in self.summaries:
            self._apply(summary, changes)

    def _apply(self, summary: SummarySpec, changes: Changes) -> None:
        """Add a summary's changes to its rows; rows whose totals all reach zero go."""
        table, totals = _quote(summary.name), summary.totals
        columns = ", ".join(map(_quote, (*summary.key, *totals)))
        marks = ", ".join("?" * (len(summary.key) + len(totals)))
        keyed = " AND ".join(f"{_quote(c)} = ?" for c in summary.key)
        self.conn.executemany(
            f"INSERT INTO {table} AS s ({columns}) VALUES ({marks}) "
            f"ON CONFLICT ({', '.join(map(_quote, summary.key))}) DO UPDATE SET "
            + ", ".join(f"{_quote(c)} = s.{_quote(c)} + excluded.{_quote(c)}" for c in totals),
            changes.rows(summary, nonzero=True),
        )
        zero = " AND ".join(f"{_quote(c)} = 0" for c in totals)
        self.conn.executemany(
            f"DELETE FROM {table} WHERE {keyed} AND {zero}", changes.keys(summary)
        )

    def insert_runs(self, runs: Mapping[str, Mapping[str, Sequence[tuple[Any, ...]]]]) -> None:
        """The rows of new runs (a rebuild): one `executemany` per table for all of them;
        the summaries' totals are gathered and written by `finish_rebuild`."""
        for t in self.run_tables:
            name = t.name
            rows = list(itertools.chain.from_iterable(r.get(name, ()) for r in runs.values()))
            self.conn.executemany(self._insert_sql[name], rows)
            self._pending.add(name, rows)

    def reset(self) -> None:
        """Drop every table and create them empty, without indexes (inside a transaction);
        `finish_rebuild` adds the indexes once the rows are in, which is faster."""
        for name in [TRACKING, META, *(t.name for t in self.tables)]:
            self.conn.execute(f"DROP TABLE IF EXISTS {_quote(name)}")
        self._pending.clear()
        self._create(indexes=False)
        self.conn.execute(f"PRAGMA user_version = {self.schema_version}")

    def keep_assessments(self, reader_version: int, kept: Sequence[tuple[str, str, str]]) -> None:
        """(key, report hash, assessment JSON) of assessments made (inside a transaction)."""
        if kept:
            self.conn.executemany(
                f"INSERT OR IGNORE INTO {ASSESSMENTS} (key, reader_version, report_hash, data) "
                "VALUES (?, ?, ?, ?)",
                [(key, reader_version, report, data) for key, report, data in kept],
            )

    def known_assessments(
        self, reader_version: int, report_hashes: Iterable[str]
    ) -> dict[str, str]:
        return _known(self.conn, reader_version, report_hashes)

    def copy_assessments(self, other: Path, reader_version: int) -> None:
        """Add another views file's assessments of this reader version (outside any
        transaction); a file that cannot be read adds nothing."""
        try:
            self.conn.execute("ATTACH DATABASE ? AS prior", (f"file:{quote(str(other))}?mode=ro",))
        except sqlite3.DatabaseError:
            return
        try:
            self.conn.execute(
                f"INSERT OR IGNORE INTO {ASSESSMENTS} SELECT key, reader_version, report_hash, "
                f"data FROM prior.{ASSESSMENTS} WHERE reader_version = ?",
                (reader_version,),
            )
        except sqlite3.DatabaseError:
            pass
        finally:
            self.conn.execute("DETACH DATABASE prior")

    def finish_rebuild(self) -> None:
        for summary in self.summaries:
            rows = self._pending.rows(summary, nonzero=True)
            self.conn.executemany(self._insert_sql[summary.name], rows)
        self._pending.clear()
        self._create_indexes()

    def as_scratch(self) -> None:
        """A file filled once and put in place only after success (a rebuild, a check's
        rebuild): no rollback journal, no fsync, a large page cache for the index sorts. A
        crash leaves only a scratch file nobody reads; the next open makes it WAL again."""
        for pragma in (
            "journal_mode=OFF",
            "synchronous=OFF",
            "cache_size=-131072",  # KiB: 128 MiB, the index builds sort in memory
            "temp_store=MEMORY",
        ):
            self.conn.execute(f"PRAGMA {pragma}")

    # -- reading --

    def table_names(self) -> list[str]:
        return sorted([TRACKING, *(t.name for t in self.tables)])

    def _order(self, name: str) -> tuple[list[str], str]:
        if name == TRACKING:
            return ["name", "notification_id"], "name"
        spec = next(t for t in self.tables if t.name == name)
        return list(spec.column_names), ", ".join(map(_quote, spec.pk))

    def rows(self, name: str) -> Iterator[tuple[Any, ...]]:
        """A table's rows in primary-key order (a total order: the key is unique)."""
        columns, order = self._order(name)
        select = ", ".join(map(_quote, columns))
        yield from self.conn.execute(f"SELECT {select} FROM {_quote(name)} ORDER BY {order}")

    def select(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A read-only query written once for both stores: tables as `{name}`, parameters
        as `?` (the PostgreSQL store's `select` takes the same text)."""
        names = {t.name: _quote(t.name) for t in self.tables}
        return list(self.conn.execute(sql.format(**names), tuple(params)))

    def digest(self) -> str:
        """sha256 over every table's name, columns and rows in key order."""
        return digest(self)

    def counts(self) -> dict[str, int]:
        return {
            name: int(self.conn.execute(f"SELECT count(*) FROM {_quote(name)}").fetchone()[0])
            for name in self.table_names()
        }

    def first_difference(self, other: ReadModelStore) -> str | None:
        """The first table and row where two views files differ, in one sentence; or None."""
        return first_difference(self, other)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def _known(
    conn: sqlite3.Connection, reader_version: int, report_hashes: Iterable[str]
) -> dict[str, str]:
    """Kept assessments (key -> JSON) of these reports under this reader version."""
    wanted = sorted(set(report_hashes))
    found: dict[str, str] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        for key, data in conn.execute(
            f"SELECT key, data FROM {ASSESSMENTS} WHERE reader_version = ? "
            f"AND report_hash IN ({marks})",
            (reader_version, *chunk),
        ):
            found[str(key)] = str(data)
    return found


class AssessmentSource:
    """The kept assessments of an earlier views file, read-only (a rebuild's workers each
    open their own). Unusable files give nothing: every assessment is then made again."""

    def __init__(self, path: Path, ledger_id: str) -> None:
        self.conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=5)
            try:
                row = conn.execute(f"SELECT value FROM {META} WHERE key = 'ledger_id'").fetchone()
                conn.execute(f"SELECT key, data FROM {ASSESSMENTS} LIMIT 1").fetchall()
            except sqlite3.DatabaseError:
                conn.close()
                return
            if row is None or str(row[0]) != ledger_id:
                conn.close()  # another ledger's views: what they kept is not ours to trust
                return
            self.conn = conn
        except sqlite3.DatabaseError:
            self.conn = None

    @property
    def usable(self) -> bool:
        return self.conn is not None

    def known(self, reader_version: int, report_hashes: Iterable[str]) -> dict[str, str]:
        if self.conn is None:
            return {}
        try:
            return _known(self.conn, reader_version, report_hashes)
        except sqlite3.DatabaseError:
            return {}

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None


def _schema_version(tables: Sequence[TableSpec]) -> int:
    """A fingerprint of the layout, kept in SQLite's `user_version` (not in any table)."""
    layout = [
        [t.name, [[c, kind.__name__] for c, kind in t.columns], list(t.pk), list(t.indexes)]
        for t in tables
    ]
    return int(hashlib.sha256(json.dumps(layout).encode()).hexdigest()[:7], 16)


def digest(store: Any) -> str:
    """sha256 over a read-model store's (SQLite or PostgreSQL) every table's name, columns
    and rows in key order: equal digests, equal views, wherever they live."""
    h = hashlib.sha256()
    encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(row, ensure_ascii=False)
    for name in store.table_names():
        columns, _ = store._order(name)
        h.update(json.dumps([name, columns]).encode() + b"\n")
        for row in store.rows(name):
            h.update(encode(list(row)).encode() + b"\n")
    return h.hexdigest()


def first_difference(store: Any, other: Any) -> str | None:
    """The first table and row where two read-model stores (SQLite or PostgreSQL) differ, in
    one sentence; or None. Both list their tables, order and keys, and stream rows alike."""
    for name in store.table_names():
        columns, _ = store._order(name)
        keys = store._keys[name]
        mine, theirs = store.rows(name), other.rows(name)
        a, b = next(mine, None), next(theirs, None)
        while a is not None or b is not None:
            if a == b:
                a, b = next(mine, None), next(theirs, None)
                continue
            return _describe(name, columns, keys, a, b)
    return None


def _describe(
    table: str,
    columns: list[str],
    keys: tuple[int, ...],
    a: tuple[Any, ...] | None,
    b: tuple[Any, ...] | None,
) -> str:
    """Rows arrive in key order from both sides, so the smaller key is the missing row."""

    def key(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(row[i] for i in keys)

    def named(row: tuple[Any, ...]) -> str:
        return ", ".join(f"{columns[i]}={row[i]!r}" for i in keys)

    if a is None or (b is not None and key(a) > key(b)):
        assert b is not None
        return f"table {table}: row ({named(b)}) only in the incremental views"
    if b is None or key(a) < key(b):
        return f"table {table}: row ({named(a)}) only in the rebuild"
    diffs = [
        f"{c}: rebuild {x!r}, incremental {y!r}"
        for c, x, y in zip(columns, a, b, strict=True)
        if x != y
    ]
    return f"table {table}: row ({named(a)}) differs: " + "; ".join(diffs)
