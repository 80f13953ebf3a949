"""Placement for pool executors: measure the pool, place shards, record both as events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from domain import events as ev
from domain.placement import PlacementError, place_shards
from domain.run_state import RunState
from projections.next_step import RunRequest

if TYPE_CHECKING:
    from ledger.gate import GateProcess


class _Need:
    def __init__(self, shard: str, rss_mb: float) -> None:
        self.id = shard
        self.rss_mb = rss_mb


def place_round(
    process: GateProcess, state: RunState, requests: Sequence[RunRequest], round_: int
) -> dict[str, str]:
    """shard -> member for this round. Members whose pods failed are left out; shards that
    find no room are left unplaced (the executor reports them unmeasured)."""
    executor = process.executor
    measure_pool = getattr(executor, "measure_pool", None)
    if measure_pool is None:
        return {}
    leases = measure_pool()
    process.ledger.record(process.run_id, ev.PoolMeasured, round=round_, members=leases)
    failed = state.excluded_members
    previous = {p.shard: p.member for p in state.placements}
    # Each shard reserves what its attempt may use: the same figure its pod's limit gets.
    needs = [
        _Need(shard, float(process.memory_limit(state, shard)))
        for shard in sorted({r.shard for r in requests})
    ]
    placements = []
    remaining = list(needs)
    budget = process.options.budget_mb
    while remaining:
        try:
            placements = place_shards(remaining, leases, previous, failed)
            break
        except PlacementError as error:
            larger = [n for n in remaining if n.rss_mb > budget]
            if larger:
                # Files alone may have more than a shard; a pool without room for all of
                # that gives them the shard's budget rather than no place at all.
                for need in larger:
                    need.rss_mb = budget
                    process.reserved[need.id] = int(budget)
                continue
            # No room for one shard: place the others now, it goes unplaced this round.
            remaining = [n for n in remaining if n.id != error.shard]
    events: list[ev.Event] = [
        process.ledger.make(
            ev.ShardPlaced,
            process.run_id,
            shard=p.shard,
            member=p.member,
            round=round_,
            node=p.node,
            reservation_mb=p.reservation_mb,
        )
        for p in placements
    ]
    if events:
        process.ledger.append(process.run_id, events)
    return {p.shard: p.member for p in placements}
