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
        return Path(views)
    store = ledger.store
    if store.dialect != "sqlite":
        return PG_SCHEMA
    if store.description.endswith("(not created yet)"):
        raise BadInput(f"no ledger at {store.description.removesuffix(' (not created yet)')}")
    database = Path(store.description)
    own = database.with_name(database.name.removesuffix(".db") + VIEWS_SUFFIX)
    _adopt_shared_views(database.parent / SHARED_VIEWS_FILE, own, store.ledger_id())
    return own


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


