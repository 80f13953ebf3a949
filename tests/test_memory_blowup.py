"""A head that needs far more memory than base is named, never passed; and no budget, and no
sum of running reservations, is more than the machine has."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from release_ledger.ledger.options import GateOptions
from release_ledger.ledger.steps.parallel import MemoryRoom
from tests.gatekit import events, gate, holding, run_ledger
from tests.gitrepo import commit, make_repo, tag

FAST = "def test_one():\n    assert True\n"


def test_budgets_are_lowered_to_what_the_machine_has_and_the_gate_says_so() -> None:
    options = GateOptions(repo=Path("."), base="v1", budget_gib=8.0, machine_mb=6000.0)
    assert options.budget_mb == 6000.0 and options.isolation_budget_mb == 6000.0
    said = options.lowered()
    assert "the shard budget (--budget-gib) is lowered from 8192 MB to 6000 MB" in said[0]
    assert "the isolation budget (--isolation-budget-gib) is lowered from 32768 MB" in said[1]
    roomy = GateOptions(repo=Path("."), base="v1", budget_gib=1.0, machine_mb=64000.0)
    assert roomy.lowered() == [] and roomy.isolation_budget_mb == 4096.0


def test_running_reservations_never_sum_past_the_machine() -> None:
    room = MemoryRoom(100.0)
    running, most = [0.0], [0.0]
    lock = threading.Lock()

    def run(limit: float) -> None:
        with room.held(limit):
            with lock:
                running[0] += min(limit, 100.0)
                most[0] = max(most[0], running[0])
            time.sleep(0.05)
            with lock:
                running[0] -= min(limit, 100.0)

    threads = [threading.Thread(target=run, args=(mb,)) for mb in (60, 60, 30, 150, 10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(t.is_alive() for t in threads)  # one over the machine still runs, alone
    assert most[0] <= 100.0


@pytest.mark.slow
def test_a_memory_blow_up_at_head_only_is_an_oom_finding_that_fails_the_gate(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": FAST, "tests/test_heavy.py": holding(20)})
    tag(repo, "v1")
    commit(repo, {"tests/test_heavy.py": holding(900)}, "head: the test holds 900 MB")
    result = gate(tmp_path, repo, "--budget-gib", "0.3", "--isolation-budget-gib", "0.5",
                  "--timeout", "120", "--rounds", "1")  # fmt: skip
    assert result.code == 1, result.stderr
    document = result.document
    (blown,) = document["oom"]
    assert blown["file"] == "tests/test_heavy.py"
    assert blown["head_mb"] > 400 and blown["base_mb"] < 200
    assert any("ran out of memory alone at head only" in r for r in document["reasons"])
    shown = run_ledger(tmp_path, "show", str(document["run_id"])).stdout
    assert "oom          tests/test_heavy.py ran out of memory at head (killed at " in shown
    (started,) = [e for e in events(tmp_path, str(document["run_id"])) if e["kind"] == "RunStarted"]
    assert started["options"]["machine_mb"] > 0  # what this machine had, recorded
