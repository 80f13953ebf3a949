"""A digest of the code that turns events into answers, read from its source files.

A kept reading (`ledger show`'s timeline, `ledger verdict`'s document) is valid only for the
code that made it: keyed by this digest, any edit to the fold, a rule, a projection or the
reader makes every kept reading stale at once, with no version number to forget to bump.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # our top-level packages sit side by side
# The event store is every `adapters/store_*.py` module and `event_store.py` (streams, chain,
# seals, indexes, readings, dialects...): a new part of the store is covered without a line here.
READING_SOURCES = (
    "domain",
    "projections",
    "ledger",
    "adapters/event_store.py",
    "adapters/store_*.py",
)


@functools.cache
def source_digest(sources: tuple[str, ...] = READING_SOURCES) -> str | None:
    """sha256 over the path and bytes of every `.py` file of `sources` (packages, single
    modules or glob patterns of modules, relative to the packages' root) and the Python
    version; None when a source is missing (installed without its sources: nothing may then
    be kept)."""
    digest = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]}\n".encode())
    for source in sources:
        path = ROOT / source
        if "*" in source:
            files = sorted(ROOT.glob(source))
        else:
            files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            return None
        for file in files:
            data = file.read_bytes()
            digest.update(f"{file.relative_to(ROOT).as_posix()}\n{len(data)}\n".encode())
            digest.update(data)
    return digest.hexdigest()
