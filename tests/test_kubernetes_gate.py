"""`ledger gate --executor kubernetes` end to end over two loopback API stand-in members.

Files are measured locally; shards run as Jobs on the pool, whose pods clone the repository
through a `file://` URL and run the shard command as local subprocesses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gatekit import events, gate, run_ledger
from tests.gitrepo import commit, make_repo, tag
from tests.k8s_standin import StandinMember, standin_pool

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow]

BASE = {
    "tests/test_math.py": "def test_add():\n    assert 1 + 1 == 2\n\n\ndef test_sub():\n    pass\n",
    "tests/test_old.py": "def test_known_bug():\n    assert 0\n",
    "tests/test_io.py": "def test_read():\n    pass\n",
    "tests/test_text.py": "def test_upper():\n    assert 'a'.upper() == 'A'\n",
}
HEAD = {
    "tests/test_math.py": "def test_add():\n    assert 2 == 2\n\n\ndef test_sub():\n    assert 0\n",
    "tests/test_new.py": "def test_new():\n    pass\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path, BASE)
    tag(repo, "v1")
    commit(repo, HEAD, "break test_sub, add test_new")
    return repo


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, StandinMember]]:
    with standin_pool(tmp_path / "pool", ["east", "west"]) as (members, kubeconfig):
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        yield members


def k8s_gate(tmp_path: Path, repo: Path, *extra: str) -> tuple[int, dict[str, object], str]:
    result = gate(
        tmp_path,
        repo,
        "--executor", "kubernetes", "--pool", "east,west", "--source", f"file://{repo}",
        "--shards", "2", "--timeout", "60", *extra,
    )  # fmt: skip
    return result.code, (result.document if result.stdout.strip() else {}), result.stderr


def test_gate_re_places_the_shards_of_a_member_whose_machinery_fails_every_pod(
    tmp_path: Path, repo: Path, pool: dict[str, StandinMember]
) -> None:
    pool["west"].fault = "Evicted"

    code, document, stderr = k8s_gate(tmp_path, repo)

    assert code == 1, (document, stderr)
    assert document["introduced"] == ["tests/test_math.py::test_sub"]
    assert "tests/test_old.py::test_known_bug" in document["preexisting"]
    evs = events(tmp_path, str(document["run_id"]))
    failures = [e for e in evs if e["kind"] == "PodFailed"]
    assert failures and {(e["member"], e["reason"]) for e in failures} == {("west", "Evicted")}
    assert {e["failure_kind"] for e in failures} == {"infrastructure"}
    failed_shards = {e["shard"] for e in failures}
    rounds = [e for e in evs if e["kind"] == "PoolMeasured"]
    assert len(rounds) >= 2  # measured again before the next round
    placed = [e for e in evs if e["kind"] == "ShardPlaced"]
    for shard in failed_shards:
        members = [e["member"] for e in placed if e["shard"] == shard]
        assert members[0] == "west" and members[-1] == "east", placed
    measured_on_east = {
        (e["shard"], e["revision"])
        for e in evs
        if e["kind"] == "ShardAttemptRecorded"
        and e["member"] == "east"
        and e["exit_code"] in (0, 1)
    }
    assert {(s, r) for s in failed_shards for r in ("head", "base")} <= measured_on_east
    assert pool["east"].live_jobs() == [] and pool["west"].live_jobs() == []
    timeline = run_ledger(tmp_path, "show", str(document["run_id"])).stdout
    assert "failed on west: Evicted" in timeline and "re-placed from west" in timeline


def test_a_pod_out_of_its_own_memory_is_the_shards_outcome_bisected_not_the_members_fault(
    tmp_path: Path, repo: Path, pool: dict[str, StandinMember]
) -> None:
    """On a one-member pool, an OOMKilled pod once banned the member: every retry was then
    `unplaced`, nothing was bisected and no culprit named."""
    pool["east"].fault = "OOMKilled"

    result = gate(
        tmp_path, repo, "--executor", "kubernetes", "--pool", "east", "--source",
        f"file://{repo}", "--shards", "1", "--timeout", "60", "--rounds", "0",
        "--budget-gib", "4",  # children of a killed shard reserve the budget: room for four
    )  # fmt: skip

    assert result.code in (3, 4), (result.stdout, result.stderr)
    document = result.document
    evs = events(tmp_path, str(document["run_id"]))
    attempts = [e for e in evs if e["kind"] == "ShardAttemptRecorded"]
    assert attempts and all(e["infrastructure_failure"] != "unplaced" for e in attempts)
    assert {e["failure_kind"] for e in attempts} == {"oom"}
    assert any(e["kind"] == "ShardSplit" for e in evs)  # bisected like a local oom
    culprits = {f for u in document["unmeasured"] for f in u["culprits"]}
    assert culprits and {u["reason"] for u in document["unmeasured"]} == {"oom"}


def test_unreachable_pool_is_unmeasured_with_every_member_recorded_within_two_minutes(
    tmp_path: Path, repo: Path, pool: dict[str, StandinMember]
) -> None:
    pool["east"].stop()
    pool["west"].http_500 = -1

    started = time.monotonic()
    code, document, stderr = k8s_gate(tmp_path, repo)

    assert time.monotonic() - started < 120
    assert code == 3, (document, stderr)
    evs = events(tmp_path, str(document["run_id"]))
    leases = [m for e in evs if e["kind"] == "PoolMeasured" for m in e["members"]]
    reasons = {m["member"]: m["reason"] for m in leases}
    assert reasons["east"] == "connection refused"
    assert reasons["west"].startswith("HTTP 500")
    assert not any(e["kind"] == "ShardPlaced" for e in evs)


def test_unreachable_pool_verdict_names_every_member_with_its_reason(
    tmp_path: Path, repo: Path, pool: dict[str, StandinMember]
) -> None:
    pool["east"].stop()
    pool["west"].http_500 = -1

    code, document, stderr = k8s_gate(tmp_path, repo)

    assert code == 3
    shown = json.dumps(document) + stderr
    assert "east" in shown and "connection refused" in shown, shown
    assert "west" in shown and "HTTP 500" in shown, shown


def test_unknown_context_is_exit_2_naming_it_before_anything_is_appended(
    tmp_path: Path, repo: Path, pool: dict[str, StandinMember]
) -> None:
    result = gate(
        tmp_path, repo, "--executor", "kubernetes", "--pool", "east,nowhere",
        "--source", f"file://{repo}",
    )  # fmt: skip

    assert result.code == 2
    assert result.stderr.count("\n") == 1 and "'nowhere'" in result.stderr
    assert run_ledger(tmp_path, "runs", "--json").stdout.count("run_id") == 0


def test_each_pod_prepares_its_revisions_environment_before_running(
    tmp_path: Path, pool: dict[str, StandinMember]
) -> None:
    from tests.test_environments import src_layout

    repo = make_repo(tmp_path, src_layout(1, "1.0"), name="shiny")
    tag(repo, "v1")
    commit(repo, src_layout(2, "2.0"), "value 2")

    code, document, stderr = k8s_gate(tmp_path, repo)

    assert (code, document.get("status")) == (0, "passed"), (
        document.get("reasons"),
        document.get("unmeasured"),
        stderr,
    )
    evs = events(tmp_path, str(document["run_id"]))
    in_pods = [e for e in evs if e["kind"] == "EnvironmentPrepared" and e["where"] != "local"]
    assert {e["revision"] for e in in_pods} == {"head", "base"}
    assert all(e["status"] == "ready" and e["project"] == "shiny" for e in in_pods), in_pods
    assert {e["where"] for e in in_pods} <= {"east", "west"}
