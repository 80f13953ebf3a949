"""One plain PostgreSQL connection for the reading commands, through psycopg2's C extension.

psycopg 3, the eventsourcing library's driver and the one every write goes through, takes
0.23-0.28 s to import here (its Python layers: libpq wrapper, 200 error classes, adapters,
asyncio): most of the 0.3 s that `ledger runs`, `questions`, `show` and `verdict` may take on
a shared ledger. psycopg2's extension module imports in about 0.05 s. So a process reads
through this connection, in autocommit mode like the SQLite reader, and loads psycopg 3 only
when it first writes (the library's datastore).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg2

dbapi = psycopg2  # the DB-API module whose errors `adapters.event_store` maps


class PlainReader:
    """psycopg2's connection with psycopg 3's `execute` shape (it returns the cursor)."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        connection.autocommit = True

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cursor = self._connection.cursor()
        # Without parameters psycopg2 leaves the statement as it is (no % interpolation).
        cursor.execute(sql, tuple(params) if params else None)
        return cursor

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction (`SET LOCAL` lasts for it), committed unless the block raises."""
        connection = self._connection
        connection.autocommit = False
        try:
            yield
            connection.commit()
        except BaseException:
            connection.rollback()
            raise
        finally:
            connection.autocommit = True

    def close(self) -> None:
        self._connection.close()


def connect(
    *, dbname: str, host: str, port: int, user: str, password: str, connect_timeout: int
) -> PlainReader:
    return PlainReader(
        psycopg2.connect(
            dbname=dbname,
            host=host,
            port=port,
            user=user,
            password=password,
            connect_timeout=connect_timeout,
        )
    )
