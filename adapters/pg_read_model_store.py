"""The read models of a PostgreSQL ledger: the same tables as the views file, in their own
schema of the ledger's database, so every runner and analyst queries one place.

The interface is `ReadModelStore`'s (transaction, position, replace_runs, insert_runs, reset,
digest, first_difference), so `ledger/views.py` catches up and rebuilds either. Catch-ups
serialise on an advisory lock taken in their transaction; the tracking position is written in
the same transaction as the rows. A rebuild fills a fresh schema and swaps it in atomically.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from release_ledger.adapters.read_model_store import (
    TRACKING,
    TRACKING_NAME,
    TableSpec,
    _schema_version,
    digest,
    first_difference,
)
from release_ledger.adapters.read_model_totals import Changes, SummarySpec, is_summary
from release_ledger.domain.errors import BadInput

_TYPES = {str: "text", int: "bigint", float: "double precision"}
META = "views_meta"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PostgresReadModelStore:
    """One schema of read models in the ledger's PostgreSQL database."""

    def __init__(self, url: str, schema: str, tables: Sequence[TableSpec]) -> None:
        import psycopg

        self.url = url
        self.schema = schema
        self.path = f"schema {schema}"  # what results name as where the views are
        self.tables = tuple(tables)
        self.run_tables = tuple(t for t in self.tables if not is_summary(t))
        self.summaries: tuple[SummarySpec, ...] = tuple(
            t for t in self.tables if is_summary(t)  # type: ignore[misc]
        )
        self._pending = Changes(self.summaries)  # a rebuild's totals, written at its end
        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
        except Exception as error:
            raise BadInput(f"cannot open the views schema {schema}: {error}") from error
        self.schema_version = _schema_version(self.tables)
        self._lock = zlib.crc32(f"views:{schema}".encode())
        self._keys = {t.name: tuple(t.column_names.index(c) for c in t.pk) for t in self.tables}
        self._keys[TRACKING] = (0,)
        self._in_transaction = False
        if not self._current():
            with self.transaction():
                if not self._current():
                    self.reset()
                    self._create_indexes()

    # -- plumbing --

    def _t(self, name: str) -> str:
        return f"{_q(self.schema)}.{_q(name)}"

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as c:
            c.execute(sql, tuple(params), prepare=False)
            return list(c.fetchall()) if c.description else []

    def _current(self) -> bool:
        rows = self._exec(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (self.schema, META),
        )
        if not rows:
            return False
        version = self._exec(f"SELECT value FROM {self._t(META)} WHERE key = 'schema_version'")
        return bool(version) and version[0][0] == str(self.schema_version)

    # -- schema --

    def _create(self) -> None:
        self._exec(f"CREATE SCHEMA IF NOT EXISTS {_q(self.schema)}")
        self._exec(
            f"CREATE TABLE IF NOT EXISTS {self._t(TRACKING)} (name text PRIMARY KEY, "
            "notification_id bigint NOT NULL)"
        )
        self._exec(f"CREATE TABLE IF NOT EXISTS {self._t(META)} (key text PRIMARY KEY, value text)")
        for t in self.tables:
            columns = ", ".join(
                f"{_q(c)} {_TYPES[kind]}" + (" NOT NULL" if c in t.pk else "")
                for c, kind in t.columns
            )
            pk = ", ".join(map(_q, t.pk))
            self._exec(
                f"CREATE TABLE IF NOT EXISTS {self._t(t.name)} ({columns}, PRIMARY KEY ({pk}))"
            )
        self._exec(
            f"INSERT INTO {self._t(META)} (key, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(self.schema_version),),
        )

    def _create_indexes(self) -> None:
        for t in self.tables:
            for columns in t.indexes:
                name = _q(f"idx_{t.name}_{'_'.join(columns)}")
                self._exec(
                    f"CREATE INDEX IF NOT EXISTS {name} ON {self._t(t.name)} "
                    f"({', '.join(map(_q, columns))})"
                )

    def has_schema(self) -> bool:
        return self._current()

    # -- writing --

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PostgresReadModelStore]:
        with self.conn.transaction():
            self._exec("SELECT pg_advisory_xact_lock(%s)", (self._lock,))
            yield self

    def ledger_id(self) -> str | None:
        try:
            rows = self._exec(f"SELECT value FROM {self._t(META)} WHERE key = 'ledger_id'")
        except Exception:
            return None
        return str(rows[0][0]) if rows else None

    def set_ledger_id(self, ledger_id: str) -> None:
        self._exec(
            f"INSERT INTO {self._t(META)} (key, value) VALUES ('ledger_id', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (ledger_id,),
        )

    def position(self) -> int:
        rows = self._exec(
            f"SELECT notification_id FROM {self._t(TRACKING)} WHERE name = %s", (TRACKING_NAME,)
        )
        return int(rows[0][0]) if rows else 0

    def set_position(self, notification_id: int) -> None:
        self._exec(
            f"INSERT INTO {self._t(TRACKING)} (name, notification_id) VALUES (%s, %s) "
            "ON CONFLICT (name) DO UPDATE SET notification_id = excluded.notification_id",
            (TRACKING_NAME, notification_id),
        )

    def _insert_sql(self, t: TableSpec) -> str:
        return (
            f"INSERT INTO {self._t(t.name)} ({', '.join(map(_q, t.column_names))}) "
            f"VALUES ({', '.join(['%s'] * len(t.columns))})"
        )

    def replace_runs(self, runs: Mapping[str, Mapping[str, Sequence[tuple[Any, ...]]]]) -> None:
        changes = Changes(self.summaries)
        for t in self.run_tables:
            keys = self._keys[t.name]
            select = (
                f"SELECT {', '.join(map(_q, t.column_names))} FROM {self._t(t.name)} "
                "WHERE run_id = %s"
            )
            delete = f"DELETE FROM {self._t(t.name)} WHERE " + " AND ".join(
                f"{_q(c)} = %s" for c in t.pk
            )
            for run_id, tables in runs.items():
                new = set(tables.get(t.name, ()))
                old = set(self._exec(select, (run_id,)))
                gone = old - new
                with self.conn.cursor() as c:
                    if gone:
                        c.executemany(delete, [tuple(row[i] for i in keys) for row in gone])
                        changes.add(t.name, gone, -1)
                    added = new - old
                    if added:
                        c.executemany(self._insert_sql(t), sorted(added, key=repr))
                        changes.add(t.name, added)
        for summary in self.summaries:
            self._apply(summary, changes)

    def _apply(self, summary: SummarySpec, changes: Changes) -> None:
        """Add a summary's changes to its rows; rows whose totals all reach zero go."""
        totals = summary.totals
        columns = ", ".join(map(_q, (*summary.key, *totals)))
        marks = ", ".join(["%s"] * (len(summary.key) + len(totals)))
        keyed = " AND ".join(f"{_q(c)} = %s" for c in summary.key)
        zero = " AND ".join(f"{_q(c)} = 0" for c in totals)
        with self.conn.cursor() as c:
            c.executemany(
                f"INSERT INTO {self._t(summary.name)} AS s ({columns}) VALUES ({marks}) "
                f"ON CONFLICT ({', '.join(map(_q, summary.key))}) DO UPDATE SET "
                + ", ".join(f"{_q(t)} = s.{_q(t)} + excluded.{_q(t)}" for t in totals),
                changes.rows(summary, nonzero=True),
            )
            c.executemany(
                f"DELETE FROM {self._t(summary.name)} WHERE {keyed} AND {zero}",
                changes.keys(summary),
            )

    def insert_runs(self, runs: Mapping[str, Mapping[str, Sequence[tuple[Any, ...]]]]) -> None:
        for t in self.run_tables:
            rows = [row for tables in runs.values() for row in tables.get(t.name, ())]
            self._copy(t.name, t.column_names, rows)
            self._pending.add(t.name, rows)

    def _copy(self, table: str, names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        if not rows:
            return
        columns = ", ".join(map(_q, names))
        with (
            self.conn.cursor() as c,
            c.copy(f"COPY {self._t(table)} ({columns}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)

    def reset(self) -> None:
        self._exec(f"DROP SCHEMA IF EXISTS {_q(self.schema)} CASCADE")
        self._pending.clear()
        self._create()

    def finish_rebuild(self) -> None:
        for summary in self.summaries:
            names = (*summary.key, *summary.totals)
            self._copy(summary.name, names, self._pending.rows(summary, nonzero=True))
        self._pending.clear()
        self._create_indexes()

    def replace_with(self, other: PostgresReadModelStore) -> None:
        """Put another schema's views in this one's place, atomically."""
        with self.conn.transaction():
            self._exec("SELECT pg_advisory_xact_lock(%s)", (self._lock,))
            self._exec(f"DROP SCHEMA IF EXISTS {_q(self.schema)} CASCADE")
            self._exec(f"ALTER SCHEMA {_q(other.schema)} RENAME TO {_q(self.schema)}")

    def drop(self) -> None:
        self._exec(f"DROP SCHEMA IF EXISTS {_q(self.schema)} CASCADE")

    # -- reading --

    def table_names(self) -> list[str]:
        return sorted([TRACKING, *(t.name for t in self.tables)])

    def _order(self, name: str) -> tuple[list[str], str]:
        if name == TRACKING:
            return ["name", "notification_id"], '"name" COLLATE "C"'
        spec = next(t for t in self.tables if t.name == name)
        kinds = dict(spec.columns)
        order = ", ".join(_q(c) + (' COLLATE "C"' if kinds[c] is str else "") for c in spec.pk)
        return list(spec.column_names), order

    def rows(self, name: str) -> Iterator[tuple[Any, ...]]:
        columns, order = self._order(name)
        select = ", ".join(map(_q, columns))
        yield from self._exec(f"SELECT {select} FROM {self._t(name)} ORDER BY {order}")

    def select(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A read-only query written once for both stores: tables as `{name}` (qualified
        with the schema here), parameters as `?`."""
        names = {t.name: self._t(t.name) for t in self.tables}
        return self._exec(sql.format(**names).replace("?", "%s"), params)

    def digest(self) -> str:
        return digest(self)

    def counts(self) -> dict[str, int]:
        return {
            name: int(self._exec(f"SELECT count(*) FROM {self._t(name)}")[0][0])
            for name in self.table_names()
        }

    def first_difference(self, other: PostgresReadModelStore) -> str | None:
        return first_difference(self, other)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
