"""Measuring in place: the first plan needs no solo runs, the shard runs measure every file,
memory is planned with a model that holds, and measurements are reused by content.

Real gates on real repositories with real pytest; the files hold and free real memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.memory import FileCost, attempt_limit_mb
from release_ledger.domain.run_state import RunState, ShardView
from tests.gatekit import events, gate, kinds
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow


def keeps(mb: int, name: str = "test_keep") -> str:
    """A test file whose module keeps `mb` MB resident for the rest of the process."""
    return (
        f"KEPT = bytearray({mb} * 1024 * 1024)\n"
        "for i in range(0, len(KEPT), 4096):\n"
        "    KEPT[i] = 1\n"
        f"def {name}():\n"
        "    assert len(KEPT) > 0\n"
    )


def spikes(mb: int) -> str:
    """A test file that touches `mb` MB during its test and frees it."""
    return (
        "def test_spike():\n"
        f"    data = bytearray({mb} * 1024 * 1024)\n"
        "    for i in range(0, len(data), 4096):\n"
        "        data[i] = 1\n"
        "    assert data[0] == 1\n"
    )


def measured(evs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The latest in-place measurement of each file."""
    found: dict[str, dict[str, Any]] = {}
    for e in evs:
        if e["kind"] == "FileMeasured" and e["source"] == "shard":
            found[e["file"]] = e
    return found


def test_the_first_gate_measures_nothing_alone_and_records_each_files_figures(
    tmp_path: Path,
) -> None:
    repo = make_repo(
        tmp_path,
        {
            "tests/test_keep.py": keeps(60),
            "tests/test_spike.py": spikes(120),
            "tests/test_small.py": "def test_small():\n    pass\n",
        },
    )
    tag(repo, "v1")
    commit(repo, {"README": "rc\n"})
    result = gate(tmp_path, repo, "--shards", "1", "--env", "none")
    assert result.code == 0, result.stderr
    evs = events(tmp_path, result.document["run_id"])
    assert all(e.get("source") == "shard" for e in evs if e["kind"] == "FileMeasured")
    attempts = [e for e in evs if e["kind"] == "ShardAttemptRecorded"]
    assert len(attempts) == 2  # one shard, head and base: no run of a file alone
    figures = measured(evs)
    assert set(figures) == {"tests/test_keep.py", "tests/test_spike.py", "tests/test_small.py"}
    keep, spike, small = (figures[f"tests/test_{n}.py"] for n in ("keep", "spike", "small"))
    # test_keep is collected first: its import is kept apart as what the shard's files
    # share (here its own 60 MB); the files collected after it have none.
    assert 50 <= keep["retained_mb"] + keep["shared_mb"] <= 80 and keep["transient_mb"] < 30
    assert spike["shared_mb"] is None and small["shared_mb"] is None
    assert spike["transient_mb"] >= 100 and spike["retained_mb"] < 30
    assert small["retained_mb"] < 10 and small["transient_mb"] < 10
    assert 10 < keep["baseline_mb"] < 200
    assert all(f["blob"] and f["key"] for f in figures.values())


def test_a_first_plan_over_budget_is_split_by_its_memory_and_the_next_plan_holds(
    tmp_path: Path,
) -> None:
    """Four files that each keep 100 MB, one shard, a 300 MB budget: the nominal first plan
    puts them together, the watchdog kills the shard, bisection runs them in smaller shards
    and the run passes; the next gate plans from their measurements, and no shard dies."""
    files = {f"tests/test_k{i}.py": keeps(100) for i in range(4)}
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    commit(repo, {"README": "rc\n"})
    args = ("--shards", "1", "--budget-gib", "0.3", "--rounds", "0", "--env", "none")
    first = gate(tmp_path, repo, *args)
    assert first.code == 0, (first.stderr, first.document)
    evs = events(tmp_path, first.document["run_id"])
    assert kinds(evs)["ShardSplit"] >= 1
    assert any(e["kind"] == "ShardAttemptRecorded" and e["oom"] for e in evs)
    assert set(measured(evs)) == set(files)

    second = gate(tmp_path, repo, *args)
    assert second.code == 0, second.stderr
    evs2 = events(tmp_path, second.document["run_id"])
    assert kinds(evs2)["MeasurementReused"] == 4
    [plan] = [e for e in evs2 if e["kind"] == "ShardsPlanned"]
    assert len(plan["shards"]) >= 2  # the budget holds two files, not four
    assert all(shard["rss_mb"] <= 300 * 1.024 for shard in plan["shards"])
    assert not any(e["kind"] == "ShardAttemptRecorded" and e["oom"] for e in evs2)
    assert kinds(evs2)["ShardSplit"] == 0


def test_the_package_every_file_imports_is_planned_in_every_shard_of_the_next_gate(
    tmp_path: Path,
) -> None:
    """The package under test keeps 60 MB once imported; only the first file each process
    collects pays for it. Planned next in other groupings (four shards where there were two),
    the shards whose files were never first still carry it: none goes over its plan."""
    files = {f"tests/test_{n}.py": f"import pkg\ndef test_{n}():\n    assert pkg.KEPT\n"
             for n in "abcd"}  # fmt: skip
    repo = make_repo(tmp_path, {"pkg/__init__.py": keeps(60, "unused"), **files})
    tag(repo, "v1")
    commit(repo, {"README": "rc\n"})
    first = gate(tmp_path, repo, "--shards", "2", "--env", "none")
    assert first.code == 0, first.stderr
    leads = [f for f in measured(events(tmp_path, first.document["run_id"])).values()
             if f["shared_mb"] is not None]  # fmt: skip
    assert len(leads) == 2 and all(f["shared_mb"] >= 50 for f in leads)
    second = gate(tmp_path, repo, "--shards", "4", "--env", "none")
    assert second.code == 0, second.stderr
    evs = events(tmp_path, second.document["run_id"])
    [plan] = [e for e in evs if e["kind"] == "ShardsPlanned"]
    planned = {s["id"]: s["rss_mb"] for s in plan["shards"]}
    attempts = [e for e in evs if e["kind"] == "ShardAttemptRecorded" and e["revision"] == "head"]
    assert len(attempts) == 4
    for attempt in attempts:
        assert attempt["rss_mb"] <= planned[attempt["shard"]] * 1.10, (attempt, planned)


LAZY_TABLES = """\
_TABLES = {}


def tables():
    \"\"\"Built by the first call and kept for the process, like a parser's grammar.\"\"\"
    if not _TABLES:
        data = bytearray(60 * 1024 * 1024)
        for i in range(0, len(data), 4096):
            data[i] = 1
        _TABLES["t"] = data
    return _TABLES["t"]
"""


def test_state_the_first_user_filled_is_planned_for_files_that_later_run_cold(
    tmp_path: Path,
) -> None:
    """The package fills 60 MB of tables on first use, not on import: in one process the
    first file to run pays it and the others keep nothing. Planned next one file a shard,
    each fills the tables itself; each is planned at what its process held by its end (its
    ceiling), and none goes over its plan."""
    files = {f"tests/test_{n}.py": f"import pkg\ndef test_{n}():\n    assert pkg.tables()\n"
             for n in "abcd"}  # fmt: skip
    repo = make_repo(tmp_path, {"pkg/__init__.py": LAZY_TABLES, **files})
    tag(repo, "v1")
    commit(repo, {"README": "rc\n"})
    first = gate(tmp_path, repo, "--shards", "1", "--env", "none")
    assert first.code == 0, first.stderr
    figures = measured(events(tmp_path, first.document["run_id"]))
    warm = [f for f in figures.values() if f["retained_mb"] < 20]
    assert len(warm) == 3 and all(f["ceiling_mb"] >= 50 for f in warm)  # ran after the filler
    second = gate(tmp_path, repo, "--shards", "4", "--env", "none")
    assert second.code == 0, second.stderr
    evs = events(tmp_path, second.document["run_id"])
    [plan] = [e for e in evs if e["kind"] == "ShardsPlanned"]
    assert [len(s["files"]) for s in plan["shards"]] == [1, 1, 1, 1]
    planned = {s["id"]: s["rss_mb"] for s in plan["shards"]}
    attempts = [e for e in evs if e["kind"] == "ShardAttemptRecorded" and e["revision"] == "head"]
    assert len(attempts) == 4
    for attempt in attempts:
        assert attempt["rss_mb"] <= planned[attempt["shard"]] * 1.10, (attempt, planned)


def test_a_reused_measurement_takes_the_lowest_ceiling_seen_for_the_same_content(
    tmp_path: Path,
) -> None:
    """A test that keeps 60 MB of its own raises the ceiling of the files run after it. Seen
    alone first (low ceilings), then after it (high), the files are next planned with the
    lowest ceiling seen: each observation bounds what they need cold."""
    hog = (
        "KEPT = []\n"
        "def test_hog():\n"
        "    data = bytearray(60 * 1024 * 1024)\n"
        "    for i in range(0, len(data), 4096):\n"
        "        data[i] = 1\n"
        "    KEPT.append(data)\n"
    )
    files = {
        "tests/test_a_hog.py": hog,
        "tests/test_b.py": "def test_b():\n    pass\n",
        "tests/test_c.py": "def test_c():\n    pass\n",
    }
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    commit(repo, {"README": "rc\n"})
    ceilings = []
    for shards in ("3", "1", "1"):
        result = gate(tmp_path, repo, "--shards", shards, "--env", "none")
        assert result.code == 0, result.stderr
        evs = events(tmp_path, result.document["run_id"])
        reused = {e["file"]: e["ceiling_mb"] for e in evs if e["kind"] == "MeasurementReused"}
        ceilings.append((measured(evs)["tests/test_b.py"]["ceiling_mb"], reused))
    (alone, _), (after_hog, reused_alone), (_, reused_lowest) = ceilings
    assert alone < 20 and after_hog >= 50  # b kept nothing; after the hog its process held 60
    assert reused_alone["tests/test_b.py"] == alone
    assert reused_lowest["tests/test_b.py"] == alone  # not the newest (after_hog)


def test_a_changed_file_is_measured_again_and_unchanged_ones_are_reused(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {f"tests/test_{n}.py": f"def test_{n}():\n    pass\n" for n in ("a", "b", "c")},
    )
    tag(repo, "v1")
    commit(repo, {"README": "rc1\n"})
    first = gate(tmp_path, repo, "--env", "none")
    assert first.code == 0, first.stderr
    commit(repo, {"tests/test_b.py": "def test_b():\n    assert 1 + 1 == 2\n"}, "b changed")
    second = gate(tmp_path, repo, "--env", "none")
    assert second.code == 0, second.stderr
    evs = events(tmp_path, second.document["run_id"])
    reused = {e["file"] for e in evs if e["kind"] == "MeasurementReused"}
    assert reused == {"tests/test_a.py", "tests/test_c.py"}
    assert "tests/test_b.py" in measured(evs)  # measured again, in place


def test_a_file_over_the_shard_budget_is_measured_alone_with_the_isolation_budget(
    tmp_path: Path,
) -> None:
    """A file that needs 400 MB under a 256 MB shard budget: killed in its shard, split off,
    run alone with the isolation reservation (4x), measured; then planned alone next time."""
    repo = make_repo(
        tmp_path,
        {"tests/test_big.py": keeps(400), "tests/test_small.py": "def test_s():\n    pass\n"},
    )
    tag(repo, "v1")
    commit(repo, {"README": "rc\n"})
    args = ("--shards", "1", "--budget-gib", "0.25", "--rounds", "0", "--env", "none")
    first = gate(tmp_path, repo, *args)
    assert first.code == 0, (first.stderr, first.document)
    evs = events(tmp_path, first.document["run_id"])
    big = [
        e
        for e in evs
        if e["kind"] == "ShardAttemptRecorded" and e["files"] == ["tests/test_big.py"]
    ]
    assert big and not big[-1]["oom"] and big[-1]["rss_mb"] > 256
    second = gate(tmp_path, repo, *args)
    assert second.code == 0, second.stderr
    [plan] = [
        e for e in events(tmp_path, second.document["run_id"]) if e["kind"] == "ShardsPlanned"
    ]
    assert ["tests/test_big.py"] in [s["files"] for s in plan["shards"]]


def _state(files: tuple[str, ...], shard_id: str = "s01") -> RunState:
    state = RunState()
    state.shards[shard_id] = ShardView(shard_id, files, parent="s01" if "." in shard_id else None)
    if "." in shard_id:
        state.shards["s01"] = ShardView("s01", files, children=(shard_id,))
    return state


def test_reservations_follow_the_plan_the_budget_or_the_isolation_budget() -> None:
    budget, isolation = 8192.0, 32768.0
    state = _state(("a.py", "b.py"))
    assert attempt_limit_mb(state, "s01", budget, isolation) == budget  # nominal: the budget
    state.baseline_mb = 50.0
    state.costs = {
        "a.py": FileCost(250, 1.0, retained_mb=100, transient_mb=100),
        "b.py": FileCost(150, 1.0, retained_mb=100, transient_mb=0),
    }
    planned = 50 + 200 + 100
    assert attempt_limit_mb(state, "s01", budget, isolation) == planned + 256
    # A single file split off by bisection: the isolation budget.
    child = _state(("a.py",), "s01.1")
    child.costs = state.costs
    assert attempt_limit_mb(child, "s01.1", budget, isolation) == isolation


def test_a_lineage_killed_over_its_memory_gets_the_whole_budget() -> None:
    from release_ledger.domain.assessment import Assessment
    from release_ledger.domain.run_state import AttemptView

    state = _state(("a.py", "b.py"))
    state.costs = {f: FileCost(100, 1.0, retained_mb=10, transient_mb=0) for f in ("a.py", "b.py")}
    killed = AttemptView(
        "s01", 1, "head", ("a.py", "b.py"), "local", Assessment(False, "oom"), position=5
    )
    state.shards["s01"].attempts["head"].append(killed)
    assert attempt_limit_mb(state, "s01", 8192, 32768) == 8192
    assert ev.FileMeasured.model_fields["source"].default == "solo"


def passing_gate(
    tmp_path: Path, files: dict[str, str], *args: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A gate of a repository holding `files` at base and head (head only adds a README) that
    must pass: its JSON document and its events."""
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    commit(repo, {"README": "rc\n"})
    result = gate(tmp_path, repo, "--env", "none", *args)
    assert result.code == 0, (result.stderr, result.document.get("unmeasured"))
    return result.document, events(tmp_path, result.document["run_id"])


def test_a_file_that_collects_nothing_costs_no_split_of_its_shard(tmp_path: Path) -> None:
    """The plugin names a file that collects nothing, so its shard's report accounts for it:
    no rejection, no retry, no split."""
    _, evs = passing_gate(
        tmp_path,
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "tests/test_helpers.py": "def helper():\n    return 1\n",
        },
        "--shards", "1",
    )  # fmt: skip
    assert kinds(evs)["ShardSplit"] == 0
    assert len([e for e in evs if e["kind"] == "ShardAttemptRecorded"]) == 2
    assert measured(evs)["tests/test_helpers.py"]["empty"] is True


def test_a_shard_of_files_that_collect_nothing_is_measured_empty_not_a_failed_job(
    tmp_path: Path,
) -> None:
    """With `--doctest-modules`, every module is a test file; a shard that draws only modules
    without doctests exits 5 (no tests collected): the plugin's report accounts for each file
    as empty, so the shard is measured, not bisected down to "job-failed" culprits."""
    document, evs = passing_gate(
        tmp_path,
        {
            "pytest.ini": "[pytest]\naddopts = --doctest-modules\n",
            "pkg/__init__.py": "",
            "pkg/plain.py": "VALUE = 1\n",
            "pkg/other.py": "OTHER = 2\n",
            "tests/test_a.py": "def test_a():\n    pass\n",
        },
        "--shards", "4",
    )  # fmt: skip
    assert kinds(evs)["ShardSplit"] == 0
    assert document["tests"]["head"] == 1


def test_a_text_file_pytest_collects_as_doctests_but_holds_none_is_declared_empty(
    tmp_path: Path,
) -> None:
    """pytest collects `test*.txt` as doctest text files (its default `--doctest-glob`), so a
    `requirements/test.txt` is a test file that holds nothing: the plugin names it empty like
    an empty module, so its shard is measured the first time instead of split and run again."""
    document, evs = passing_gate(
        tmp_path,
        {
            "requirements/test.txt": "pytest>=7\n",
            "docs/test_usage.txt": ">>> 1 + 1\n2\n",
            "tests/test_a.py": "def test_a():\n    pass\n",
        },
        "--shards", "1",
    )  # fmt: skip
    discovered = next(e for e in evs if e["kind"] == "TestFilesDiscovered")["files"]
    assert "requirements/test.txt" in discovered
    assert kinds(evs)["ShardSplit"] == 0
    assert len([e for e in evs if e["kind"] == "ShardAttemptRecorded"]) == 2
    assert measured(evs)["requirements/test.txt"]["empty"] is True
    assert document["tests"]["head"] == 2
