"""The views' running totals (`test_totals`, `test_commits`, `file_totals`) are kept as run rows
come and go; whatever order runs are written, rewritten and emptied in, they equal the
totals counted afresh from the rows left (an independent GROUP BY), and a rebuild from
those rows gives the same tables."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from release_ledger.adapters.read_model_store import ReadModelStore
from release_ledger.projections.read_models import RUN_TABLE_NAMES, TABLES

# What each summary must hold, counted from its source table directly.
ORACLES = {
    "test_totals": "SELECT test, interpreter, revision, state, count(*), sum(run_first) "
    "FROM {test_history} GROUP BY test, interpreter, revision, state",
    "test_commits": "SELECT test, interpreter, commit_sha, "
    "sum(CASE WHEN failed > 0 THEN 1 ELSE 0 END), sum(CASE WHEN passed > 0 THEN 1 ELSE 0 END) "
    "FROM {test_history} WHERE commit_sha IS NOT NULL GROUP BY test, interpreter, commit_sha "
    "HAVING sum(CASE WHEN failed > 0 OR passed > 0 THEN 1 ELSE 0 END) > 0",
    "file_totals": "SELECT file, interpreter, sum(CASE WHEN seconds IS NULL THEN 0 ELSE 1 END) "
    "FROM {files} GROUP BY file, interpreter "
    "HAVING sum(CASE WHEN seconds IS NULL THEN 0 ELSE 1 END) > 0",
}

FIXTURE = HealthCheck.function_scoped_fixture  # tmp_path: each example writes a folder of its own
TESTS = ["t/a.py::x", "t/a.py::y", "t/b.py::z"]


@st.composite
def run_rows(draw: st.DrawFn, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """The history and files rows of one run (the tables the totals read)."""
    history = []
    firsts: set[tuple[str, str]] = set()
    for interpreter in draw(st.sets(st.sampled_from(["3.12", "3.13"]), min_size=1)):
        for revision in draw(st.sets(st.sampled_from(["base", "head"]), min_size=1)):
            commit = draw(st.sampled_from(["c1", "c2", None]))
            for test in draw(st.sets(st.sampled_from(TESTS), min_size=1)):
                failed, passed = draw(st.integers(0, 2)), draw(st.integers(0, 2))
                first = int((interpreter, test) not in firsts)
                firsts.add((interpreter, test))
                history.append(
                    (run_id, interpreter, revision, test, test.split("::")[0], commit,
                     "2026-12-04T00:00:00", "[]", failed, passed,
                     2 * bool(failed) + bool(passed), None, None, 0.5, first)
                )  # fmt: skip
    files = [
        (run_id, file, "measured", draw(st.none() | st.floats(1, 99)),
         draw(st.none() | st.floats(0.1, 9)), None, None, "3.12")
        for file in draw(st.sets(st.sampled_from(["t/a.py", "t/b.py"])))
    ]  # fmt: skip
    return {"test_history": history, "files": files}


RUN_IDS = ["r1", "r2", "r3"]
# Each step writes one run's rows anew (or empties it): a run caught up again and again.
steps = st.lists(
    st.sampled_from(RUN_IDS).flatmap(
        lambda r: st.tuples(st.just(r), st.none() | run_rows(r))
    ),
    min_size=1,
    max_size=8,
)


def _all(store: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(store.select(sql)), key=repr)


def _totals(store: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {name: _all(store, f"SELECT * FROM {{{name}}}") for name in ORACLES}


def _exercise(store: Any, fresh: Any, plan: list[tuple[str, Any]]) -> None:
    final: dict[str, Any] = {}
    for run_id, rows in plan:
        with store.transaction():
            store.replace_runs({run_id: rows or {}})
        final[run_id] = rows or {}
        kept = _totals(store)
        for name, oracle in ORACLES.items():
            assert kept[name] == _all(store, oracle), name
    with fresh.transaction():
        fresh.reset()
        fresh.insert_runs({r: {t: final[r].get(t, []) for t in RUN_TABLE_NAMES} for r in final})
        fresh.finish_rebuild()
    assert _totals(fresh) == _totals(store)


@settings(max_examples=60, deadline=None, suppress_health_check=[FIXTURE])
@given(plan=steps)
def test_running_totals_equal_a_fresh_count_whatever_the_order_of_writes(
    tmp_path: Path, plan: list[tuple[str, Any]]
) -> None:
    folder = tmp_path / uuid.uuid4().hex
    store = ReadModelStore(folder / "views.db", TABLES)
    fresh = ReadModelStore(folder / "fresh.db", TABLES)
    try:
        _exercise(store, fresh, plan)
    finally:
        store.close()
        fresh.close()


@pytest.fixture
def pg_stores(postgres_url: str) -> Iterator[tuple[Any, Any]]:
    from release_ledger.adapters.pg_read_model_store import PostgresReadModelStore

    store = PostgresReadModelStore(postgres_url, "totals_kept", TABLES)
    fresh = PostgresReadModelStore(postgres_url, "totals_fresh", TABLES)
    yield store, fresh
    store.close()
    fresh.close()


@pytest.mark.postgres
@settings(max_examples=25, deadline=None, suppress_health_check=[FIXTURE])
@given(plan=steps)
def test_postgresql_keeps_the_same_running_totals(
    pg_stores: tuple[Any, Any], plan: list[tuple[str, Any]]
) -> None:
    store, fresh = pg_stores
    with store.transaction():
        store.reset()
    _exercise(store, fresh, plan)


def test_a_run_rewritten_with_other_outcomes_moves_its_counts(tmp_path: Path) -> None:
    """The plain case, by hand: a run first failing then passing at one commit."""
    store = ReadModelStore(tmp_path / "views.db", TABLES)
    try:
        def row(failed: int, passed: int) -> tuple[Any, ...]:
            state = 2 * bool(failed) + bool(passed)
            return ("r1", "3.12", "head", TESTS[0], "t/a.py", "c1", "2026-12-04", "[]",
                    failed, passed, state, None, None, 0.1, 1)  # fmt: skip

        with store.transaction():
            store.replace_runs({"r1": {"test_history": [row(1, 0)]}})
        assert store.select("SELECT state, rows, runs FROM {test_totals}") == [(2, 1, 1)]
        with store.transaction():
            store.replace_runs({"r1": {"test_history": [row(1, 1)]}})
        assert store.select("SELECT state, rows, runs FROM {test_totals}") == [(3, 1, 1)]
        assert store.select("SELECT failed_rows, passed_rows FROM {test_commits}") == [(1, 1)]
        with store.transaction():
            store.replace_runs({"r1": {}})
        assert store.select("SELECT count(*) FROM {test_totals}") == [(0,)]
        assert store.select("SELECT count(*) FROM {test_commits}") == [(0,)]
    finally:
        store.close()
