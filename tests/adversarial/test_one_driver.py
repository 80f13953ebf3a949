"""3. One driver per run. A second `resume` while the gate drives the run exits at once naming
the holder, appending nothing; a driver that was killed is taken over (after its lease lapses,
or at once when it is a dead process of this machine); a driver whose lease was taken over
can never append again; no event is ever duplicated. On today's main a `resume` during the
gate appended alongside it (duplicate measurements, double CPU)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from release_ledger.domain import events as ev
from tests.gatekit import GATE_DEFAULTS, attempts, events, kinds, run_ledger, start_process
from tests.gitrepo import commit, make_repo, tag
from tests.ledgerkit import measured, open_ledger, start_run


def test_a_live_lease_is_named_and_a_lapsed_one_taken_over(ledger_url: str) -> None:
    from release_ledger.adapters.event_store import LeaseHeld

    a, b = open_ledger(ledger_url), open_ledger(ledger_url)
    try:
        run = start_run(a)
        with a.driving(run):
            with pytest.raises(LeaseHeld, match=r"being driven by .* pid " + str(os.getpid())):
                b.store.acquire_lease(run, "someone else", 30)
            a.append(run, [measured(a, run, 1)])
        # A holder on another machine that stopped renewing: taken over once it lapses.
        a.store.acquire_lease(run, "elsewhere pid 1 (gone)", 0.3)
        with pytest.raises(LeaseHeld):
            b.store.acquire_lease(run, "b", 30)
        time.sleep(0.5)
        with b.driving(run):
            b.append(run, [measured(b, run, 2)])
    finally:
        a.close()
        b.close()


def test_a_driver_whose_lease_was_taken_over_cannot_append(ledger_url: str) -> None:
    from release_ledger.adapters.event_store import LeaseLost

    ledger = open_ledger(ledger_url)
    try:
        run = start_run(ledger)
        old = ledger.store.acquire_lease(run, "old driver", 0.2)
        time.sleep(0.4)
        ledger.store.acquire_lease(run, "new driver", 30)
        length = ledger.store.tip(run)[0]
        with pytest.raises(LeaseLost):
            ledger.store.append(run, [measured(ledger, run, 1)], lease=old)
        assert ledger.store.tip(run)[0] == length
    finally:
        ledger.close()


def test_a_driver_stops_when_another_appended_its_kind_of_event(ledger_url: str) -> None:
    """Owner input (answers, checks) may arrive while the gate drives; anything else means a
    second driver, and the first stops rather than append a duplicate."""
    from release_ledger.adapters.event_store import LeaseLost

    driver, other = open_ledger(ledger_url), open_ledger(ledger_url)
    try:
        run = start_run(driver)
        with driver.driving(run):
            other.record(run, ev.CheckRecorded, name="docs", verdict="pass")
            driver.append(run, [measured(driver, run, 1)])  # moves past the owner's input
            other.append(run, [measured(other, run, 1)])  # an intruder's measurement
            with pytest.raises(LeaseLost, match="another process appended FileMeasured"):
                driver.append(run, [measured(driver, run, 2)])
    finally:
        driver.close()
        other.close()


def _repo(workdir: Path) -> tuple[Path, Path]:
    hold = workdir / "hold"
    slow = (
        "import os, time\n\n"
        f"HOLD = {str(hold)!r}\n\n"
        "def test_slow():\n"
        "    while os.path.exists(HOLD):\n"
        "        time.sleep(0.05)\n"
    )
    repo = make_repo(
        workdir,
        {"tests/test_a.py": "def test_a():\n    pass\n", "tests/test_slow.py": slow},
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": "def test_a():\n    assert 0\n"}, "regression")
    return repo, hold


def _run_id(workdir: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = run_ledger(workdir, "runs", "--json")
        if result.code == 0 and '"run_id"' in result.stdout:
            import json

            return str(json.loads(result.stdout)[0]["run_id"])
        time.sleep(0.2)
    raise AssertionError("the gate never started a run")


@pytest.mark.slow
def test_resume_during_a_live_gate_exits_at_once_and_kill_9_is_taken_over(
    tmp_path: Path,
) -> None:
    repo, hold = _repo(tmp_path)
    hold.touch()
    gate = start_process(
        tmp_path, "gate", "--base", "v1", "--repo", str(repo), *GATE_DEFAULTS,
        "--shards", "1", "--timeout", "120", "--measure", "never", "--json",
    )  # fmt: skip
    try:
        run = _run_id(tmp_path)
        deadline = time.monotonic() + 60
        while "ShardsPlanned" not in kinds(events(tmp_path, run)):
            assert time.monotonic() < deadline and gate.poll() is None, "the gate did not plan"
            time.sleep(0.2)
        before = len(events(tmp_path, run))
        started = time.monotonic()
        second = run_ledger(tmp_path, "resume", run)
        assert second.code == 2, second.stdout + second.stderr
        assert time.monotonic() - started < 10
        assert "being driven by" in second.stderr and f"pid {gate.pid}" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        assert len(events(tmp_path, run)) == before  # nothing appended: no RunResumed

        gate.send_signal(signal.SIGKILL)
        gate.communicate(timeout=30)
    finally:
        gate.kill()
    hold.unlink()
    resumed = run_ledger(tmp_path, "resume", run, "--json")  # the dead holder is taken over
    assert resumed.code == 1, resumed.stderr
    assert resumed.document["introduced"] == ["tests/test_a.py::test_a"]
    after = events(tmp_path, run)
    assert set(attempts(after).values()) == {1}  # no attempt recorded twice
    assert kinds(after)["ShardsPlanned"] == 1 and kinds(after)["RunResumed"] == 1
    assert run_ledger(tmp_path, "verify", run).code == 0
