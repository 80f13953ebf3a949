"""The release's evidence: `ReleaseInspected`, read from head's tree at gate start.

Runs started before the event existed get it appended when first approved (read then from
the same commits), so every report of the current format is derived from recorded evidence.
"""

from __future__ import annotations

from pathlib import Path

from adapters.release_info import inspect_release
from domain import events as ev
from ledger.service import Ledger


def release_event(
    ledger: Ledger, started: ev.RunStarted
) -> tuple[ev.ReleaseInspected, dict[str, bytes]]:
    facts = inspect_release(Path(started.repo), started.head, started.base, started.head_ref)
    return ledger.make(ev.ReleaseInspected, started.run_id, **facts.fields), facts.artifacts
