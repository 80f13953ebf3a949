"""5. Writers wait instead of failing: 8 writer processes x 50 appends, each process opening
the ledger as `ledger check` does (open, append one event per transaction, close): 0 refused,
0 lost, the chain whole, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ledgerkit import REPO_ROOT, open_ledger, start_run

WRITERS = 8
APPENDS = 50

# Each writer opens the ledger afresh for every append (as 50 `ledger check` commands would:
# opening creates missing tables, so it writes too), and counts refusals instead of dying.
WRITER = """
import sys, time
from pathlib import Path
from release_ledger.adapters.clock import SystemClock
from release_ledger.domain.events import CheckRecorded
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.service import Ledger

url, run_id, name, count, sync = sys.argv[1:6]
count, sync = int(count), Path(sync)
(sync / f"ready-{name}").touch()
while not (sync / "go").exists():
    time.sleep(0.001)
refused = 0
for i in range(count):
    try:
        ledger = open_ledger(url, clock=SystemClock())
        try:
            ledger.record(run_id, CheckRecorded, name=f"{name}-{i}", verdict="pass", by=name)
        finally:
            ledger.close()
    except Exception as error:
        refused += 1
        print(f"refused: {type(error).__name__}: {error}", file=sys.stderr)
print(refused)
"""


@pytest.mark.slow
def test_eight_writers_fifty_appends_each_none_refused_none_lost(
    ledger_url: str, tmp_path: Path
) -> None:
    ledger = open_ledger(ledger_url)
    run = start_run(ledger)
    ledger.close()
    sync = tmp_path / "sync"
    sync.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, ledger_url, run, f"w{n}", str(APPENDS), str(sync)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(WRITERS)
    ]
    deadline = time.monotonic() + 120
    while not all((sync / f"ready-w{n}").exists() for n in range(WRITERS)):
        assert time.monotonic() < deadline, "writers did not start"
        time.sleep(0.01)
    (sync / "go").touch()
    refused = 0
    errors = []
    for w in writers:
        out, err = w.communicate(timeout=600)
        assert w.returncode == 0, err
        refused += int(out.strip().splitlines()[-1])
        errors.extend(line for line in err.splitlines() if line.startswith("refused"))
    assert refused == 0, errors[:5]
    ledger = open_ledger(ledger_url)
    try:
        names = [e.name for e in ledger.events(run) if e.kind == "CheckRecorded"]  # type: ignore[attr-defined]
        assert len(names) == WRITERS * APPENDS and len(set(names)) == len(names)
        assert all(r.ok for r in ledger.verify(run))
    finally:
        ledger.close()
