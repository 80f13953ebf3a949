"""Two real processes appending to one run of one ledger lose nothing and keep the chain whole."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ledgerkit import REPO_ROOT, open_ledger, start_run

EVENTS_PER_WRITER = 500

# Each writer opens the ledger, says it is ready, waits for the go file, then appends its
# events one at a time (one transaction each), so the two really compete for the tip.
WRITER = """
import sys, time
from pathlib import Path
from release_ledger.adapters.clock import SystemClock
from release_ledger.domain.events import FileMeasured
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.service import Ledger

url, run_id, name, count, sync = sys.argv[1:6]
count, sync = int(count), Path(sync)
ledger = open_ledger(url, clock=SystemClock())
(sync / f"ready-{name}").touch()
while not (sync / "go").exists():
    time.sleep(0.001)
started = time.time()
for i in range(count):
    ledger.record(run_id, FileMeasured, file=f"{name}/{i}", rss_mb=1.0, seconds=0.0)
(sync / f"window-{name}").write_text(f"{started} {time.time()}")
ledger.close()
"""


def _race(url: str, tmp_path: Path) -> str:
    ledger = open_ledger(url)
    run = start_run(ledger)
    ledger.close()
    sync = tmp_path / "sync"
    sync.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, run, name, str(EVENTS_PER_WRITER), str(sync)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    deadline = time.monotonic() + 60
    while not all((sync / f"ready-{n}").exists() for n in ("a", "b")):
        assert time.monotonic() < deadline, "writers did not start"
        assert all(w.poll() is None for w in writers), [w.communicate()[1] for w in writers]
        time.sleep(0.01)
    (sync / "go").touch()
    for writer in writers:
        _, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
    # Both writers were appending at the same time (whether or not SQLite's lock let their
    # events interleave), so the store really had to arbitrate between them.
    windows = [tuple(map(float, (sync / f"window-{n}").read_text().split())) for n in "ab"]
    assert max(w[0] for w in windows) < min(w[1] for w in windows), windows
    return run


def _check(url: str, run: str) -> None:
    ledger = open_ledger(url)
    try:
        records = ledger.read(run)
        assert [r.position for r in records] == list(range(1, 2 * EVENTS_PER_WRITER + 2))
        files = [str(getattr(r.event, "file", "")) for r in records[1:]]
        for name in ("a", "b"):
            # Every event of each writer landed exactly once, in the writer's own order.
            assert [f for f in files if f.startswith(f"{name}/")] == [
                f"{name}/{i}" for i in range(EVENTS_PER_WRITER)
            ]
        assert [(r.run_id, r.ok, r.events) for r in ledger.verify()] == [
            (run, True, 2 * EVENTS_PER_WRITER + 1)
        ]
        (row,) = ledger.runs()
        assert row.length == 2 * EVENTS_PER_WRITER + 1 and row.tip == records[-1].hash
    finally:
        ledger.close()


@pytest.mark.slow
def test_two_processes_appending_to_one_sqlite_run_lose_nothing(
    sqlite_url: str, tmp_path: Path
) -> None:
    run = _race(sqlite_url, tmp_path)
    _check(sqlite_url, run)


@pytest.mark.slow
@pytest.mark.postgres
def test_two_processes_appending_to_one_postgres_run_lose_nothing(
    postgres_url: str, tmp_path: Path
) -> None:
    run = _race(postgres_url, tmp_path)
    _check(postgres_url, run)


def _read_while_appending(url: str, tmp_path: Path) -> None:
    """A reader checking the run (chain, index and seal) and verifying it while another
    process appends: every read sees a whole run, never a broken one."""
    ledger = open_ledger(url)
    run = start_run(ledger)
    sync = tmp_path / "sync"
    sync.mkdir()
    (sync / "go").touch()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, run, "a", str(EVENTS_PER_WRITER), str(sync)],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    reads = 0
    try:
        while writer.poll() is None:
            records = ledger.read(run)  # raises BrokenRun on any disagreement
            assert [r.position for r in records] == list(range(1, len(records) + 1))
            [result] = ledger.verify(run)
            assert result.ok, result.problem
            reads += 1
    finally:
        _, err = writer.communicate(timeout=300)
        ledger.close()
    assert writer.returncode == 0, err
    assert reads > 3  # the reads really overlapped the appends


@pytest.mark.slow
def test_a_reader_never_sees_a_sqlite_run_broken_by_a_concurrent_append(
    sqlite_url: str, tmp_path: Path
) -> None:
    _read_while_appending(sqlite_url, tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
def test_a_reader_never_sees_a_postgres_run_broken_by_a_concurrent_append(
    postgres_url: str, tmp_path: Path
) -> None:
    _read_while_appending(postgres_url, tmp_path)
