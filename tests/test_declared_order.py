"""Issue 37, parts 4 and 5, decided by the process manager from the ledger alone (a scripted
executor, `tests/fake_executor.py`): a failure at both revisions is preexisting only in the
project's own order; a declared source whose tests cannot run is a failed source; a usage
error is never retried nor bisected. The real gates are in `test_declared_order_gate.py`."""

from __future__ import annotations

from typing import Any

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.order import collection_order
from release_ledger.domain.verdict import Verdict
from release_ledger.ledger.gate import GateProcess, start
from release_ledger.ledger.options import GateOptions
from release_ledger.ledger.service import Ledger
from tests.fake_executor import FakeExecutor, Suite
from tests.fake_workspace import InMemoryWorkspace

A, B = "tests/test_a.py", "tests/test_b.py"
INDEX, KNOWN = "docs/index.rst", "docs/known.rst"
FILES = [A, B, INDEX, KNOWN]
CONFIG = "[pytest]\ntestpaths = tests docs\naddopts = --doctest-glob=*.rst\n"


def _case(file: str) -> str:
    return f"{file}::test_one"


@pytest.fixture
def ledger(disk_ledger: Ledger) -> Ledger:
    return disk_ledger


def _files(tests: tuple[str, ...] | dict[str, str]) -> list[str] | dict[str, str]:
    """Tests named by their files (a text file's test id carries its runner's class name)."""
    if isinstance(tests, dict):
        return {t.split("::", 1)[0]: how for t, how in tests.items()}
    return [t.split("::", 1)[0] for t in tests]


def _suite(head: dict[str, str], base: dict[str, str] | None = None, **extra: Any) -> Suite:
    """Every file passes (one case each) but for the outcomes given per revision; the docs
    index needs tests/test_a.py to run first in its process (a conftest's namespace)."""
    files: dict[tuple[str, str], dict[str, str] | str] = {}
    for revision, given in (("head", head), ("base", base or {})):
        for file in FILES:
            files[(revision, file)] = {_case(file): given.get(file, "passed")}
    return Suite(files, coupled={INDEX: A}, **extra)


@pytest.fixture
def workspace() -> InMemoryWorkspace:
    """The repository in memory (no git): its doctest files and `testpaths` as pytest.ini says."""
    files = {f: "def test_one():\n    pass\n" for f in (A, B)}
    files |= {INDEX: ">>> 1\n1\n", KNOWN: ">>> 1\n1\n", "pytest.ini": CONFIG}
    commits = {"v1": files, "HEAD": files | {"README": "head\n"}}
    return InMemoryWorkspace(commits, tests=(INDEX, KNOWN), starts=("tests", "docs"))


def _gate(
    ledger: Ledger, workspace: InMemoryWorkspace, executor: FakeExecutor, **options: Any
) -> Verdict:
    settings: dict[str, Any] = {
        "repo": workspace.repo, "base": "v1", "jobs": 1, "rounds": 1, "shards": 4,
        "release_builds": False, "environment": "none", "question_budget": 0,
    } | options  # fmt: skip
    run_id = start(ledger, GateOptions(**settings), workspace)
    return GateProcess(ledger, run_id, executor, workspace=workspace).drive()


def test_the_collection_order_follows_the_declared_testpaths_then_pytests_walk() -> None:
    files = ["docs/b.rst", "docs/a.rst", "tests/z/test_y.py", "tests/test_x.py", "top.py"]
    assert collection_order(files, ["tests", "docs"]) == [
        "tests/test_x.py", "tests/z/test_y.py", "docs/a.rst", "docs/b.rst", "top.py",
    ]  # fmt: skip
    assert collection_order(files, ["."]) == sorted(files, key=lambda f: tuple(f.split("/")))


def test_an_order_coupled_regression_is_introduced_and_a_real_preexisting_one_confirmed(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    suite = _suite(head={INDEX: "failed", KNOWN: "failed"}, base={KNOWN: "failed"})
    executor = FakeExecutor(suite)

    verdict = _gate(ledger, workspace, executor)

    assert verdict.status == "failed"
    assert _files(verdict.introduced) == [INDEX]
    assert _files(verdict.preexisting) == [KNOWN]
    assert _files(verdict.in_order) == {INDEX: "introduced", KNOWN: "preexisting"}
    # one run per revision in the project's order, up to the last file it judges
    in_order = [c for c in executor.calls if c.shard_id.startswith("in-order")]
    assert sorted((c.revision, c.files) for c in in_order) == [
        ("base", (A, B, INDEX, KNOWN)), ("head", (A, B, INDEX, KNOWN)),
    ]  # fmt: skip


def test_a_failure_only_the_shards_order_made_is_a_sharding_artefact_not_preexisting(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    verdict = _gate(ledger, workspace, FakeExecutor(_suite(head={})))

    assert verdict.status == "passed"
    assert verdict.preexisting == () and verdict.introduced == ()
    assert _files(verdict.sharding_artefacts) == [INDEX]
    assert _files(verdict.in_order) == {INDEX: "sharding-artefact"}
    assert INDEX not in _files(verdict.failing_at_head)
    assert verdict.as_dict()["sharding_artefacts"] == list(verdict.sharding_artefacts)


def test_one_shard_runs_its_files_in_the_projects_order_and_needs_no_run_in_order(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    executor = FakeExecutor(_suite(head={INDEX: "failed"}))

    verdict = _gate(ledger, workspace, executor, shards=1)

    (first, *_) = executor.calls
    assert first.files == (A, B, INDEX, KNOWN)  # testpaths order: tests, then docs
    assert _files(verdict.introduced) == [INDEX]
    # alone at base it fails (nothing filled its namespace): its shards, in order, decide
    assert _files(verdict.in_order) == {INDEX: "introduced"}
    assert not [c for c in executor.calls if c.shard_id.startswith("in-order")]


def test_a_source_whose_every_shard_stops_at_a_usage_error_is_rejected_for_the_next(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    suite = _suite(head={B: "failed"}, packages={"head": "x==1\n", "base": "x==1\n"},
                   sources=("dependency-group", "extras"),
                   broken_sources=frozenset({"dependency-group"}))  # fmt: skip
    executor = FakeExecutor(suite)

    verdict = _gate(ledger, workspace, executor, shards=2)

    assert verdict.status == "failed" and verdict.introduced == (_case(B),)
    events = ledger.events(executor.calls[0].run_id)
    rejected = [e for e in events if isinstance(e, ev.SourceRejected)]
    assert sorted((e.revision, e.source, e.reason) for e in rejected) == [
        ("base", "dependency-group", "usage-error"), ("head", "dependency-group", "usage-error"),
    ]  # fmt: skip
    assert all(e.log_tail_hash and "No module named 'plugin'" in e.error for e in rejected)
    assert not [e for e in events if isinstance(e, ev.ShardSplit)]  # a usage error: no bisection
    # each shard ran once in the rejected source (no retry) and once in the next one
    first = [c for c in executor.calls if not c.skip_sources and not c.shard_id.startswith("i")]
    assert {c.attempt for c in first} == {1} and len(first) == 4
    used = [e for e in events if isinstance(e, ev.EnvironmentPrepared) and e.source == "extras"]
    assert {e.revision for e in used} == {"head", "base"}
    assert [(t.source, t.outcome) for t in used[0].tried] == [
        ("dependency-group", "failed"), ("extras", "used"),
    ]  # fmt: skip


def test_when_every_source_stops_before_its_tests_the_revision_is_unmeasured_unbisected(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    suite = _suite(head={}, packages={"head": "x==1\n", "base": "x==1\n"},
                   sources=("dependency-group", "extras"),
                   broken_sources=frozenset({"dependency-group", "extras"}))  # fmt: skip
    executor = FakeExecutor(suite)

    verdict = _gate(ledger, workspace, executor, shards=2)

    assert verdict.status == "unmeasured"
    assert {u.reason for u in verdict.unmeasured} == {"env-setup"}
    events = ledger.events(executor.calls[0].run_id)
    assert len([e for e in events if isinstance(e, ev.SourceRejected)]) == 4
    assert not [e for e in events if isinstance(e, ev.ShardSplit)]


def test_a_usage_error_without_another_source_is_neither_retried_nor_bisected(
    ledger: Ledger, workspace: InMemoryWorkspace
) -> None:
    # `--env none`: the environment names no declared source, so there is none to move to
    executor = FakeExecutor(_suite(head={}, broken_sources=frozenset({""})))

    verdict = _gate(ledger, workspace, executor, shards=2, rounds=2)

    assert verdict.status == "unmeasured"
    assert {u.reason for u in verdict.unmeasured} == {"no-output"}
    assert {c.attempt for c in executor.calls} == {1} and len(executor.calls) == 4
    events = ledger.events(executor.calls[0].run_id)
    assert not [e for e in events if isinstance(e, ev.ShardSplit | ev.SourceRejected)]



def test_the_line_that_stopped_a_run_is_the_last_error_its_log_names() -> None:
    from release_ledger.domain.unrunnable import error_line

    log = (
        "ImportError while loading conftest '/w/tests/conftest.py'.\n"
        "tests/conftest.py:1: in <module>\n    import six\n"
        "E   ModuleNotFoundError: No module named 'six'\n"
    )
    assert error_line(log) == "E   ModuleNotFoundError: No module named 'six'"
    usage = "ERROR: usage: pytest [options]\n__main__.py: error: unrecognized arguments: --cov\n"
    assert error_line(usage) == "__main__.py: error: unrecognized arguments: --cov"
    assert error_line("all fine\n") == ""
