"""A run's projected state and verdict (kept for its importers: `ledger.read_side` is the read
side's one entry, and these are its functions)."""

from __future__ import annotations

from release_ledger.ledger.read_side import project, verdict_of

__all__ = ["project", "verdict_of"]
