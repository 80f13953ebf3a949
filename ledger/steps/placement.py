"""Placement for pool executors (the `run` step's first part): measure the pool, place
shards, record both as events.

Its inputs are explicit (the ledger and run, the executor, what each shard needs) and it
returns what it decided, so it imports nothing of the gate's process and changes none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from release_ledger.domain import events as ev
from release_ledger.domain.placement import PlacementError, place_shards
from release_ledger.domain.run_state import RunState
from release_ledger.ledger.service import Ledger


class _Need:
    def __init__(self, shard: str, rss_mb: float) -> None:
        self.id = shard
        self.rss_mb = rss_mb


@dataclass(frozen=True)
class Placed:
    """A round's placement: shard -> member, and the shards given less than they asked for
    (the shard budget, on a pool without room for what a file alone may use)."""

    members: dict[str, str]
    reduced_mb: dict[str, int] = field(default_factory=dict)


def place_round(
    ledger: Ledger,
    run_id: str,
    executor: Any,
    state: RunState,
    needs_mb: Mapping[str, float],
    budget_mb: float,
    round_: int,
) -> Placed:
    """Shard -> member for this round (`needs_mb`: what each shard's attempt may use, the
    figure its pod's limit gets). Members whose pods failed are left out; shards that find
    no room are left unplaced (the executor reports them unmeasured)."""
    measure_pool = getattr(executor, "measure_pool", None)
    if measure_pool is None:
        return Placed({})
    leases = measure_pool()
    ledger.record(run_id, ev.PoolMeasured, round=round_, members=leases)
    failed = state.excluded_members
    previous = {p.shard: p.member for p in state.placements}
    needs = [_Need(shard, float(mb)) for shard, mb in sorted(needs_mb.items())]
    placements = []
    reduced: dict[str, int] = {}
    remaining = list(needs)
    while remaining:
        try:
            placements = place_shards(remaining, leases, previous, failed)
            break
        except PlacementError as error:
            larger = [n for n in remaining if n.rss_mb > budget_mb]
            if larger:
                # Files alone may have more than a shard; a pool without room for all of
                # that gives them the shard's budget rather than no place at all.
                for need in larger:
                    need.rss_mb = budget_mb
                    reduced[need.id] = int(budget_mb)
                continue
            # No room for one shard: place the others now, it goes unplaced this round.
            remaining = [n for n in remaining if n.id != error.shard]
    events: list[ev.Event] = [
        ledger.make(
            ev.ShardPlaced,
            run_id,
            shard=p.shard,
            member=p.member,
            round=round_,
            node=p.node,
            reservation_mb=p.reservation_mb,
        )
        for p in placements
    ]
    if events:
        ledger.append(run_id, events)
    return Placed({p.shard: p.member for p in placements}, reduced)


def pool_detail(state: RunState) -> str:
    """Why no member took a shard: every member of the latest pool measurement, named."""
    if not state.pool_rounds:
        return "no pool member was measured"
    parts = []
    failed = state.excluded_members
    for lease in state.pool_rounds[-1].members:
        if not lease.ready:
            parts.append(f"{lease.member}: {lease.reason or 'not ready'}")
        elif lease.member in failed:
            parts.append(f"{lease.member}: excluded after a pod failure")
        else:
            parts.append(f"{lease.member}: no free slot or node with room")
    return "no pool member could take it (" + "; ".join(parts) + ")"
