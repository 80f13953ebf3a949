"""Shard placement: within slots and node memory, kept where possible, never on failed members."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from release_ledger.domain.events import MemberLease, PlannedShard
from release_ledger.domain.memory import pod_request_mb
from release_ledger.domain.placement import Placement, PlacementError, place_shards


@dataclass(frozen=True)
class Shard:
    id: str
    rss_mb: float


shard_lists = st.lists(
    st.builds(
        Shard,
        id=st.from_regex(r"s[0-9]{2}(\.[1-2])?", fullmatch=True),
        rss_mb=st.floats(min_value=0.0, max_value=20_000.0),
    ),
    max_size=8,
    unique_by=lambda s: s.id,
)
leases_strategy = st.lists(
    st.builds(
        MemberLease,
        member=st.sampled_from(["east", "west", "north", "south", "lab"]),
        ready=st.sampled_from([True, True, True, False]),
        capacity=st.integers(0, 8),
        running=st.integers(0, 2),
        pending=st.integers(0, 1),
        free_mb_per_node=st.dictionaries(
            st.sampled_from(["n1", "n2", "n3"]), st.floats(0.0, 98_304.0), min_size=1, max_size=3
        ),
    ),
    min_size=1,
    max_size=5,
    unique_by=lambda lease: lease.member,
)


def placed_or_none(
    shards: list[Shard],
    leases: list[MemberLease],
    previous: dict[str, str] | None = None,
    failed: frozenset[str] = frozenset(),
) -> list[Placement] | None:
    try:
        return place_shards(shards, leases, previous, failed)
    except PlacementError as error:
        assert error.shard in {s.id for s in shards}
        assert f"shard {error.shard} (reservation {error.reservation_mb} MB)" in str(error)
        return None


def generous(member: str, slots: int) -> MemberLease:
    return MemberLease(
        member=member, ready=True, capacity=slots, free_mb_per_node={"big": 1_000_000.0}
    )


@given(st.floats(min_value=0.0, max_value=1e6))
def test_reservation_is_whole_gib_at_least_4_and_covers_the_rss(rss: float) -> None:
    reserved = pod_request_mb(rss)
    assert reserved >= 4096
    assert reserved % 1024 == 0
    assert reserved >= rss
    assert reserved - rss < 1024 or reserved == 4096


@pytest.mark.parametrize(
    ("rss", "reserved"), [(0, 4096), (100, 4096), (4096, 4096), (4097, 5120), (9000, 9216)]
)
def test_reservation_examples(rss: float, reserved: int) -> None:
    assert pod_request_mb(rss) == reserved


@settings(max_examples=300)
@given(shard_lists, leases_strategy)
def test_each_shard_placed_once_within_slots_and_node_memory(
    shards: list[Shard], leases: list[MemberLease]
) -> None:
    placements = placed_or_none(shards, leases)
    if placements is None:
        return
    assert sorted(p.shard for p in placements) == sorted(s.id for s in shards)
    by_member = Counter(p.member for p in placements)
    used: defaultdict[tuple[str, str], int] = defaultdict(int)
    for p in placements:
        used[(p.member, p.node)] += p.reservation_mb
        assert p.reservation_mb == pod_request_mb(next(s.rss_mb for s in shards if s.id == p.shard))
    for lease in leases:
        assert by_member[lease.member] <= max(0, lease.capacity - lease.running - lease.pending)
        if not lease.ready:
            assert by_member[lease.member] == 0
        for node, free in lease.free_mb_per_node.items():
            assert used[(lease.member, node)] <= free


@given(shard_lists, leases_strategy, st.sets(st.sampled_from(["east", "west", "lab"])))
def test_failed_members_get_nothing(
    shards: list[Shard], leases: list[MemberLease], failed: set[str]
) -> None:
    previous = {s.id: lease.member for s, lease in zip(shards, leases * 12, strict=False)}
    placements = placed_or_none(shards, leases, previous, frozenset(failed))
    if placements is not None:
        assert not {p.member for p in placements} & failed


@given(shard_lists, st.data())
def test_kept_placements_stay_on_members_with_room(
    shards: list[Shard], data: st.DataObject
) -> None:
    members = ["east", "west", "north"]
    previous = {
        s.id: data.draw(st.sampled_from(members)) for s in shards if data.draw(st.booleans())
    }
    leases = [generous(m, slots=len(shards)) for m in members]
    placements = place_shards(shards, leases, previous)
    for p in placements:
        if p.shard in previous:
            assert p.member == previous[p.shard]


@given(shard_lists, leases_strategy, st.randoms(use_true_random=False))
def test_the_same_pool_gives_the_same_placements_in_any_input_order(
    shards: list[Shard], leases: list[MemberLease], rnd: random.Random
) -> None:
    first = placed_or_none(shards, leases)
    shuffled_shards, shuffled_leases = list(shards), list(leases)
    rnd.shuffle(shuffled_shards)
    rnd.shuffle(shuffled_leases)
    assert placed_or_none(shuffled_shards, shuffled_leases) == first


@given(shard_lists, leases_strategy)
def test_a_member_with_room_for_everything_means_no_error(
    shards: list[Shard], leases: list[MemberLease]
) -> None:
    leases = [lease for lease in leases if lease.member != "spare"]
    leases.append(generous("spare", slots=len(shards)))
    placements = place_shards(shards, leases)
    assert len(placements) == len(shards)


@given(shard_lists.filter(bool), leases_strategy)
def test_duplicate_shards_are_rejected(shards: list[Shard], leases: list[MemberLease]) -> None:
    with pytest.raises(PlacementError, match=rf"shard {shards[0].id} is listed twice"):
        place_shards([*shards, shards[0]], leases)


@given(shard_lists, leases_strategy)
def test_duplicate_members_are_rejected(shards: list[Shard], leases: list[MemberLease]) -> None:
    with pytest.raises(PlacementError, match=rf"pool member {leases[0].member} is listed twice"):
        place_shards(shards, [*leases, leases[0]])


def test_a_shard_with_no_room_is_named_with_its_reservation() -> None:
    leases = [MemberLease(member="east", ready=True, capacity=4, free_mb_per_node={"n1": 8192})]
    with pytest.raises(PlacementError) as caught:
        place_shards([Shard("s01", 100), Shard("s02", 9000)], leases)
    assert caught.value.shard == "s02"
    assert caught.value.reservation_mb == 9216
    assert "s02 (reservation 9216 MB)" in str(caught.value)


def test_least_loaded_relative_to_free_memory_goes_first() -> None:
    leases = [
        MemberLease(member="big", ready=True, capacity=8, free_mb_per_node={"n1": 32768}),
        MemberLease(member="small", ready=True, capacity=8, free_mb_per_node={"n1": 16384}),
    ]
    shards = [Shard(f"s0{i}", 1000) for i in range(1, 4)]
    placed = {p.shard: p.member for p in place_shards(shards, leases)}
    # s01 to the member with most free memory (tie at ratio 0); s02 to the empty one;
    # s03: big is at 4096/32768 = 1/8, small at 4096/16384 = 1/4, so big again.
    assert placed == {"s01": "big", "s02": "small", "s03": "big"}


def test_ties_fall_to_the_member_name() -> None:
    leases = [
        MemberLease(member=m, ready=True, capacity=1, free_mb_per_node={"n": 8192})
        for m in ("zeta", "alpha")
    ]
    assert place_shards([Shard("s01", 1)], leases)[0].member == "alpha"


def test_largest_reservation_is_placed_first_and_takes_the_node_it_fits() -> None:
    leases = [
        MemberLease(
            member="east", ready=True, capacity=2, free_mb_per_node={"n1": 4096, "n2": 12288}
        )
    ]
    placed = {
        p.shard: p.node for p in place_shards([Shard("s01", 10), Shard("s02", 12000)], leases)
    }
    assert placed == {"s01": "n1", "s02": "n2"}


def test_slots_count_running_and_pending_jobs() -> None:
    busy = MemberLease(
        member="busy", ready=True, capacity=4, running=3, pending=1, free_mb_per_node={"n": 1e6}
    )
    spare = MemberLease(member="spare", ready=True, capacity=1, free_mb_per_node={"n": 4096})
    placements = place_shards([Shard("s01", 1)], [busy, spare])
    assert placements == [Placement("s01", "spare", "n", 4096)]


def test_a_kept_shard_moves_when_its_member_failed_or_is_gone() -> None:
    leases = [generous("east", 4), generous("west", 4)]
    previous = {"s01": "east", "s02": "gone", "s03": "west"}
    shards = [Shard("s01", 1), Shard("s02", 1), Shard("s03", 1)]
    placed = {p.shard: p.member for p in place_shards(shards, leases, previous, {"east"})}
    assert placed == {"s01": "west", "s02": "west", "s03": "west"}


def test_planned_shards_can_be_placed_directly() -> None:
    shard = PlannedShard(id="s01", files=["tests/test_a.py"], rss_mb=5000.0, seconds=1.0)
    assert place_shards([shard], [generous("east", 1)]) == [Placement("s01", "east", "big", 5120)]


def test_a_nonsense_rss_is_a_placement_error() -> None:
    with pytest.raises(PlacementError):
        pod_request_mb(float("nan"))
    with pytest.raises(PlacementError):
        pod_request_mb(-1)


def test_no_shards_place_nothing() -> None:
    assert place_shards([], []) == []
