"""Commands that read only the ledger's own indexes start light: `ledger runs`, `ledger
questions` and `ledger rules` never import the event models (pydantic), the fold, the JUnit
reader or the table renderers. Start-up is most of these commands' time on a large ledger
(issue 15: < 0.3 s each, start-up included), so an import that creeps back in fails here
rather than silently in a benchmark. Each command runs as a real process under
`python -X importtime`, which names every module it imported."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from release_ledger.ledger.bootstrap import open_ledger
from tests.synthetic_runs import synthetic_run

ROOT = Path(__file__).resolve().parent.parent

# Modules (and their submodules) an index-only command must not import.
HEAVY = (
    "pydantic",
    "pydantic_core",
    "release_ledger.domain.events",
    "release_ledger.domain.execution",
    "release_ledger.domain.run_state",
    "release_ledger.domain.junit",
    "release_ledger.domain.verdict",
    "release_ledger.projections",
    "sqlite_utils",
    "rich",
)


def _imported(args: list[str], cwd: Path, codes: tuple[int, ...] = (0,)) -> tuple[set[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "LEDGER_URL"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "release_ledger", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in codes, done.stderr[-2000:]
    names = {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return names, done.stdout


def _heavy(names: set[str]) -> list[str]:
    return sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))


# What no reading command imports, on either backend: it reads through one plain connection,
# so the eventsourcing library (its recorders, its domain module), PostgreSQL's connection
# pool (with its worker threads) and psycopg 3 (0.25 s to import; a reader uses psycopg2,
# `adapters/pg_reader.py`) load only in a process that writes.
STORE_MACHINERY = ("eventsourcing", "psycopg_pool", "psycopg")

READING = [
    ["runs", "--json"],
    ["runs"],
    ["questions", "--json"],
    ["show", "01" * 16, "--json"],
    ["show", "01" * 16],
    ["verdict", "01" * 16, "--json"],
    ["verdict", "01" * 16],
]
READING_IDS = ["runs", "runs-table", "questions", "show", "show-text", "verdict", "verdict-text"]


def _machinery(names: set[str]) -> list[str]:
    return sorted(n for n in names if any(n == m or n.startswith(m + ".") for m in STORE_MACHINERY))


def _fill(url: str) -> str:
    """Three completed runs that asked questions, appended as a gate appends them."""
    ledger = open_ledger(url)
    rng = random.Random(15)
    try:
        for index in range(3):
            run = synthetic_run(rng, f"{index + 1:02x}" * 16, files=4, questions=2,
                                rule=("strict", "default", "zero-failures")[index])  # fmt: skip
            ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    finally:
        ledger.close()
    return url


@pytest.fixture
def ledger_file(tmp_path: Path) -> str:
    """Three completed runs that asked questions, appended as a gate appends them."""
    return _fill(f"sqlite:///{tmp_path / 'ledger.db'}")


@pytest.fixture
def any_ledger(ledger_url: str) -> str:
    """The same three runs on SQLite and on PostgreSQL."""
    return _fill(ledger_url)


@pytest.mark.parametrize(
    "args",
    [["runs", "--json"], ["questions", "--json"], ["questions", "--limit", "1"], ["rules"]],
    ids=["runs", "questions", "questions-text", "rules"],
)
def test_index_only_commands_import_no_event_model(
    args: list[str], ledger_file: str, tmp_path: Path
) -> None:
    names, out = _imported([*args, "--ledger", ledger_file], tmp_path)
    assert _heavy(names) == [], f"`ledger {' '.join(args)}` imported {_heavy(names)}"
    if args == ["runs", "--json"]:
        listed = json.loads(out)
        assert len(listed) == 3
        # Completed runs show their verdict (remembered with the append), not "completed".
        assert all(row["status"] not in ("completed", "running", "broken") for row in listed)
    if args == ["questions", "--json"]:
        assert json.loads(out), "the synthetic runs leave questions open"


def test_rules_opens_no_store(tmp_path: Path) -> None:
    """`ledger rules` names the rules without the event store (eventsourcing) either."""
    names, out = _imported(["rules", "--json"], tmp_path)
    assert not any(n.startswith("eventsourcing") for n in names)
    assert {r["name"] for r in json.loads(out)} >= {"strict", "default", "zero-failures"}


def test_the_check_sees_a_replay_import_the_models(ledger_file: str, tmp_path: Path) -> None:
    """The control: a replay folds the run, so the same check finds the event models there
    (the test above cannot pass by reading nothing)."""
    names, _ = _imported(["verdict", "01" * 16, "--json", "--ledger", ledger_file], tmp_path)
    assert "release_ledger.domain.events" in names and "pydantic" in names


@pytest.mark.parametrize("args", READING, ids=READING_IDS)
def test_reading_commands_load_no_store_machinery(
    args: list[str], any_ledger: str, tmp_path: Path
) -> None:
    """A reading command opens no connection pool and never imports the eventsourcing
    library (its import, and on PostgreSQL the pool's connections and threads, were most of
    a read's cost beside psycopg itself)."""
    names, out = _imported([*args, "--ledger", any_ledger], tmp_path)
    assert _machinery(names) == [], f"`ledger {' '.join(args)}` imported {_machinery(names)}"
    assert out.strip()


def test_the_check_sees_a_write_load_the_library(ledger_file: str, tmp_path: Path) -> None:
    """The control: a command that appends builds the library's recorder, so the same check
    finds eventsourcing there."""
    names, _ = _imported(
        ["check", "01" * 16, "lint", "--verdict", "pass", "--json", "--ledger", ledger_file],
        tmp_path,
    )
    assert "eventsourcing.sqlite" in names
