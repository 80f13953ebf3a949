"""Output files of the command line (`--out`, `--html`, `--junit-out`): checked before a
command records anything, then written whole or not at all (`adapters/bounded_files.py`)."""

from __future__ import annotations

from release_ledger.adapters.bounded_files import writable_target, write_whole

__all__ = ["writable_target", "write_whole"]
