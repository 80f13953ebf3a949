"""Read models: rows per run, tracking position, idempotent catch-up, rebuild digest, --check."""

from __future__ import annotations

import concurrent.futures
import json
import random
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.rules import REGISTRY
from release_ledger.ledger import views
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.replay import verdict_for
from release_ledger.ledger.service import Ledger
from release_ledger.projections.read_models import RUN_TABLE_NAMES, canonical_json, run_rows
from tests.ledgerkit import run_cli
from tests.synthetic_runs import SyntheticRun, synthetic_run


def _run(seed: int, run_id: str, **kw: object) -> SyntheticRun:
    return synthetic_run(random.Random(seed), run_id, **kw)  # type: ignore[arg-type]


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    for index in range(3):
        run = _run(index, f"{index + 1:x}" * 32, files=6, shards=2, questions=2, checks=2)
        led.append(run.run_id, run.events, artifacts=run.artifacts)
    return led


def _query(path: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def test_a_runs_rows_fill_every_table_and_name_every_rule_with_its_version() -> None:
    run = _run(5, "ab" * 16, files=5, tests_per_file=3, shards=2, questions=1, checks=2)
    rows = run_rows(run.run_id, list(enumerate(run.events, start=1)), run.artifacts)
    assert set(rows) == set(RUN_TABLE_NAMES)
    for table in ("runs", "files", "shards", "attempts", "test_cases", "verdicts", "questions"):
        assert rows[table], table
    assert {(r[1], r[2]) for r in rows["verdicts"]} == {(n, r.version) for n, r in REGISTRY.items()}
    assert {r[1] for r in rows["classifications"]} <= set(REGISTRY)
    assert [r[1] for r in rows["checks"]] == ["check-1", "check-2"]


def test_test_cases_hold_one_row_per_test_per_revision_per_attempt() -> None:
    run = _run(11, "cd" * 16, files=4, tests_per_file=2, shards=2, p_unmeasured=0.0)
    rows = run_rows(run.run_id, list(enumerate(run.events, start=1)), run.artifacts)
    shard_attempts = [a for a in rows["attempts"] if a[2] == "shard"]
    expected = sum(a[13] for a in shard_attempts)  # tests in each attempt's report
    from_shards = [c for c in rows["test_cases"] if c[3] is not None]
    assert len(from_shards) == expected
    keys = {(c[1], c[5]) for c in rows["test_cases"]}
    assert len(keys) == len(rows["test_cases"])  # (attempt position, test) is unique
    heads = {c[5] for c in from_shards if c[2] == "head"}
    assert len(heads) == 4 * 2


def test_the_stored_verdict_document_is_the_replayed_verdict_byte_for_byte(
    ledger: Ledger, tmp_path: Path
) -> None:
    path = tmp_path / "views.db"
    views.rebuild(ledger, path)
    for run_id, rule, document in _query(path, "SELECT run_id, rule, document FROM verdicts"):
        replayed = verdict_for(ledger, str(run_id), str(rule))
        assert document == canonical_json(replayed)


def test_views_live_beside_a_sqlite_ledger_and_in_a_postgresql_ledgers_own_schema(
    ledger: Ledger, tmp_path: Path
) -> None:
    assert views.views_path(ledger, None) == tmp_path / "ledger.views.db"
    assert views.views_path(ledger, "/x/v.db") == Path("/x/v.db")
    postgres = SimpleNamespace(store=SimpleNamespace(dialect="postgresql", description="db"))
    assert views.views_path(postgres, None) == views.PG_SCHEMA  # type: ignore[arg-type]


def test_two_sqlite_ledgers_in_one_folder_keep_views_of_their_own(tmp_path: Path) -> None:
    first = open_ledger(f"sqlite:///{tmp_path / 'a.db'}")
    second = open_ledger(f"sqlite:///{tmp_path / 'b.sqlite'}")
    try:
        assert views.views_path(first, None) == tmp_path / "a.views.db"
        assert views.views_path(second, None) == tmp_path / "b.sqlite.views.db"
    finally:
        first.close()
        second.close()


def test_the_folders_old_shared_views_file_is_adopted_by_its_own_ledger_only(
    ledger: Ledger, tmp_path: Path
) -> None:
    shared = tmp_path / "views.db"
    views.rebuild(ledger, shared)
    built = views.open_views(shared)
    digest = built.digest()
    built.close()
    other = open_ledger(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        assert views.views_path(other, None) == tmp_path / "other.views.db"
        assert shared.exists()  # another ledger's views: left where they are
    finally:
        other.close()

    assert views.views_path(ledger, None) == tmp_path / "ledger.views.db"

    assert not shared.exists() and (tmp_path / "ledger.views.db").exists()
    adopted = views.open_views(tmp_path / "ledger.views.db")
    try:
        assert adopted.ledger_id() == ledger.store.ledger_id()
        assert adopted.digest() == digest  # moved, not rebuilt
    finally:
        adopted.close()


def test_a_gate_builds_a_missing_views_file_only_for_a_small_ledger(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Views missing beside a large ledger are `ledger rebuild`'s to build, not a gate's:
    the gate says so in one line and stays as fast as on a fresh ledger."""
    path = tmp_path / "ledger.views.db"
    monkeypatch.setattr(views, "GATE_BUILDS_VIEWS_UP_TO_RUNS", 2)  # the fixture holds 3 runs
    notice = views.catch_up_after_gate(ledger)
    assert notice is not None and "ledger rebuild" in notice and "3 runs" in notice
    assert not path.exists()
    monkeypatch.setattr(views, "GATE_BUILDS_VIEWS_UP_TO_RUNS", 3)
    assert views.catch_up_after_gate(ledger) is None
    assert path.exists()
    monkeypatch.setattr(views, "GATE_BUILDS_VIEWS_UP_TO_RUNS", 2)
    assert views.catch_up_after_gate(ledger) is None  # an existing file is always caught up


def test_catching_up_twice_changes_nothing_and_new_events_reproject_only_their_run(
    ledger: Ledger, tmp_path: Path
) -> None:
    store = views.open_views(tmp_path / "views.db")
    first = views.catch_up(ledger, store)
    assert first["runs"] == 3
    digest = store.digest()
    again = views.catch_up(ledger, store)
    assert again["runs"] == 0 and again["events"] == 0
    assert store.digest() == digest

    run_id = "2" * 32
    ledger.record(run_id, ev.CheckRecorded, name="perf", verdict="fail", value="+30%")
    assert views.touched_runs(ledger, store.position(), ledger.store.max_notification_id()) == [
        run_id
    ]
    third = views.catch_up(ledger, store)
    assert third["runs"] == 1
    assert store.position() == ledger.store.max_notification_id()
    assert _query(store.path, "SELECT verdict FROM checks WHERE name='perf'") == [("fail",)]
    store.close()


def test_rebuilding_twice_gives_the_same_digest_as_the_maintained_views(
    ledger: Ledger, tmp_path: Path
) -> None:
    path = tmp_path / "views.db"
    store = views.open_views(path)
    views.catch_up(ledger, store)
    maintained = store.digest()
    store.close()
    one = views.rebuild(ledger, path)
    two = views.rebuild(ledger, path)
    assert one["digest"] == two["digest"] == maintained
    assert one["events"] == sum(len(ledger.read(r.run_id)) for r in ledger.runs())


def test_a_rebuild_by_worker_processes_equals_one_in_this_process(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large ledgers are projected by forked workers, a chunk of runs each: the same rows,
    the same digest as projecting every run here, and as the views caught up run by run."""
    for index in range(3, 8):
        run = _run(index, f"{index + 1:x}" * 32, files=5, shards=2, questions=1, checks=1)
        ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    store = views.open_views(tmp_path / "maintained.db")
    views.catch_up(ledger, store)
    maintained = store.digest()
    store.close()
    monkeypatch.setattr(views, "RUNS_PER_TRANSACTION", 2)  # 8 runs: 4 chunks
    monkeypatch.setenv("LEDGER_REBUILD_WORKERS", "1")
    here = views.rebuild(ledger, tmp_path / "here.db")
    submitted: list[int] = []

    class Pool(concurrent.futures.ProcessPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            submitted.append(len(args[0]))
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Pool)
    # Threads other tests left behind would make the rebuild stay in this process (a fork
    # copies only the calling thread); this one has none of its own.
    monkeypatch.setattr(views.threading, "active_count", lambda: 1)
    monkeypatch.setenv("LEDGER_REBUILD_WORKERS", "3")
    forked = views.rebuild(ledger, tmp_path / "forked.db")
    assert submitted == [2, 2, 2, 2]  # every chunk went to a worker
    assert forked["digest"] == here["digest"] == maintained
    assert forked["events"] == here["events"] and forked["runs"] == here["runs"] == 8


def test_check_names_the_first_difference_when_the_maintained_views_drift(
    ledger: Ledger, tmp_path: Path
) -> None:
    path = tmp_path / "views.db"
    views.rebuild(ledger, path)
    assert views.check(ledger, path)["identical"] is True
    conn = sqlite3.connect(path)
    conn.execute("UPDATE files SET seconds = 999.0 WHERE file = (SELECT min(file) FROM files)")
    conn.commit()
    conn.close()
    result = views.check(ledger, path)
    assert result["identical"] is False
    assert result["difference"].startswith("table files: row (run_id=")
    assert (
        "seconds: rebuild" in result["difference"] and "incremental 999.0" in result["difference"]
    )
    assert not list(tmp_path.glob(".views-check-*"))  # the temporary rebuild is removed


def test_the_indexes_answer_the_questions_people_ask(ledger: Ledger, tmp_path: Path) -> None:
    path = tmp_path / "views.db"
    views.rebuild(ledger, path)
    plans = {
        "introduced": "SELECT run_id FROM classifications "
        "WHERE test = 'x' AND class = 'introduced'",
        "slowest": "SELECT file, seconds FROM files ORDER BY seconds DESC LIMIT 10",
        "flakiest": "SELECT test, count(*) FROM classifications WHERE class = 'flaky' "
        "AND rule = 'default' GROUP BY test",
    }
    for name, sql in plans.items():
        plan = " ".join(str(row[-1]) for row in _query(path, "EXPLAIN QUERY PLAN " + sql))
        assert "USING" in plan and "INDEX" in plan, (name, plan)


def test_cli_rebuild_reports_path_events_seconds_and_digest_and_check_fails_on_drift(
    ledger: Ledger, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = run_cli("rebuild", "--json", "--ledger", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert {"path", "events", "seconds", "digest"} <= set(document)
    assert document["path"] == str(tmp_path / "ledger.views.db")
    again = json.loads(run_cli("rebuild", "--json", "--ledger", url, cwd=tmp_path).stdout)
    assert again["digest"] == document["digest"]
    conn = sqlite3.connect(tmp_path / "ledger.views.db")
    conn.execute("DELETE FROM checks")
    conn.commit()
    conn.close()
    checked = run_cli("rebuild", "--check", "--ledger", url, cwd=tmp_path)
    assert checked.returncode == 1
    assert "differ: table checks: row (run_id=" in checked.stdout


def test_cli_rebuild_of_a_missing_ledger_is_bad_input(tmp_path: Path) -> None:
    done = run_cli("rebuild", "--ledger", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("ledger: error: no ledger at")
    assert not (tmp_path / "none.db").exists()


def test_check_names_a_missing_row_by_its_whole_key(ledger: Ledger, tmp_path: Path) -> None:
    path = tmp_path / "views.db"
    views.rebuild(ledger, path)
    conn = sqlite3.connect(path)
    run_id, position, test = conn.execute(
        "SELECT run_id, position, test FROM test_cases ORDER BY run_id, position, test LIMIT 1"
    ).fetchone()
    conn.execute("DELETE FROM test_cases WHERE position = ? AND test = ?", (position, test))
    conn.commit()
    conn.close()
    difference = views.check(ledger, path)["difference"]
    assert difference == (
        f"table test_cases: row (run_id={run_id!r}, position={position!r}, test={test!r}) "
        "only in the rebuild"
    )


def test_catching_up_writes_only_the_rows_an_event_changed(ledger: Ledger, tmp_path: Path) -> None:
    store = views.open_views(tmp_path / "views.db")
    views.catch_up(ledger, store)
    before = dict(store.conn.execute("SELECT run_id || position || test, rowid FROM test_cases"))
    ledger.record("1" * 32, ev.CheckRecorded, name="late", verdict="pass")
    views.catch_up(ledger, store)
    after = dict(store.conn.execute("SELECT run_id || position || test, rowid FROM test_cases"))
    assert after == before  # untouched rows keep their rowids: they were not rewritten
    assert store.digest() == views.rebuild(ledger, tmp_path / "fresh.db")["digest"]
    store.close()


@pytest.mark.postgres
def test_a_postgresql_ledger_keeps_its_views_in_its_schema_or_the_file_named_by_views(
    postgres_url: str, tmp_path: Path
) -> None:
    led = open_ledger(postgres_url)
    try:
        for index in range(2):
            run = _run(index, f"{index + 7:x}" * 32, files=3, shards=2)
            led.append(run.run_id, run.events, artifacts=run.artifacts)
    finally:
        led.close()
    in_schema = run_cli("rebuild", "--check", "--json", "--ledger", postgres_url, cwd=tmp_path)
    assert in_schema.returncode == 0, in_schema.stderr
    assert json.loads(in_schema.stdout)["path"] == "schema ledger_views"
    assert json.loads(in_schema.stdout)["identical"] is True
    path = tmp_path / "pg-views.db"
    built = run_cli("rebuild", "--json", "--views", str(path), "--ledger", postgres_url,
                    cwd=tmp_path)  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["runs"] == 2
    checked = run_cli("rebuild", "--check", "--json", "--views", str(path), "--ledger",
                      postgres_url, cwd=tmp_path)  # fmt: skip
    assert checked.returncode == 0 and json.loads(checked.stdout)["identical"] is True


def test_views_of_an_older_layout_are_dropped_and_caught_up_anew(
    ledger: Ledger, tmp_path: Path
) -> None:
    path = tmp_path / "views.db"
    fresh = views.rebuild(ledger, path)["digest"]
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE runs ADD COLUMN legacy TEXT")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    store = views.open_views(path)
    assert store.position() == 0
    views.catch_up(ledger, store)
    assert store.digest() == fresh
    store.close()
