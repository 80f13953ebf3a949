"""Where a ledger's read models live (`ledger.views` keeps them; `ledger tests` reads them
without loading the projection machinery when they are current)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from urllib.parse import quote

from release_ledger.domain.errors import BadInput
from release_ledger.ledger.service import Ledger

VIEWS_SUFFIX = ".views.db"  # `ledger.db` -> `ledger.views.db`, beside it
SHARED_VIEWS_FILE = "views.db"  # one file per folder before: two ledgers there shared it
PG_SCHEMA = "ledger_views"  # a PostgreSQL ledger's read models: a schema of its database


def views_path(ledger: Ledger, views: str | Path | None) -> Path | str:
    """`--views PATH`, else `<ledger>.views.db` beside a SQLite ledger (its own: two ledgers
    in one folder sharing one file rebuilt every view for each other, 22 s a gate on a
    2,000-run ledger against 3 s alone); a PostgreSQL ledger keeps its views in its own
    database, in the schema `ledger_views` (returned as that name)."""
    if views:
        return _own_views_file(Path(views))
    store = ledger.store
    if store.dialect != "sqlite":
        return PG_SCHEMA
    if store.description.endswith("(not created yet)"):
        raise BadInput(f"no ledger at {store.description.removesuffix(' (not created yet)')}")
    database = Path(store.description)
    own = database.with_name(database.name.removesuffix(".db") + VIEWS_SUFFIX)
    _adopt_shared_views(database.parent / SHARED_VIEWS_FILE, own, store.ledger_id())
    return own


SQLITE_HEADER = b"SQLite format 3\x00"


def _own_views_file(path: Path) -> Path:
    """`--views PATH` when it can be the ledger's views: none yet, empty, or a views file
    (a SQLite database with the views' own table); anything else (the user's notes, the
    ledger itself, another database, a device) is refused before a byte is written."""
    if not path.exists():
        return path
    if not path.is_file():
        raise BadInput(f"--views {path}: not a regular file")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as error:
        raise BadInput(f"--views {path}: cannot read: {error.strerror}") from None
    if not header:
        return path
    if header != SQLITE_HEADER or not _has_views_table(path):
        raise BadInput(f"--views {path}: not a views file of release-ledger (not overwriting it)")
    return path


def _has_views_table(path: Path) -> bool:
    from release_ledger.adapters.read_model_store import META

    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (META,)
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return row is not None


def _adopt_shared_views(shared: Path, own: Path, ledger_id: str) -> None:
    """The folder's old shared `views.db` becomes this ledger's own file when it was built
    from this ledger (renamed, so nothing is rebuilt); another ledger's is left alone."""
    wal = shared.with_name(shared.name + "-wal")
    if own.exists() or not shared.is_file() or (wal.exists() and wal.stat().st_size):
        return  # (a file with a write-ahead log in use is not moved: it is rebuilt instead)
    from release_ledger.adapters.read_model_store import META

    try:
        conn = sqlite3.connect(f"file:{quote(str(shared))}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute(f"SELECT value FROM {META} WHERE key = 'ledger_id'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return
    if row is not None and str(row[0]) == ledger_id:
        with contextlib.suppress(OSError):  # two commands adopting it at once: one rename wins
            shared.rename(own)
