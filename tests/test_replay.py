"""Replaying real gate runs under other rules: `ledger verdict --rule/--compare`, from the ledger
alone, equal to what the gate printed, never appending; read models caught up after the gate."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.gitrepo import commit, git, make_repo
from tests.ledgerkit import run_cli

pytestmark = pytest.mark.slow

V1 = {
    "tests/test_a.py": "def test_a1(): pass\ndef test_a2(): pass\n",
    "tests/test_b.py": "def test_b1(): assert 0, 'preexisting'\ndef test_b2(): pass\n",
    "tests/test_c.py": (
        "import pytest\ndef test_c1(): pass\n"
        "@pytest.mark.skip(reason='later')\ndef test_c2(): pass\n"
    ),
    "tests/test_d.py": "def test_d1(): pass\n",
}
SKIPPED = "tests/test_c.py::test_c2"
PREEXISTING = "tests/test_b.py::test_b1"
INTRODUCED = "tests/test_a.py::test_a2"


@dataclass
class Gates:
    root: Path
    url: str
    benign: str  # run id: skipped test + preexisting failure, nothing introduced
    regressed: str  # run id: test_a2 introduced
    printed: dict[str, dict[str, Any]]  # what `ledger gate --json` printed, per run


def _gate(root: Path, url: str, repo: Path, head: str, rule: str) -> dict[str, Any]:
    done = run_cli(
        "gate", "--base", "v1", "--head", head, "--repo", str(repo), "--jobs", "2",
        "--shards", "4",  # the skipped test's shard apart from the preexisting failure's
        "--rule", rule, "--json", "--ledger", url, cwd=root, timeout=600,
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


@pytest.fixture(scope="module")
def gates(tmp_path_factory: pytest.TempPathFactory) -> Gates:
    root = tmp_path_factory.mktemp("replay")
    repo = make_repo(root, V1)
    git(repo, "tag", "v1")
    commit(repo, {"tests/test_d.py": "def test_d1(): pass\ndef test_d2(): pass\n"}, "benign")
    git(repo, "tag", "rc1")
    commit(repo, {"tests/test_a.py": "def test_a1(): pass\ndef test_a2(): assert 1 == 2\n"})
    url = f"sqlite:///{root / 'ledger' / 'ledger.db'}"
    benign = _gate(root, url, repo, "rc1", "default")
    regressed = _gate(root, url, repo, "HEAD", "strict")
    return Gates(
        root,
        url,
        benign["run_id"],
        regressed["run_id"],
        {benign["run_id"]: benign, regressed["run_id"]: regressed},
    )


def _ledger(g: Gates, *args: str) -> tuple[int, Any]:
    done = run_cli(*args, "--ledger", g.url, cwd=g.root)
    assert done.returncode != 2, done.stderr
    return done.returncode, json.loads(done.stdout) if "--json" in args else done.stdout


def _events(g: Gates) -> int:
    conn = sqlite3.connect(g.root / "ledger" / "ledger.db")
    try:
        return int(conn.execute("SELECT count(*) FROM ledger_events").fetchone()[0])
    finally:
        conn.close()


def test_a_skipped_test_is_unmeasured_under_strict_and_passed_under_default(g: Gates) -> None:
    code, strict = _ledger(g, "verdict", g.benign, "--rule", "strict", "--json")
    assert (code, strict["status"], strict["rule"]) == (3, "unmeasured", "strict")
    assert [u["reason"] for u in strict["unmeasured"]] == ["skipped"]
    code, default = _ledger(g, "verdict", g.benign, "--rule", "default", "--json")
    assert (code, default["status"], default["skipped"]) == (0, "passed", [SKIPPED])
    assert strict["replayed"] is default["replayed"] is True


def test_a_preexisting_failure_fails_under_zero_failures(g: Gates) -> None:
    code, document = _ledger(g, "verdict", g.benign, "--rule", "zero-failures", "--json")
    assert (code, document["status"]) == (1, "failed")
    assert document["preexisting"] == [PREEXISTING] and document["introduced"] == []


def test_compare_lists_exactly_the_tests_and_shards_classified_differently(g: Gates) -> None:
    code, skip = _ledger(g, "verdict", g.benign, "--rule", "strict", "--compare", "default",
                         "--json")  # fmt: skip
    assert code == 3  # the exit code of the first rule's verdict
    assert [v["status"] for v in skip["verdicts"]] == ["unmeasured", "passed"]
    assert skip["differences"]["tests"] == [
        {
            "test": SKIPPED,
            "classifications": [
                {"class": "skipped", "effect": "unmeasured"},
                {"class": "skipped", "effect": "allowed"},
            ],
        }
    ]
    [shard] = skip["differences"]["shards"]
    assert shard["classifications"] == ["unmeasured: skipped", "measured"]
    assert shard["shard"] == skip["verdicts"][0]["unmeasured"][0]["shard"]

    code, zero = _ledger(g, "verdict", g.benign, "--compare", "zero-failures", "--json")
    assert code == 0 and zero["rules"] == ["default", "zero-failures"]
    assert [d["test"] for d in zero["differences"]["tests"]] == [PREEXISTING]
    assert zero["differences"]["shards"] == []

    code, regressed = _ledger(g, "verdict", g.regressed, "--compare", "zero-failures", "--json")
    assert code == 1
    assert [d["test"] for d in regressed["differences"]["tests"]] == [PREEXISTING, SKIPPED]

    code, text = _ledger(g, "verdict", g.benign, "--rule", "strict", "--compare", "default")
    assert SKIPPED in text and "skipped · unmeasured" in text and "skipped · allowed" in text


def test_the_replayed_verdict_is_byte_for_byte_what_the_gate_printed(g: Gates) -> None:
    for run_id, printed in g.printed.items():
        _, replayed = _ledger(g, "verdict", run_id, "--json")
        assert replayed.pop("replayed") is True
        assert json.dumps(replayed, sort_keys=True) == json.dumps(printed, sort_keys=True)


def test_reading_never_appends(g: Gates) -> None:
    before = _events(g)
    for rule in ("strict", "default", "zero-failures"):
        _ledger(g, "verdict", g.regressed, "--rule", rule, "--json")
    _ledger(g, "verdict", g.benign, "--compare", "strict", "--json")
    _ledger(g, "rules", "--json")
    assert _events(g) == before


def test_rules_lists_every_rule_with_version_and_description(g: Gates) -> None:
    code, rules = _ledger(g, "rules", "--json")
    assert code == 0
    assert [r["name"] for r in rules] == ["code-only", "default", "strict", "zero-failures"]
    assert all(r["version"] >= 1 and r["description"] for r in rules)


def test_the_gate_leaves_the_read_models_caught_up_and_equal_to_a_rebuild(g: Gates) -> None:
    views = g.root / "ledger" / "ledger.views.db"
    conn = sqlite3.connect(views)
    try:
        (position,) = conn.execute("SELECT notification_id FROM tracking").fetchone()
        stored = dict(
            conn.execute(
                "SELECT run_id, document FROM verdicts WHERE own = 1 ORDER BY run_id"
            ).fetchall()
        )
    finally:
        conn.close()
    assert position == _events(g)
    for run_id, printed in g.printed.items():
        assert json.loads(stored[run_id]) == printed
    code, checked = _ledger(g, "rebuild", "--check", "--json")
    assert code == 0 and checked["identical"] is True


@pytest.fixture
def g(gates: Gates) -> Gates:
    return gates
