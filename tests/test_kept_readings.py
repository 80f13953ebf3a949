"""`ledger show` and `ledger verdict` answer from a reading kept for the run's exact events and
this code, and never from one that no longer holds: an append since, an edited row, other code
or a broken chain all make the answer from the events again (issue 15: the fold's imports were
most of these commands' 0.6 s on a large ledger)."""

from __future__ import annotations

import json
import random
import sqlite3
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.errors import BrokenRun
from release_ledger.ledger import kept_readings, queries, replay
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.service import Ledger
from tests.adversarial.kit import ph, set_state, state_at
from tests.gatekit import gate
from tests.gatekit import ledger_url as gate_ledger_url
from tests.gitrepo import commit, make_repo, tag
from tests.ledgerkit import run_cli
from tests.synthetic_runs import synthetic_run
from tests.test_startup_imports import _heavy, _imported

RUN = "ab" * 16


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    """One completed synthetic run that asked questions, appended as a gate appends it."""
    opened = open_ledger(ledger_url)
    run = synthetic_run(random.Random(7), RUN, files=5, questions=2)
    opened.append(run.run_id, run.events, artifacts=run.artifacts)
    yield opened
    opened.close()


def _kept_rows(ledger: Ledger) -> list[tuple[object, ...]]:
    try:
        return ledger.store._query("SELECT run_id, length FROM ledger_readings")
    except Exception:
        return []


def test_the_first_reading_is_kept_and_the_next_serves_the_same_answers(ledger: Ledger) -> None:
    made, length, _ = kept_readings.make_reading(ledger, RUN)
    assert _kept_rows(ledger) == []
    first = queries.run_reading(ledger, RUN)
    assert _kept_rows(ledger) == [(RUN, length)]
    second = queries.run_reading(ledger, RUN)
    assert first == second == json.loads(json.dumps(made, default=str))
    assert replay.verdict_for(ledger, RUN)["status"] == first["verdict"]["status"]


def test_a_reading_made_before_an_append_is_not_served_after_it(ledger: Ledger) -> None:
    before = queries.run_reading(ledger, RUN)
    ledger.record(RUN, ev.RunInterrupted, reason="operator")
    after = queries.run_reading(ledger, RUN)
    assert len(after["events"]) == len(before["events"]) + 1
    assert after["events"][-1]["kind"] == "RunInterrupted"
    assert _kept_rows(ledger) == [(RUN, len(after["events"]))]


def test_an_edited_kept_reading_is_not_believed(ledger: Ledger) -> None:
    honest = queries.run_reading(ledger, RUN)
    forged = dict(honest, verdict={**honest["verdict"], "status": "passed", "introduced": []})
    mark = ph(ledger)
    for body in (zlib.compress(json.dumps(forged, sort_keys=True).encode()), b"not zlib"):
        ledger.store.execute_raw(
            f"UPDATE ledger_readings SET body = {mark} WHERE run_id = {mark}", (body, RUN)
        )
        assert queries.run_reading(ledger, RUN) == honest


def test_a_reading_kept_by_other_code_is_not_served(ledger: Ledger) -> None:
    honest = queries.run_reading(ledger, RUN)
    kept = ledger.store.kept_reading(RUN)
    assert kept is not None
    other = dict(honest, grouped=[])
    body = json.dumps(other, sort_keys=True, separators=(",", ":"))
    key = ledger.sealing_key()
    assert key is not None
    kept_readings.keep(ledger, RUN, body, kept.length, kept.tip, "another-version-of-the-code", key)
    assert queries.run_reading(ledger, RUN) == honest


def test_a_broken_chain_is_refused_even_with_a_kept_reading(ledger: Ledger) -> None:
    queries.run_reading(ledger, RUN)
    state = state_at(ledger, RUN, 2)
    set_state(ledger, RUN, 2, state.replace(b'"at":"', b'"at":"1', 1))
    with pytest.raises(BrokenRun):
        queries.run_reading(ledger, RUN)
    with pytest.raises(BrokenRun):
        replay.verdict_for(ledger, RUN)


def test_a_reader_never_waits_for_a_writer_to_keep_its_reading(tmp_path: Path) -> None:
    """While another process holds the ledger's write lock (a gate appending), `ledger show`
    answers at once and keeps nothing, instead of waiting out the writers' 30 s lock wait."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = open_ledger(url)
    run = synthetic_run(random.Random(7), RUN, files=3)
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    ledger.close()
    writer = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        shown = run_cli("show", RUN[:8], "--json", "--ledger", url, cwd=tmp_path, timeout=20)
        waited = time.monotonic() - started
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run_id"] == RUN and waited < 15
    ledger = open_ledger(url)
    try:
        assert ledger.store.kept_reading(RUN) is None
    finally:
        ledger.close()


def test_show_and_verdict_print_the_same_from_a_kept_reading(
    ledger_url: str, tmp_path: Path
) -> None:
    ledger = open_ledger(ledger_url)
    run = synthetic_run(random.Random(7), RUN, files=8, questions=1)
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    ledger.close()
    commands = [["show", RUN[:8]], ["show", RUN[:8], "--all"], ["show", RUN[:8], "--json"],
                ["verdict", RUN[:8]], ["verdict", RUN[:8], "--json"]]  # fmt: skip
    made = [run_cli(*args, "--ledger", ledger_url, cwd=tmp_path) for args in commands]
    kept = [run_cli(*args, "--ledger", ledger_url, cwd=tmp_path) for args in commands]
    for args, a, b in zip(commands, made, kept, strict=True):
        assert (a.returncode, a.stdout) == (b.returncode, b.stdout), args
    assert "×" in made[0].stdout  # the grouped timeline, as `show` without --all prints it
    assert made[1].stdout.count("\n") > made[0].stdout.count("\n")


def test_a_kept_reading_loads_no_event_model(ledger_url: str, tmp_path: Path) -> None:
    """With the reading kept, `show` and `verdict` import neither pydantic nor the fold; the
    first reader (the control) and a replay under another rule do."""
    ledger = open_ledger(ledger_url)
    run = synthetic_run(random.Random(7), RUN, files=4)
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    ledger.close()
    first, _ = _imported(["show", RUN, "--json", "--ledger", ledger_url], tmp_path)
    assert "release_ledger.domain.events" in first and "pydantic" in first
    for args in (["show", RUN, "--json"], ["verdict", RUN, "--json"]):
        names, out = _imported([*args, "--ledger", ledger_url], tmp_path, codes=(0, 1, 3, 4))
        assert _heavy(names) == [], f"`ledger {' '.join(args)}` imported {_heavy(names)}"
        assert json.loads(out)["run_id"] == RUN
    strict = ["verdict", RUN, "--rule", "strict", "--json", "--ledger", ledger_url]
    replayed, _ = _imported(strict, tmp_path, codes=(0, 1, 3, 4))
    assert "release_ledger.domain.run_state" in replayed


PASS = "def test_ok():\n    pass\n"


def test_a_gate_keeps_its_reading_for_the_first_show(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"tests/test_a.py": PASS, "tests/test_b.py": PASS})
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": PASS.replace("ok", "still_ok")}, "renames a test")
    result = gate(tmp_path, repo)
    assert result.code == 0, result.stderr
    run_id = result.document["run_id"]
    ledger = open_ledger(gate_ledger_url(tmp_path), create=False)
    try:
        kept = ledger.store.kept_reading(run_id)
        assert kept is not None and kept.length == ledger.store.tip(run_id)[0]
        assert json.loads(kept.body)["verdict"]["status"] == result.document["status"] == "passed"
    finally:
        ledger.close()


def test_every_module_of_the_event_store_is_in_the_code_digest() -> None:
    """A kept reading goes stale on any change to the store's code: every module the store is
    made of (the parts `adapters/event_store.py` composes, and its opening) is read by the
    code digest."""
    import fnmatch
    import sys

    import release_ledger.adapters.event_store
    import release_ledger.adapters.store_open  # the store as the ledger opens it
    from release_ledger.adapters.source_digest import READING_SOURCES, ROOT

    assert release_ledger.adapters.event_store.EventStore
    assert release_ledger.adapters.store_open.open_store
    parts = [
        Path(str(module.__file__)).resolve().relative_to(ROOT).as_posix()
        for name, module in sorted(sys.modules.items())
        if name == "release_ledger.adapters.event_store"
        or name.startswith("release_ledger.adapters.store_")
    ]
    assert len(parts) >= 10  # event_store and its parts
    uncovered = [p for p in parts if not any(fnmatch.fnmatch(p, s) for s in READING_SOURCES)]
    assert uncovered == []
