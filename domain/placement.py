"""Shard placement on a pool (DESIGN.md step 4): which member, and which node, runs each shard.

Pure: the pool arrives as measured leases (`MemberLease`), so the same `PoolMeasured` event
always gives the same placements on replay.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from release_ledger.domain.errors import PlacementError
from release_ledger.domain.events import MemberLease
from release_ledger.domain.memory import pod_request_mb

__all__ = ["Placement", "PlacementError", "ShardNeed", "place_shards"]



class ShardNeed(Protocol):
    """What placement needs of a shard; `domain.events.PlannedShard` fits."""

    @property
    def id(self) -> str: ...

    @property
    def rss_mb(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Placement:
    """A shard's member and the node whose free memory was counted for its reservation."""

    shard: str
    member: str
    node: str
    reservation_mb: int


@dataclass
class _Member:
    """A usable member's room, shrinking as this round assigns shards to it."""

    name: str
    slots: int
    free_mb: dict[str, float]
    total_free_mb: float
    assigned_mb: int = 0

    def node_for(self, need_mb: int) -> str | None:
        """Best fit: the node with the least free memory that still holds `need_mb`.

        Largest shards are placed first, so keeping the big holes open serves the ones to come.
        """
        fitting = [(free, node) for node, free in self.free_mb.items() if free >= need_mb]
        return min(fitting)[1] if fitting and self.slots > 0 else None

    def take(self, node: str, need_mb: int) -> None:
        self.free_mb[node] -= need_mb
        self.assigned_mb += need_mb
        self.slots -= 1

    def preference(self) -> tuple[float, float, str]:
        """Least assigned relative to its free memory, then most free memory, then name."""
        remaining = self.total_free_mb - self.assigned_mb
        return (self.assigned_mb / self.total_free_mb, -remaining, self.name)


def place_shards(
    shards: Sequence[ShardNeed],
    leases: Sequence[MemberLease],
    previous: Mapping[str, str] | None = None,
    failed_members: Collection[str] = (),
) -> list[Placement]:
    """Place every shard on a ready member with a free slot and a node with room for it.

    A shard keeps its `previous` member (shard -> member) unless that member failed, is no
    longer measured ready, or has no room left for it; kept shards claim their room first.
    The rest go largest reservation first (then shard id) to the member least assigned
    relative to its free memory (ties: most free memory, then name). Members in
    `failed_members` get nothing. The result is sorted by shard id; it does not depend on
    the order of `shards` or `leases`. Raises `PlacementError` for duplicate shard ids,
    duplicate members, or a shard that fits nowhere.
    """
    needs = _reservations(shards)
    members = _usable_members(leases, set(failed_members))
    kept = previous or {}
    order = sorted(needs, key=lambda shard: (-needs[shard], shard))
    placed: dict[str, Placement] = {}

    for shard in order:
        member = members.get(kept.get(shard, ""))
        node = member.node_for(needs[shard]) if member else None
        if member is not None and node is not None:
            member.take(node, needs[shard])
            placed[shard] = Placement(shard, member.name, node, needs[shard])

    for shard in order:
        if shard in placed:
            continue
        candidates = [
            (m.preference(), m, node)
            for m in members.values()
            if (node := m.node_for(needs[shard])) is not None
        ]
        if not candidates:
            raise PlacementError(
                f"no pool member has room for shard {shard} (reservation {needs[shard]} MB): "
                f"none has both a free slot and a node with that much free memory",
                shard=shard,
                reservation_mb=needs[shard],
            )
        _, member, node = min(candidates, key=lambda c: c[0])
        member.take(node, needs[shard])
        placed[shard] = Placement(shard, member.name, node, needs[shard])

    return [placed[shard] for shard in sorted(placed)]


def _reservations(shards: Sequence[ShardNeed]) -> dict[str, int]:
    needs: dict[str, int] = {}
    for shard in shards:
        if shard.id in needs:
            raise PlacementError(f"shard {shard.id} is listed twice", shard=shard.id)
        needs[shard.id] = pod_request_mb(shard.rss_mb)
    return needs


def _usable_members(leases: Sequence[MemberLease], failed: set[str]) -> dict[str, _Member]:
    """Members that may take shards this round: ready, not failed, with a slot and memory."""
    seen: set[str] = set()
    usable: dict[str, _Member] = {}
    for lease in leases:
        if lease.member in seen:
            raise PlacementError(f"pool member {lease.member} is listed twice")
        seen.add(lease.member)
        free = {node: mb for node, mb in lease.free_mb_per_node.items() if mb > 0}
        slots = lease.capacity - lease.running - lease.pending
        if lease.ready and lease.member not in failed and slots > 0 and free:
            total = math.fsum(free.values())
            usable[lease.member] = _Member(lease.member, slots, free, total)
    return usable
