"""Files that kill, hang or exhaust their process are named culprits; the rest is measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gatekit import attempts, events, gate, kinds, run_ledger
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

KILLER = "import os, signal\n\ndef test_dies():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
HANG = "import time\n\ndef test_hangs():\n    time.sleep(120)\n"
HOG = (
    "import time\n\n"
    "def test_hogs():\n"
    "    block = b'x' * (600 * 1024 * 1024)\n"
    "    time.sleep(5)\n"
    "    assert block\n"
)
PASS = "def test_ok():\n    pass\n"
BUG = "def test_known_bug():\n    assert 0\n"


@pytest.fixture(scope="module")
def culprits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], int]:
    """One gate where three files die alone at measurement (signal, timeout, oom): each new
    file is measured alone first (`--measure solo`), with no more room alone than in a shard
    (`--isolation-budget-gib` as the budget), so the hog dies alone too."""
    workdir = tmp_path_factory.mktemp("culprits")
    repo = make_repo(
        workdir,
        {
            "tests/test_ok.py": PASS,
            "tests/test_bug.py": BUG,
            "tests/test_fixed.py": BUG.replace("known_bug", "fixed_bug"),
        },
    )
    tag(repo, "v1")
    commit(
        repo,
        {
            "tests/test_fixed.py": PASS.replace("test_ok", "test_fixed_bug"),
            "tests/test_kill.py": KILLER,
            "tests/test_hang.py": HANG,
            "tests/test_hog.py": HOG,
        },
        "candidate with three bad files",
    )
    result = gate(
        workdir, repo, "--timeout", "6", "--budget-gib", "0.25", "--isolation-budget-gib", "0.25",
        "--measure", "solo",
    )  # fmt: skip
    return workdir, result.document, result.code


def _unmeasured(document: dict[str, Any], file: str) -> dict[str, Any]:
    found = [u for u in document["unmeasured"] if file in u["files"]]
    assert len(found) == 1, document["unmeasured"]
    return found[0]


def test_a_file_that_kills_its_process_is_the_culprit_with_reason_signal(
    culprits: tuple[Path, dict[str, Any], int],
) -> None:
    workdir, document, code = culprits
    assert code == 3 and document["status"] == "unmeasured"
    entry = _unmeasured(document, "tests/test_kill.py")
    assert entry["reason"] == "signal"
    assert entry["culprits"] == ["tests/test_kill.py"]
    failed = {e["file"]: e for e in events(workdir, document["run_id"])
              if e["kind"] == "MeasurementFailed"}  # fmt: skip
    assert failed["tests/test_kill.py"]["signal"] == 9


def test_a_hanging_test_hits_the_timeout(culprits: tuple[Path, dict[str, Any], int]) -> None:
    _, document, _ = culprits
    entry = _unmeasured(document, "tests/test_hang.py")
    assert entry["reason"] == "timeout"
    assert entry["culprits"] == ["tests/test_hang.py"]


def test_a_file_past_the_memory_limit_is_reason_oom(
    culprits: tuple[Path, dict[str, Any], int],
) -> None:
    _, document, _ = culprits
    entry = _unmeasured(document, "tests/test_hog.py")
    assert entry["reason"] == "oom"
    assert entry["culprits"] == ["tests/test_hog.py"]


def test_siblings_of_culprits_are_measured_and_classified(
    culprits: tuple[Path, dict[str, Any], int],
) -> None:
    workdir, document, _ = culprits
    assert len(document["unmeasured"]) == 3
    assert document["preexisting"] == ["tests/test_bug.py::test_known_bug"]
    assert document["fixed"] == ["tests/test_fixed.py::test_fixed_bug"]
    assert document["tests"]["head"] == 3
    evs = events(workdir, document["run_id"])
    planned = {f for e in evs if e["kind"] == "ShardsPlanned" for s in e["shards"]
               for f in s["files"]}  # fmt: skip
    assert planned == {"tests/test_ok.py", "tests/test_bug.py", "tests/test_fixed.py"}


BASE_KILLER = "import os, signal\n\ndef test_flag():\n    os.kill(os.getpid(), signal.SIGKILL)\n"


def test_bisection_names_a_file_that_dies_only_at_base(tmp_path: Path) -> None:
    """Measurement runs at head only, so the base killer is found by halving its shard."""
    repo = make_repo(
        tmp_path,
        {
            "tests/test_a.py": PASS,
            "tests/test_b.py": BUG,
            "tests/test_c.py": PASS.replace("test_ok", "test_c"),
            "tests/test_flag.py": BASE_KILLER,
        },
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_flag.py": "def test_flag():\n    pass\n"}, "no longer dies")
    result = gate(tmp_path, repo, "--shards", "1", "--rounds", "0", "--timeout", "60")
    document = result.document
    assert result.code == 3, result.stderr
    assert document["status"] == "unmeasured"
    [entry] = document["unmeasured"]
    assert entry["reason"] == "signal"
    assert entry["culprits"] == ["tests/test_flag.py"]
    assert entry["revision"] == "base"
    assert document["preexisting"] == ["tests/test_b.py::test_known_bug"]
    evs = events(tmp_path, document["run_id"])
    splits = [e for e in evs if e["kind"] == "ShardSplit"]
    assert splits and all(s["reason"] == "signal" for s in splits)
    assert kinds(evs)["MeasurementFailed"] == 0
    story = run_ledger(tmp_path, "show", document["run_id"]).stdout
    assert "ShardSplit" in story
    ending = story[story.index("RunCompleted") :]
    assert "tests/test_flag.py" in ending and "signal" in ending, story


POISON = "import os\n\nos.environ['GATE_TEST_POISON'] = '1'\n\ndef test_poison():\n    pass\n"
VICTIM = (
    "import os, signal\n\n"
    "def test_victim():\n"
    "    if os.environ.get('GATE_TEST_POISON'):\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
)


def test_bisection_measures_every_file_when_only_a_combination_dies(tmp_path: Path) -> None:
    """Two files kill their shard together but not alone: halving ends with all measured."""
    repo = make_repo(tmp_path, {"tests/test_a.py": PASS, "tests/test_b.py": BUG})
    tag(repo, "v1")
    commit(repo, {"tests/test_poison.py": POISON, "tests/test_victim.py": VICTIM}, "pair")
    result = gate(tmp_path, repo, "--shards", "1", "--rounds", "0", "--timeout", "60")
    document = result.document
    evs = events(tmp_path, document["run_id"])
    splits = [e for e in evs if e["kind"] == "ShardSplit"]
    assert splits and splits[0]["parent"] == "s01" and splits[0]["reason"] == "signal"
    assert kinds(evs)["MeasurementFailed"] == 0
    counts = attempts(evs)
    assert counts[("s01", "head")] == 1
    assert document["unmeasured"] == [], document["unmeasured"]
    assert document["preexisting"] == ["tests/test_b.py::test_known_bug"]
    assert document["tests"]["head"] == 4
    assert result.code == 0 and document["status"] == "passed"


def test_a_killer_named_by_the_plugin_is_split_off_at_once_when_files_are_not_measured_first(
    tmp_path: Path,
) -> None:
    """--measure never: the killer's shard dies and is retried (a death may be transient);
    the plugin's markers name the file that was running, so one split isolates it: no
    bisection of the healthy files."""
    repo = make_repo(
        tmp_path,
        {"tests/test_a.py": PASS, "tests/test_b.py": BUG, "tests/test_c.py": PASS},
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_kill.py": KILLER}, "adds a killer")
    result = gate(
        tmp_path, repo, "--shards", "1", "--rounds", "1", "--measure", "never", "--timeout", "60"
    )
    document = result.document
    assert result.code == 3, result.stderr
    [entry] = document["unmeasured"]
    assert entry["reason"] == "signal" and entry["revision"] == "head"
    assert entry["culprits"] == ["tests/test_kill.py"]
    assert document["preexisting"] == ["tests/test_b.py::test_known_bug"]
    assert document["tests"]["head"] == 3
    evs = events(tmp_path, document["run_id"])
    assert attempts(evs)[("s01", "head")] == 2  # the first round and one retry
    assert attempts(evs)[("s01", "base")] == 1  # measured at base: not rerun
    [split] = [e for e in evs if e["kind"] == "ShardSplit"]
    assert [c["files"] for c in split["children"]] == [
        ["tests/test_kill.py"],
        ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"],
    ]


def test_without_the_plugin_a_killer_at_head_is_found_by_halving(tmp_path: Path) -> None:
    """Another runner's output names no running file: the shard is halved down to it."""
    repo = make_repo(
        tmp_path,
        {"tests/test_a.py": PASS, "tests/test_b.py": BUG, "tests/test_c.py": PASS},
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_kill.py": KILLER}, "adds a killer")
    plain = "{python} -m pytest -q -p no:cacheprovider --junitxml={junit} {files}"
    result = gate(
        tmp_path, repo, "--shards", "1", "--rounds", "0", "--measure", "never", "--timeout",
        "60", "--command", plain,
    )  # fmt: skip
    document = result.document
    assert result.code == 3, result.stderr
    [entry] = document["unmeasured"]
    assert entry["culprits"] == ["tests/test_kill.py"]
    assert kinds(events(tmp_path, document["run_id"]))["ShardSplit"] >= 2


def test_bisection_names_a_file_that_hangs_only_at_base_with_reason_timeout(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": PASS, "tests/test_hang.py": HANG})
    tag(repo, "v1")
    commit(repo, {"tests/test_hang.py": "def test_hangs():\n    pass\n"}, "no longer hangs")
    result = gate(tmp_path, repo, "--shards", "1", "--rounds", "0", "--timeout", "15")
    document = result.document
    assert result.code == 3, result.stderr
    [entry] = document["unmeasured"]
    assert entry["reason"] == "timeout" and entry["revision"] == "base"
    assert entry["culprits"] == ["tests/test_hang.py"]
    splits = [e for e in events(tmp_path, document["run_id"]) if e["kind"] == "ShardSplit"]
    assert [s["reason"] for s in splits] == ["timeout"]
