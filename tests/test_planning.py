"""Shard planning: every file planned once, within budget and count, the same plan every time."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from release_ledger.domain.errors import BadInput
from release_ledger.domain.memory import FileCost, planned_memory, shared_imports_mb
from release_ledger.domain.planning import (
    SHARD_FLOOR_S,
    child_shard_ids,
    fitted_shard_count,
    makespan,
    makespan_lower_bound,
    nominal_cost,
    plan_shards,
    split_in_halves,
)

BUDGET = 8192.0

names = st.from_regex(r"tests/[a-z]{1,6}/test_[a-z0-9_]{1,8}\.py", fullmatch=True)
BASELINE = 64.0
MAX_SHARED = 1000.0  # every file fits the budget alone with any first file's shared imports
solo_costs = st.builds(
    FileCost,
    rss_mb=st.floats(min_value=0.0, max_value=BUDGET),
    seconds=st.floats(min_value=0.0, max_value=3600.0),
)
# Costs measured inside shard runs: a baseline, retained growth and a transient peak.
split_costs = st.builds(
    lambda retained, transient, seconds: FileCost(
        rss_mb=BASELINE + retained + transient,
        seconds=seconds,
        retained_mb=retained,
        transient_mb=transient,
    ),
    st.floats(min_value=0.0, max_value=2000.0),
    st.floats(min_value=0.0, max_value=BUDGET - BASELINE - 2000.0 - MAX_SHARED),
    st.floats(min_value=0.0, max_value=3600.0),
)
# A file that was its process's first: its collection (the shared imports) kept apart.
first_costs = st.builds(
    lambda retained, transient, shared, seconds: FileCost(
        rss_mb=BASELINE + shared + retained + transient,
        seconds=seconds,
        retained_mb=retained,
        transient_mb=transient,
        shared_mb=shared,
    ),
    st.floats(min_value=0.0, max_value=1000.0),
    st.floats(min_value=0.0, max_value=BUDGET - BASELINE - 2000.0),
    st.floats(min_value=0.0, max_value=MAX_SHARED),
    st.floats(min_value=0.0, max_value=3600.0),
)
# A file measured after others in its process: how far the process had grown by its end
# (`ceiling_mb`, at least its own growth) bounds what it may need cold.
warm_costs = st.builds(
    lambda retained, transient, before, seconds: FileCost(
        rss_mb=BASELINE + retained + transient,
        seconds=seconds,
        retained_mb=retained,
        transient_mb=transient,
        ceiling_mb=retained + before,
    ),
    st.floats(min_value=0.0, max_value=1000.0),
    st.floats(min_value=0.0, max_value=1000.0),
    st.floats(min_value=0.0, max_value=BUDGET - BASELINE - 2000.0 - MAX_SHARED),
    st.floats(min_value=0.0, max_value=3600.0),
)
costs = st.one_of(solo_costs, split_costs, first_costs, warm_costs)
suites = st.dictionaries(names, costs, max_size=60)
counts = st.integers(min_value=1, max_value=12)


@given(suites, counts)
def test_every_file_lands_in_exactly_one_shard(files: dict[str, FileCost], count: int) -> None:
    shards = plan_shards(files, BUDGET, count)
    planned = [f for shard in shards for f in shard.files]
    assert sorted(planned) == sorted(files)


@given(suites, counts)
def test_no_shard_is_over_budget_or_empty(files: dict[str, FileCost], count: int) -> None:
    for shard in plan_shards(files, BUDGET, count, baseline_mb=BASELINE):
        assert shard.files
        assert shard.rss_mb <= BUDGET
        shared = shared_imports_mb(files.values())
        planned = planned_memory([files[f] for f in shard.files], BASELINE, shared)
        assert shard.rss_mb == pytest.approx(planned)
        assert shard.rss_mb >= BASELINE + shared - 1e-6  # every shard pays the shared imports
        if len(shard.files) == 1:  # a file alone: at least what it may need cold
            cold = files[shard.files[0]].cold_or_growth(BASELINE, shared)
            assert shard.rss_mb >= BASELINE + shared + cold - 1e-6


@given(suites, counts)
def test_count_is_used_and_exceeded_only_when_the_budget_needs_it(
    files: dict[str, FileCost], count: int
) -> None:
    shards = plan_shards(files, BUDGET, count, baseline_mb=BASELINE)
    assert len(shards) >= min(count, len(files))
    shared = shared_imports_mb(files.values())
    if len(shards) > count:
        # Every shard opened beyond the count holds a file that fitted in no earlier shard.
        for extra in shards[count:]:
            assert any(
                planned_memory([*(files[g] for g in other.files), files[f]], BASELINE, shared)
                > BUDGET - 1e-6
                for f in extra.files
                for other in shards[:count]
            )


def test_a_file_measured_warm_is_planned_alone_at_what_it_needs_cold() -> None:
    """One process ran a, b, c: a filled a 12 MB cache that c uses, so c kept only 9 MB.
    Planned alone, c fills the cache itself: it is planned at its ceiling (its process had
    grown 22.5 MB by its end), not at the 9 MB it kept warm; planned with others, it is
    planned by the sum, which carries what its shard-mates fill."""
    a = FileCost(rss_mb=50, seconds=1.0, retained_mb=12.5, transient_mb=0, ceiling_mb=12.5)
    b = FileCost(rss_mb=38, seconds=1.0, retained_mb=1, transient_mb=0, ceiling_mb=13.5)
    c = FileCost(rss_mb=47, seconds=9.0, retained_mb=9, transient_mb=1, ceiling_mb=22.5)
    files = {"a.py": a, "b.py": b, "c.py": c}
    shards = {tuple(s.files): s.rss_mb for s in plan_shards(files, BUDGET, 2, baseline_mb=37)}
    assert shards == {("c.py",): 37 + 22.5 + 1, ("a.py", "b.py"): 37 + 13.5}
    many = {f"t{i}.py": FileCost(50, 1.0, retained_mb=5, transient_mb=0) for i in range(10)}
    together = plan_shards({**many, "c.py": c}, BUDGET, 1, baseline_mb=37)
    assert together[0].rss_mb == 37 + 50 + 9 + 1


def test_files_small_enough_share_count_shards() -> None:
    files = {f"tests/test_{i}.py": nominal_cost(2000, 10) for i in range(40)}
    assert len(plan_shards(files, BUDGET, 4)) == 4


def test_retained_memory_adds_up_so_heavy_files_are_spread_over_more_shards() -> None:
    """Three files that each keep 3 GB do not share one 8 GB shard (the max model would)."""
    heavy = FileCost(rss_mb=3064, seconds=1.0, retained_mb=3000, transient_mb=0)
    shards = plan_shards({f"t{i}.py": heavy for i in range(3)}, BUDGET, 1, baseline_mb=64)
    assert [len(s.files) for s in shards] == [2, 1]
    assert shards[0].rss_mb == 64 + 6000


def test_shared_imports_are_planned_once_in_every_shard_even_one_without_a_first_file() -> None:
    """Each process pays for the package its files import once, charged to the file it
    collected first. Planned again in other groupings, every shard holds that median cost,
    and a first file that imported more of its own keeps only the excess."""
    first = FileCost(rss_mb=100, seconds=1.0, retained_mb=1, transient_mb=0, shared_mb=30)
    heavy_first = FileCost(rss_mb=170, seconds=1.0, retained_mb=1, transient_mb=0, shared_mb=100)
    later = FileCost(rss_mb=70, seconds=1.0, retained_mb=1, transient_mb=0)
    files = {"a.py": first, "b.py": first, "c.py": heavy_first, "d.py": later, "e.py": later}
    assert shared_imports_mb(files.values()) == 30
    shards = {tuple(s.files): s.rss_mb for s in plan_shards(files, BUDGET, 5, baseline_mb=64)}
    assert shards[("d.py",)] == 64 + 30 + 1  # never first, still pays the shared import
    assert shards[("c.py",)] == 64 + 30 + 1 + 70  # its own 70 MB beyond the shared 30
    together = plan_shards(files, BUDGET, 1, baseline_mb=64)
    assert together[0].rss_mb == 64 + 30 + 5 + 70  # the shared import counted once


def test_a_transient_peak_counts_once_per_shard() -> None:
    spiky = FileCost(rss_mb=3064, seconds=1.0, retained_mb=0, transient_mb=3000)
    shards = plan_shards({f"t{i}.py": spiky for i in range(3)}, BUDGET, 1, baseline_mb=64)
    assert len(shards) == 1 and shards[0].rss_mb == 3064


def test_a_file_over_the_shard_budget_gets_a_shard_alone_within_the_isolation_budget() -> None:
    big = FileCost(rss_mb=10_000, seconds=1.0)
    small = FileCost(rss_mb=100, seconds=5.0)
    shards = plan_shards(
        {"big.py": big, "a.py": small, "b.py": small}, BUDGET, 1, alone_budget_mb=32768
    )
    assert ["big.py"] in [s.files for s in shards]
    assert all(s.rss_mb <= BUDGET for s in shards if s.files != ["big.py"])
    with pytest.raises(BadInput, match=r"big\.py needs 10000 MB"):
        plan_shards({"big.py": big}, BUDGET, 1, alone_budget_mb=9000)


@given(suites, counts, st.randoms(use_true_random=False))
def test_same_input_gives_the_same_plan_whatever_the_insertion_order(
    files: dict[str, FileCost], count: int, rnd: random.Random
) -> None:
    items = list(files.items())
    rnd.shuffle(items)
    assert plan_shards(dict(items), BUDGET, count) == plan_shards(files, BUDGET, count)


@given(suites, counts)
def test_shard_ids_are_readable_in_creation_order_and_files_sorted(
    files: dict[str, FileCost], count: int
) -> None:
    shards = plan_shards(files, BUDGET, count)
    assert [s.id for s in shards] == [f"s{i:02d}" for i in range(1, len(shards) + 1)]
    for shard in shards:
        assert shard.files == sorted(shard.files)


@given(suites, counts)
def test_planned_seconds_are_the_sum_and_makespan_never_beats_the_bound(
    files: dict[str, FileCost], count: int
) -> None:
    shards = plan_shards(files, BUDGET, count)
    for shard in shards:
        assert shard.seconds == pytest.approx(sum(files[f].seconds for f in shard.files))
    bound = makespan_lower_bound(files, max(count, len(shards)))
    assert makespan(shards) >= bound * (1 - 1e-9)
    if len(shards) == count or len(files) < count:
        # Least-loaded list scheduling never exceeds total / count + the longest file.
        total = sum(c.seconds for c in files.values())
        longest = max((c.seconds for c in files.values()), default=0.0)
        assert makespan(shards) <= total / count + longest + 1e-6


@given(suites, counts, names, st.floats(min_value=BUDGET + 0.01, max_value=1e6))
def test_a_file_over_budget_is_bad_input_naming_it(
    files: dict[str, FileCost], count: int, big: str, rss: float
) -> None:
    files = {**files, big: FileCost(rss_mb=rss, seconds=1.0)}
    with pytest.raises(BadInput, match=rf"^{re.escape(big)} needs .* MB, over the shard budget"):
        plan_shards(files, BUDGET, count)


def test_over_budget_message_names_the_file_and_its_rss() -> None:
    files = {"tests/test_big.py": FileCost(9000, 3.0), "tests/test_small.py": FileCost(100, 1.0)}
    with pytest.raises(BadInput) as caught:
        plan_shards(files, 8192, 4)
    assert str(caught.value) == (
        "tests/test_big.py needs 9000 MB, over the shard budget of 8192 MB"
    )


def test_the_largest_of_several_over_budget_files_is_named() -> None:
    files = {"tests/test_a.py": FileCost(9000, 1.0), "tests/test_b.py": FileCost(12000.5, 1.0)}
    with pytest.raises(BadInput, match=r"^tests/test_b.py needs 12000.5 MB.*and 1 more"):
        plan_shards(files, 8192, 2)


def test_a_file_exactly_at_the_budget_fits() -> None:
    shards = plan_shards({"tests/test_edge.py": FileCost(8192, 1.0)}, 8192, 1)
    assert shards[0].rss_mb == 8192


@pytest.mark.parametrize(
    ("budget", "count"), [(0, 1), (-1, 1), (float("nan"), 1), (float("inf"), 1), (8192, 0)]
)
def test_a_nonsense_budget_or_count_is_bad_input(budget: float, count: int) -> None:
    with pytest.raises(BadInput):
        plan_shards({"tests/test_a.py": FileCost(1, 1)}, budget, count)


@pytest.mark.parametrize("bad", [FileCost(-1, 1), FileCost(1, float("nan")), FileCost(1, -2)])
def test_an_unusable_measurement_is_bad_input_naming_the_file(bad: FileCost) -> None:
    with pytest.raises(BadInput, match=r"^tests/test_a\.py has an unusable"):
        plan_shards({"tests/test_a.py": bad}, 8192, 2)


def test_no_files_plan_no_shards() -> None:
    assert plan_shards({}, 8192, 4) == []


def test_long_files_are_spread_before_short_ones_fill_the_gaps() -> None:
    files = {f"tests/test_{i}.py": FileCost(100, 1.0) for i in range(6)}
    files["tests/test_long.py"] = FileCost(50, 6.0)
    shards = plan_shards(files, 8192, 2)
    assert makespan(shards) == 6.0
    assert ["tests/test_long.py"] in [s.files for s in shards]


def test_design_order_is_available_for_comparison() -> None:
    files = {"tests/test_big.py": FileCost(5000, 1.0), "tests/test_long.py": FileCost(10, 9.0)}
    shards = plan_shards(files, 8192, 2, rss_first=True)
    assert shards[0].files == ["tests/test_big.py"]


@given(st.lists(names, min_size=2, max_size=40, unique=True))
def test_halves_cover_the_files_and_the_first_takes_the_odd_one(files: list[str]) -> None:
    first, second = split_in_halves(files)
    assert sorted(first + second) == sorted(files)
    assert len(first) - len(second) in (0, 1)
    assert (first, second) == split_in_halves(list(reversed(files)))


def test_halves_of_three_files() -> None:
    assert split_in_halves(["c", "a", "b"]) == (["a", "b"], ["c"])


def test_a_single_file_cannot_be_halved() -> None:
    with pytest.raises(ValueError, match="need at least 2"):
        split_in_halves(["tests/test_a.py"])


def test_children_are_named_after_their_parent() -> None:
    assert child_shard_ids("s03", 2) == ["s03.1", "s03.2"]
    assert child_shard_ids("s03.2", 1) == ["s03.2.1"]
    with pytest.raises(ValueError):
        child_shard_ids("s01", 0)


@settings(max_examples=20)
@given(st.integers(min_value=100, max_value=999))
def test_more_than_99_shards_keep_ids_sorted_in_creation_order(count: int) -> None:
    files = {f"tests/test_{i:04d}.py": FileCost(10, 1.0) for i in range(count)}
    ids = [s.id for s in plan_shards(files, 8192, count)]
    assert ids == sorted(ids)
    assert ids[0] == "s001"


def test_bisection_halves_keep_the_projects_collection_order() -> None:
    """A half runs its files as the project's own run does: in its collection order, not by
    name (an order-coupled file keeps the files that precede it)."""
    order = ["tests/test_z.py", "docs/index.rst", "tests/test_a.py", "tests/test_m.py"]
    files = ["tests/test_a.py", "tests/test_m.py", "docs/index.rst", "tests/test_z.py"]

    assert split_in_halves(files, order) == (
        ["tests/test_z.py", "docs/index.rst"],
        ["tests/test_a.py", "tests/test_m.py"],
    )
    # files the recorded order does not name come after it, by name
    assert split_in_halves(["b.py", "a.py", "tests/test_m.py"], order) == (
        ["tests/test_m.py", "a.py"],
        ["b.py"],
    )


def _costs(*seconds: float) -> list[FileCost]:
    return [FileCost(rss_mb=50.0, seconds=s, retained_mb=1.0, transient_mb=0.0) for s in seconds]


def test_the_default_count_is_twice_the_jobs_for_a_suite_big_enough_to_fill_them() -> None:
    assert fitted_shard_count(_costs(*[SHARD_FLOOR_S] * 40), most=8) == 8


def test_a_small_suite_is_planned_in_fewer_shards_each_at_least_the_floor() -> None:
    assert fitted_shard_count(_costs(1.0, 1.0, 3.1), most=8) == 2  # 5.1 s: two of 2.5 s
    assert fitted_shard_count(_costs(0.3, 0.2), most=8) == 1


def test_a_suite_planned_at_nothing_still_gets_one_shard() -> None:
    assert fitted_shard_count([], most=4) == 1
    assert fitted_shard_count(_costs(0.0), most=4) == 1


@given(st.lists(st.floats(0, 100), max_size=30), st.integers(1, 64))
def test_the_fitted_count_is_between_one_and_the_most(seconds: list[float], most: int) -> None:
    count = fitted_shard_count(_costs(*seconds), most)
    assert 1 <= count <= most
    if count > 1:
        assert sum(seconds) / count >= SHARD_FLOOR_S
