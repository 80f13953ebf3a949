"""The event store behaves the same on SQLite and PostgreSQL: order, artifacts, runs, prefixes,
optimistic concurrency; plus the SQLite file's own promises (mode 0600, WAL)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from release_ledger.adapters.clock import FixedClock
from release_ledger.adapters.event_store import ConcurrencyConflict
from release_ledger.adapters.store_open import sqlite_path
from release_ledger.domain import events as ev
from release_ledger.domain.chain import GENESIS, chain_hash, sha256_hex
from release_ledger.domain.errors import BadInput
from release_ledger.domain.events import event_to_json
from release_ledger.ledger import bootstrap
from release_ledger.ledger.service import Ledger
from tests.ledgerkit import T0, measured, open_ledger, run_cli, start_run


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    opened = open_ledger(ledger_url)
    yield opened
    opened.close()


def _count(ledger: Ledger, table: str) -> int:
    return int(ledger.store._query(f"SELECT count(*) FROM {table}")[0][0])


def test_append_keeps_order_and_numbers_positions_from_one(ledger: Ledger) -> None:
    run = start_run(ledger)
    ledger.append(run, [measured(ledger, run, i) for i in range(5)])
    ledger.append(run, [measured(ledger, run, 5)])
    records = ledger.read(run)
    assert [r.position for r in records] == list(range(1, 8))
    assert [r.event.kind for r in records] == ["RunStarted"] + ["FileMeasured"] * 6
    assert [getattr(r.event, "file", None) for r in records[1:]] == [
        f"tests/test_{i}.py" for i in range(6)
    ]


def test_each_record_links_to_its_predecessor(ledger: Ledger) -> None:
    run = start_run(ledger)
    ledger.append(run, [measured(ledger, run, i) for i in range(3)])
    records = ledger.read(run)
    prev = GENESIS
    for record in records:
        assert record.prev == prev
        assert record.hash == chain_hash(prev, event_to_json(record.event).encode())
        prev = record.hash
    assert ledger.store.tip(run) == (4, prev)


def test_append_returns_what_was_stored(ledger: Ledger) -> None:
    run = start_run(ledger)
    returned = ledger.append(run, [measured(ledger, run, 1), measured(ledger, run, 2)])
    stored = ledger.read(run)[1:]
    assert [(r.position, r.event, r.prev, r.hash) for r in returned] == [
        (r.position, r.event, r.prev, r.hash) for r in stored
    ]


def test_empty_append_writes_nothing(ledger: Ledger) -> None:
    run = start_run(ledger)
    assert ledger.append(run, []) == []
    assert len(ledger.read(run)) == 1


def test_event_for_another_run_is_refused(ledger: Ledger) -> None:
    run = start_run(ledger)
    with pytest.raises(ValueError, match="appended to run"):
        ledger.append(run, [measured(ledger, "ab" * 16, 1)])
    assert len(ledger.read(run)) == 1


def test_streams_of_different_runs_are_independent(ledger: Ledger) -> None:
    first, second = start_run(ledger), start_run(ledger)
    ledger.append(first, [measured(ledger, first, 1)])
    ledger.append(second, [measured(ledger, second, i) for i in range(3)])
    assert [r.position for r in ledger.read(first)] == [1, 2]
    assert [r.position for r in ledger.read(second)] == [1, 2, 3, 4]
    assert ledger.read("cd" * 16) == []


def test_everything_written_reads_back_equal(ledger_url: str) -> None:
    from tests.test_events import SAMPLES

    writer = open_ledger(ledger_url)
    run = start_run(writer)
    report, tail = b"<testsuite tests='1'/>", b"Traceback...\n" * 50
    events: list[ev.Event] = []
    for kind, fields in sorted(SAMPLES.items()):
        fields = dict(fields)
        hashes = ("report_hash", "log_tail_hash", "packages_hash", "check_output_hash", "pins_hash")
        for name in hashes:
            if fields.get(name):
                fields[name] = sha256_hex(report if name == "report_hash" else tail)
        if kind == "ReleaseInspected":  # references its changelog files as artifacts
            fields["changelog_files"] = [
                {"path": "CHANGES.md", "sha256": sha256_hex(report), "size": len(report)}
            ]
        events.append(writer.make(ev.EVENT_TYPES[kind], run, **fields))
    artifacts = {sha256_hex(report): report, sha256_hex(tail): tail}
    writer.append(run, events, artifacts=artifacts)
    writer.close()

    reader = open_ledger(ledger_url)  # a fresh connection, no cached state
    try:
        back = reader.events(run)
        assert back[1:] == events
        assert reader.artifacts_for(back) == artifacts
        assert [r.ok for r in reader.verify(run)] == [True]
        notified = reader.store.notifications(0, limit=100)
        assert [e for _, _, e in notified][1:] == events
        assert {r for _, r, _ in notified} == {run}
    finally:
        reader.close()


# --- artifacts ----------------------------------------------------------------------------


def test_same_bytes_twice_store_one_artifact(ledger: Ledger) -> None:
    data = b"<testsuites/>"
    assert ledger.put_artifact(data) == sha256_hex(data)
    assert ledger.put_artifact(data) == sha256_hex(data)
    run = start_run(ledger)
    for attempt in (1, 2):
        ledger.record(
            run,
            ev.IsolationRecorded,
            artifacts={sha256_hex(data): data},
            file="tests/a.py",
            revision="head",
            report_hash=sha256_hex(data),
            seconds=float(attempt),
        )
    assert _count(ledger, "ledger_artifacts") == 1
    assert ledger.artifact(sha256_hex(data)) == data


def test_artifact_with_wrong_hash_is_refused(ledger: Ledger) -> None:
    run = start_run(ledger)
    with pytest.raises(ValueError, match="do not match"):
        ledger.append(run, [measured(ledger, run, 1)], artifacts={"0" * 64: b"x"})
    assert len(ledger.read(run)) == 1
    assert _count(ledger, "ledger_artifacts") == 0


def test_unknown_artifact_is_none(ledger: Ledger) -> None:
    assert ledger.artifact("0" * 64) is None


def test_artifacts_live_in_the_events_database(ledger_url: str, ledger: Ledger) -> None:
    data = bytes(range(256)) * 40
    ledger.put_artifact(data)
    run = start_run(ledger)
    if ledger_url.startswith("sqlite"):
        files = sorted(p.name for p in sqlite_path(ledger_url).parent.iterdir())
        assert files[0] == "ledger.db" and set(files) <= {
            "ledger.db",
            "ledger.db-wal",
            "ledger.db-shm",
            "ledger.db.key",  # the sealing key (adapters/ledger_key.py), never an artifact
        }
        conn = sqlite3.connect(sqlite_path(ledger_url))
        try:
            assert conn.execute("SELECT data FROM ledger_artifacts").fetchone()[0] == data
            assert conn.execute("SELECT count(*) FROM ledger_events").fetchone()[0] == 1
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            assert conn.execute("SELECT data FROM ledger_artifacts").fetchone()[0] == data
            row = conn.execute("SELECT count(*) FROM ledger_events").fetchone()
            assert row is not None and row[0] == 1
    assert ledger.read(run)


# --- runs and prefixes --------------------------------------------------------------------


def test_runs_are_listed_newest_first(ledger_url: str) -> None:
    clock = FixedClock(T0)
    ledger = bootstrap.open_ledger(ledger_url, clock=clock)
    try:
        ids = []
        for i in range(3):
            ids.append(start_run(ledger, head=str(i) * 40))
            clock.advance(60)
        rows = ledger.runs()
        assert [r.run_id for r in rows] == ids[::-1]
        assert (
            rows[0].head == "2" * 40
            and rows[0].started_at == (T0 + timedelta(minutes=2)).isoformat()
        )
        assert [r.length for r in rows] == [1, 1, 1]
    finally:
        ledger.close()


def test_run_index_tracks_length_and_tip(ledger: Ledger) -> None:
    run = start_run(ledger)
    recorded = ledger.append(run, [measured(ledger, run, i) for i in range(4)])
    (row,) = ledger.runs()
    assert (row.length, row.tip) == (5, recorded[-1].hash)
    assert (row.repo, row.head_ref, row.base_ref) == ("/srv/repo", "main", "v1.0")


def test_prefix_resolution(ledger: Ledger) -> None:
    a1 = start_run(ledger, "aaaa1111" + "0" * 24)
    start_run(ledger, "aaaa2222" + "0" * 24)
    assert ledger.resolve(a1) == a1
    assert ledger.resolve("aaaa1") == a1
    assert ledger.resolve("AAAA1") == a1
    assert ledger.resolve("aaaa1111-0000") == a1  # uuid-style dashes are ignored
    with pytest.raises(BadInput, match="ambiguous: 2 runs"):
        ledger.resolve("aaaa")
    with pytest.raises(BadInput, match="unknown run 'bbbb'"):
        ledger.resolve("bbbb")
    for bad in ("", "zz", "a%", "a_", "aaaa1' OR 1=1 --"):
        with pytest.raises(BadInput, match="unknown run"):
            ledger.resolve(bad)


# --- optimistic concurrency ---------------------------------------------------------------


def test_stale_expected_length_is_a_conflict(ledger_url: str) -> None:
    one, two = open_ledger(ledger_url), open_ledger(ledger_url)
    try:
        run = start_run(two)
        two.append(run, [measured(two, run, 1)], expected_length=1)
        with pytest.raises(ConcurrencyConflict, match="has 2 events, expected 1"):
            one.append(run, [measured(one, run, 2)], expected_length=1)
        assert [r.position for r in one.read(run)] == [1, 2]
    finally:
        one.close()
        two.close()


def test_writer_that_appended_before_still_sees_the_other_writers_events(
    ledger_url: str,
) -> None:
    """No per-process tip cache may hide another writer's append."""
    one, two = open_ledger(ledger_url), open_ledger(ledger_url)
    try:
        run = start_run(one)  # `one` now trusts its cached tip (1 event)
        two.append(run, [measured(two, run, 1)])
        with pytest.raises(ConcurrencyConflict, match="has 2 events, expected 1"):
            one.append(run, [measured(one, run, 2)], expected_length=1)
        events = one.events(run)
        assert len(events) == 2 and getattr(events[1], "file", "") == "tests/test_1.py"
    finally:
        one.close()
        two.close()


def test_two_writers_without_expectation_both_land(ledger_url: str) -> None:
    one, two = open_ledger(ledger_url), open_ledger(ledger_url)
    try:
        run = start_run(one)
        for i in range(5):
            one.append(run, [measured(one, run, 2 * i)])
            two.append(run, [measured(two, run, 2 * i + 1)])
        reader = open_ledger(ledger_url)
        try:
            records = reader.read(run)
            assert [r.position for r in records] == list(range(1, 12))
            files = [getattr(r.event, "file", "") for r in records[1:]]
            assert files == [f"tests/test_{i}.py" for i in range(10)]
            assert [r.ok for r in reader.verify()] == [True]
        finally:
            reader.close()
    finally:
        one.close()
        two.close()


def test_expected_length_matching_appends(ledger: Ledger) -> None:
    run = start_run(ledger)
    ledger.append(run, [measured(ledger, run, 1)], expected_length=1)
    ledger.append(run, [measured(ledger, run, 2)], expected_length=2)
    assert len(ledger.read(run)) == 3


# --- the SQLite file ----------------------------------------------------------------------


def test_sqlite_file_is_private_and_in_wal_mode(sqlite_url: str) -> None:
    ledger = open_ledger(sqlite_url)
    try:
        start_run(ledger)
        path = sqlite_path(sqlite_url)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        for sidecar in (path.with_name("ledger.db-wal"), path.with_name("ledger.db-shm")):
            if sidecar.exists():  # SQLite gives its sidecars the database's permissions
                assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            conn.close()
    finally:
        ledger.close()


def test_sqlite_file_stays_private_under_a_permissive_umask(sqlite_url: str) -> None:
    old = os.umask(0)
    try:
        ledger = open_ledger(sqlite_url)
        ledger.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(sqlite_path(sqlite_url).stat().st_mode) == 0o600


def test_default_ledger_is_created_under_dot_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ledger = bootstrap.open_ledger(None)
    try:
        start_run(ledger)
    finally:
        ledger.close()
    assert (tmp_path / ".ledger" / "ledger.db").is_file()


def test_reading_a_missing_sqlite_ledger_creates_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'none' / 'ledger.db'}"
    ledger = bootstrap.open_ledger(url, create=False)
    try:
        assert ledger.runs() == []
    finally:
        ledger.close()
    assert not (tmp_path / "none").exists()


# --- the command on a new and a filled ledger ---------------------------------------------


def test_runs_json_on_a_new_ledger_is_an_empty_array(ledger_url: str, tmp_path: Path) -> None:
    done = run_cli("runs", "--json", "--ledger", ledger_url, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == []


def test_runs_json_on_the_default_ledger_is_an_empty_array(tmp_path: Path) -> None:
    done = run_cli("runs", "--json", cwd=tmp_path)
    assert (done.returncode, json.loads(done.stdout)) == (0, [])
    assert not (tmp_path / ".ledger").exists()


def test_cli_reads_a_filled_ledger(ledger_url: str, tmp_path: Path) -> None:
    ledger = open_ledger(ledger_url)
    try:
        run = start_run(ledger)
        ledger.append(run, [measured(ledger, run, i) for i in range(3)])
        ledger.record(run, ev.RunCompleted)
    finally:
        ledger.close()
    env = {"LEDGER_URL": ledger_url}

    runs = run_cli("runs", "--json", cwd=tmp_path, env=env)
    assert runs.returncode == 0, runs.stderr
    (row,) = json.loads(runs.stdout)
    assert row["run_id"] == run and isinstance(row["status"], str) and row["status"]
    assert {"run_id", "started_at", "head", "base", "status"} <= set(row)

    show = run_cli("show", run[:6], "--json", cwd=tmp_path, env=env)
    assert show.returncode == 0, show.stderr
    shown = json.loads(show.stdout)
    assert shown["run_id"] == run
    assert [e["kind"] for e in shown["events"]] == ["RunStarted"] + ["FileMeasured"] * 3 + [
        "RunCompleted"
    ]

    text = run_cli("show", run[:6], cwd=tmp_path, env=env)
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 6

    export = run_cli("export", run[:6], cwd=tmp_path, env=env)
    assert export.returncode == 0, export.stderr
    lines = [json.loads(line) for line in export.stdout.splitlines()]
    assert [line["position"] for line in lines] == [1, 2, 3, 4, 5]
    assert lines[0]["prev"] == GENESIS and lines[1]["prev"] == lines[0]["hash"]
    assert lines[-1]["event"]["kind"] == "RunCompleted"

    verify = run_cli("verify", "--json", cwd=tmp_path, env=env)
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["ok"] is True

    table = run_cli("runs", cwd=tmp_path, env=env)
    assert table.returncode == 0 and run[:12] in table.stdout


def test_refused_append_to_a_new_run_leaves_no_trace(ledger: Ledger) -> None:
    run = "ef" * 16
    with pytest.raises(ConcurrencyConflict, match="has 0 events, expected 3"):
        ledger.append(run, [measured(ledger, run, 1)], expected_length=3)
    assert ledger.runs() == [] and ledger.read(run) == []
    assert ledger.store.tip(run) == (0, GENESIS)


def test_run_index_keeps_the_start_when_later_appends_lack_it(ledger: Ledger) -> None:
    run = ledger.new_run_id()
    ledger.append(run, [measured(ledger, run, 0)])  # an event before RunStarted
    start_run(ledger, run)
    ledger.append(run, [measured(ledger, run, 1)])
    (row,) = ledger.runs()
    assert (row.length, row.repo, row.started_at) == (3, "/srv/repo", T0.isoformat())
