"""A read-only look at a SQLite views file with sqlite3 alone: `ledger tests` answers from it
when the views are current, without loading sqlite-utils or the projections (0.1 s of
start-up: a third of its budget)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote


class _Quoted(dict[str, str]):
    def __missing__(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'


class ViewsReader:
    """`select` as the stores take it (tables as `{name}`, parameters as `?`). The tracking
    and meta tables are named as `adapters/read_model_store.py` names them (TRACKING,
    TRACKING_NAME, META), not imported: that module loads sqlite-utils."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=5)

    def position(self) -> int | None:
        """The last ledger notification the views reflect (None: not a views file)."""
        try:
            row = self.conn.execute(
                "SELECT notification_id FROM tracking WHERE name = 'views'"
            ).fetchone()
        except sqlite3.DatabaseError:
            return None
        return int(row[0]) if row else 0

    def ledger_id(self) -> str | None:
        try:
            row = self.conn.execute(
                "SELECT value FROM views_meta WHERE key = 'ledger_id'"
            ).fetchone()
        except sqlite3.DatabaseError:
            return None
        return str(row[0]) if row else None

    def select(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql.format_map(_Quoted()), tuple(params)))

    def close(self) -> None:
        self.conn.close()
