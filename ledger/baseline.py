"""Baseline reuse: an earlier run that measured the same base commit, command, environment
setting and files."""

from __future__ import annotations

from collections.abc import Sequence

from domain import events as ev
from domain.errors import BrokenRun
from domain.run_state import BASE, fold
from ledger.service import Ledger
from projections.next_step import RunRequest


def find_baselines(
    ledger: Ledger,
    run_id: str,
    started: ev.RunStarted,
    requests: Sequence[RunRequest],
) -> dict[str, tuple[ev.BaselineReused, str]]:
    """For each requested base run, a `BaselineReused` from the newest earlier run whose
    measured base attempt covered exactly the same files with the same command."""
    wanted = {tuple(sorted(r.files)): r.shard for r in requests}
    found: dict[str, tuple[ev.BaselineReused, str]] = {}
    for row in ledger.runs():
        if not wanted:
            break
        if row.run_id == run_id or row.base != started.base:
            continue
        try:
            records = ledger.read(row.run_id)
        except BrokenRun:
            continue  # a broken run proves nothing: its base is measured afresh
        first = records[0].event if records else None
        if not isinstance(first, ev.RunStarted) or first.command != started.command:
            continue
        if _environment_setting(first) != _environment_setting(started):
            continue  # base results from another kind of environment are another measurement
        events = [r.event for r in records]
        state = fold([(r.position, r.event) for r in records], ledger.artifacts_for(events))
        for shard in state.shards.values():
            latest = shard.latest(BASE)
            if latest is None or not latest.assessment.measured:
                continue
            key = tuple(sorted(latest.files))
            if key not in wanted:
                continue
            target = wanted.pop(key)
            event = ledger.make(
                ev.BaselineReused,
                run_id,
                base=started.base,
                from_run=row.run_id,
                shard=target,
                files=list(latest.files),
                exit_code=_attempt_exit(events, shard.id, latest.position),
                report_hash=latest.report_hash,
                log_tail_hash=latest.log_tail_hash,
                rss_mb=latest.rss_mb,
                seconds=latest.seconds,
            )
            found[target] = (event, row.run_id)
    return found


def _environment_setting(started: ev.RunStarted) -> str:
    """`--env` as recorded (runs from before per-revision environments used the gate's own)."""
    return str(started.options.get("env", "none"))


def _attempt_exit(events: Sequence[ev.Event], shard: str, position: int) -> int | None:
    event = events[position - 1]
    if isinstance(event, ev.ShardAttemptRecorded | ev.BaselineReused):
        return event.exit_code
    return None
