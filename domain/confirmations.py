"""The fold's handlers of the gate's confirmations: runs in the project's own order
(`InOrderRecorded`, `domain/order.py`) and environment sources rejected because no test could
run in them (`SourceRejected`, `domain/unrunnable.py`). Registered with the run fold's
handler table on import (`domain/run_state.py` imports this module)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from release_ledger.domain import events as ev
from release_ledger.domain.assessment import Assessment
from release_ledger.domain.run_state import RunState, _assess_stored, _folds


@dataclass(frozen=True)
class InOrderView:
    """One run of files in the project's order at one revision, as assessed."""

    revision: str
    files: tuple[str, ...]
    confirms: tuple[str, ...]
    assessment: Assessment
    position: int


@_folds(ev.InOrderRecorded)
def _in_order(
    state: RunState, position: int, e: ev.InOrderRecorded, artifacts: Mapping[str, bytes]
) -> None:
    assessment = _assess_stored(
        exit_code=e.exit_code, signal=e.signal, timed_out=e.timed_out, oom=e.oom,
        infrastructure_failure=e.infrastructure_failure, infrastructure_detail="",
        kind=e.failure_kind, report_hash=e.report_hash, log_tail_hash=e.log_tail_hash,
        files=e.files, artifacts=artifacts, report_too_large=e.report_too_large,
        memo=state.memo,
    )  # fmt: skip
    view = InOrderView(e.revision, tuple(e.files), tuple(e.confirms), assessment, position)
    for file in e.confirms:
        state.in_order[(file, e.revision)] = view


@_folds(ev.SourceRejected)
def _source_rejected(
    state: RunState, _: int, e: ev.SourceRejected, __: Mapping[str, bytes]
) -> None:
    """The revision's attempts made in the rejected source stop counting: its shards are run
    again (their attempt numbers go on) in the next source."""
    state.rejected_sources.setdefault(e.revision, []).append(e)
    for shard in state.shards.values():
        made = shard.attempts[e.revision]
        if made:
            shard.superseded.setdefault(e.revision, []).extend(made)
            shard.attempts[e.revision] = []
