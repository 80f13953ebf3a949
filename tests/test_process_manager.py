"""The gate's process manager decides from the ledger alone: retry rounds, bisection,
isolation and attribution, driven here with a scripted executor (`tests/fake_executor.py`) and
an in-memory workspace (`tests/fake_workspace.py`: no git repository) in well under a second
each; the real gates in `test_gate_*.py` run the same decisions with pytest and git.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from release_ledger.domain.execution import EnvironmentRequest
from release_ledger.domain.verdict import Verdict
from release_ledger.ledger.gate import GateProcess, start
from release_ledger.ledger.options import GateOptions
from release_ledger.ledger.service import Ledger
from tests.fake_executor import DIES, FakeExecutor, Suite
from tests.fake_workspace import GivenCollector, InMemoryWorkspace, two_commit_workspace

Repo = InMemoryWorkspace  # the repository: commits in memory, no git

FILES = [f"tests/test_{name}.py" for name in "abcd"]


def _ok(file: str) -> dict[str, str]:
    return {f"{file}::test_one": "passed"}


def _fails(file: str) -> dict[str, str]:
    return {f"{file}::test_one": "failed"}


def _suite(**head: dict[str, str] | str) -> Suite:
    """Every file passes at both revisions, but for `head` overrides (by file letter)."""
    files: dict[tuple[str, str], dict[str, str] | str] = {}
    for file in FILES:
        files[("base", file)] = _ok(file)
        letter = file[len("tests/test_")]
        files[("head", file)] = head.get(letter, _ok(file))
    return Suite(files)


@pytest.fixture
def repo() -> Repo:
    return two_commit_workspace(FILES)


@pytest.fixture
def ledger(disk_ledger: Ledger) -> Ledger:
    return disk_ledger


def _gate(
    ledger: Ledger,
    repo: Repo,
    executor: FakeExecutor,
    pinned: Any = None,
    collector: GivenCollector | None = None,
    **options: Any,
) -> Verdict:
    settings: dict[str, Any] = {
        "repo": repo.repo, "base": "v1", "jobs": 1, "rounds": 1, "shards": 2,
        "release_builds": False, "environment": "none", "question_budget": 0,
    } | options  # fmt: skip
    run_id = start(ledger, GateOptions(**settings), repo)
    return GateProcess(
        ledger, run_id, executor, pinned_executor=pinned, workspace=repo, collector=collector
    ).drive()


def _discovered(ledger: Ledger) -> Any:
    """The one run's `TestFilesDiscovered`."""
    (run,) = ledger.runs()
    (found,) = [r.event for r in ledger.read(run.run_id) if r.event.kind == "TestFilesDiscovered"]
    return found


def _runs(executor: FakeExecutor) -> Counter[tuple[str, tuple[str, ...]]]:
    return Counter((c.revision, c.files) for c in executor.calls)


def test_a_clean_head_passes_with_one_run_of_each_shard_at_each_revision(
    ledger: Ledger, repo: Repo
) -> None:
    executor = FakeExecutor(_suite())
    verdict = _gate(ledger, repo, executor)
    assert verdict.status == "passed"
    assert len(executor.calls) == 4 and all(c.attempt == 1 for c in executor.calls)


def test_discovery_records_the_files_the_declared_invocation_collects_in_its_order(
    ledger: Ledger, repo: Repo
) -> None:
    # The invocation collects three of head's four files, in its own order; base's all four.
    order = ["tests/test_d.py", "tests/test_b.py", "tests/test_a.py"]
    collector = GivenCollector(repo, {"HEAD": order, "v1": FILES})
    executor = FakeExecutor(_suite())
    assert _gate(ledger, repo, executor, collector=collector).status == "passed"

    discovered = _discovered(ledger)
    assert discovered.order == order and discovered.files == sorted(order)
    assert discovered.collected_by == "collected by pytest: 3 items in 3 files"
    assert discovered.removed_at_head == ["tests/test_c.py"]  # collected at base only
    # both asked, at once (base's collection runs while head's does)
    assert sorted(collector.asked) == sorted([repo.resolve("HEAD"), repo.resolve("v1")])
    assert {f for call in executor.calls for f in call.files} == set(order)


def test_without_a_collection_discovery_walks_the_files_and_says_so(
    ledger: Ledger, repo: Repo
) -> None:
    _gate(ledger, repo, FakeExecutor(_suite()), collector=GivenCollector(repo, {}))
    discovered = _discovered(ledger)
    assert discovered.files == FILES and discovered.order == FILES
    assert discovered.collected_by.startswith("file walk (fallback:")


def test_a_shard_that_keeps_dying_is_bisected_until_the_file_that_kills_it_is_alone(
    ledger: Ledger, repo: Repo
) -> None:
    executor = FakeExecutor(_suite(a=DIES))
    verdict = _gate(ledger, repo, executor)

    assert verdict.status == "unmeasured"
    (unmeasured,) = verdict.unmeasured
    assert unmeasured.files == ("tests/test_a.py",) and unmeasured.reason == "signal"
    runs = _runs(executor)
    assert runs[("head", ("tests/test_a.py",))] >= 1  # split until alone
    # Its neighbour was measured in a shard without it, at both revisions.
    neighbour = next(f for c in executor.calls for f in c.files
                     if f != "tests/test_a.py" and "tests/test_a.py" in c.files)  # fmt: skip
    assert runs[("head", (neighbour,))] == 1 and runs[("base", (neighbour,))] == 1


def test_a_dying_shard_gets_its_retry_rounds_before_it_is_split(
    ledger: Ledger, repo: Repo
) -> None:
    executor = FakeExecutor(_suite(a=DIES))
    _gate(ledger, repo, executor, rounds=2)
    first = next(c for c in executor.calls if "tests/test_a.py" in c.files)
    whole = [c for c in executor.calls if c.files == first.files and c.revision == "head"]
    assert [c.attempt for c in whole] == [1, 2, 3]  # the first run and two retry rounds


def test_a_new_failure_is_run_alone_at_both_revisions_and_is_introduced(
    ledger: Ledger, repo: Repo
) -> None:
    executor = FakeExecutor(_suite(b=_fails("tests/test_b.py")))
    verdict = _gate(ledger, repo, executor)

    assert verdict.status == "failed"
    assert verdict.introduced == ("tests/test_b.py::test_one",)
    alone = [c for c in executor.calls if c.shard_id.startswith("isolate")]
    assert {(c.revision, c.files) for c in alone} == {
        ("head", ("tests/test_b.py",)), ("base", ("tests/test_b.py",)),
    }  # fmt: skip


def test_a_failure_that_passes_alone_is_flaky_and_does_not_fail_the_default_rule(
    ledger: Ledger, repo: Repo
) -> None:
    suite = _suite(c=_fails("tests/test_c.py"))
    suite.alone[("head", "tests/test_c.py")] = _ok("tests/test_c.py")
    verdict = _gate(ledger, repo, FakeExecutor(suite))
    assert verdict.status == "passed"
    assert verdict.flaky == ("tests/test_c.py::test_one",)


def test_an_isolation_the_machinery_broke_is_run_again(ledger: Ledger, repo: Repo) -> None:
    suite = _suite(b=_fails("tests/test_b.py"))
    executor = FakeExecutor(suite)
    original = executor.run

    def broken_once_alone(shard):  # type: ignore[no-untyped-def]
        if shard.shard_id.startswith("isolate") and not getattr(executor, "broke", False):
            executor.broke = True
            suite.infrastructure[shard.files[0]] = 1
        return original(shard)

    executor.run = broken_once_alone  # type: ignore[method-assign]
    verdict = _gate(ledger, repo, executor)

    assert verdict.introduced == ("tests/test_b.py::test_one",)
    alone = Counter((c.revision, c.files) for c in executor.calls if c.shard_id.startswith("iso"))
    assert sorted(alone.values()) == [1, 2]  # the broken one once more, the other once


def test_a_resumed_run_redoes_nothing_already_recorded(ledger: Ledger, repo: Repo) -> None:
    _gate(ledger, repo, FakeExecutor(_suite(b=_fails("tests/test_b.py"))))
    (run_id,) = [r.run_id for r in ledger.runs()]
    recorded = len(ledger.read(run_id))
    again = FakeExecutor(_suite())

    verdict = GateProcess(ledger, run_id, again, workspace=repo).drive()

    assert again.calls == [] and len(ledger.read(run_id)) == recorded
    assert verdict.introduced == ("tests/test_b.py::test_one",)


def test_a_failure_that_passes_with_bases_packages_is_attributed_to_them(
    ledger: Ledger, repo: Repo
) -> None:
    suite = _suite(a=_fails("tests/test_a.py"), b=_fails("tests/test_b.py"))
    suite.packages = {"base": "iniconfig==1.1.1\n", "head": "iniconfig==2.3.0\n"}
    suite.pinned = {"tests/test_a.py": _ok("tests/test_a.py")}  # b still fails: the code's
    pinned: list[FakeExecutor] = []

    def with_pins(packages: str) -> FakeExecutor:
        pinned.append(FakeExecutor(suite, EnvironmentRequest(mode="auto", pinned=packages)))
        return pinned[-1]

    verdict = _gate(ledger, repo, FakeExecutor(suite), environment="auto", pinned=with_pins)

    assert verdict.causes == {
        "tests/test_a.py::test_one": "dependencies", "tests/test_b.py::test_one": "code",
    }  # fmt: skip
    assert verdict.moved == ("iniconfig 1.1.1 → 2.3.0",)
    (used,) = pinned
    assert used.request.pinned == "iniconfig==1.1.1\n" and used.closed
    assert [c.files for c in used.calls] == [("tests/test_a.py", "tests/test_b.py")]


def test_an_attribution_whose_executor_fails_leaves_the_causes_unknown(
    ledger: Ledger, repo: Repo
) -> None:
    suite = _suite(a=_fails("tests/test_a.py"))
    suite.packages = {"base": "iniconfig==1.1.1\n", "head": "iniconfig==2.3.0\n"}

    def broken(packages: str) -> FakeExecutor:
        raise RuntimeError("no such interpreter on the pool")

    verdict = _gate(ledger, repo, FakeExecutor(suite), environment="auto", pinned=broken)

    assert verdict.status == "failed"
    assert verdict.causes == {"tests/test_a.py::test_one": "unknown"}
