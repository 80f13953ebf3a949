"""Helpers for ledger tests: build runs with a fixed clock, and run the real `ledger` command."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from release_ledger.adapters.clock import FixedClock
from release_ledger.domain import events as ev
from release_ledger.ledger import bootstrap
from release_ledger.ledger.service import Ledger

REPO_ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def open_ledger(url: str, start: datetime = T0) -> Ledger:
    return bootstrap.open_ledger(url, clock=FixedClock(start))


def start_run(ledger: Ledger, run_id: str | None = None, head: str = "f" * 40) -> str:
    """Record a RunStarted and return the run id."""
    run_id = run_id or ledger.new_run_id()
    ledger.record(
        run_id,
        ev.RunStarted,
        repo="/srv/repo",
        head_ref="main",
        base_ref="v1.0",
        head=head,
        base="e" * 40,
        rule="strict",
        executor="local",
        command=["pytest", "{files}"],
        tool_version="0.1.0",
    )
    return run_id


def measured(ledger: Ledger, run_id: str, index: int) -> ev.FileMeasured:
    return ledger.make(
        ev.FileMeasured, run_id, file=f"tests/test_{index}.py", rss_mb=float(index), seconds=0.5
    )


def run_cli(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`ledger ARGS` as a real process (python -m release_ledger), importing this checkout."""
    full_env = {k: v for k, v in os.environ.items() if k != "LEDGER_URL"}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH", "")) if p
    )
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "release_ledger", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
