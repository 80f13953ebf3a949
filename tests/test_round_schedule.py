"""A round's runs share one pool (issue 41, part 2): base's and head's together, the longest
first; a head run starts at once where every file of it has a known figure, else as soon as
its base run is recorded, with time limits from base's figures. And a first plan weighs a
never-measured file by the items its invocation collected. Driven with a scripted executor
that records when each run starts and ends (`tests/fake_executor.py` is its model), and
that holds a run until another has started: the assertions are on order, never on timings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.domain.run_state import fold
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.gate import GateProcess, start
from release_ledger.ledger.hooks import QuietObserver
from release_ledger.ledger.options import GateOptions
from release_ledger.ledger.read_side import project
from release_ledger.ledger.service import Ledger
from release_ledger.ledger.steps.parallel import run_parallel
from release_ledger.ledger.steps.run import Round
from tests.fake_workspace import GivenCollector, InMemoryWorkspace, two_commit_workspace

FILES = [f"tests/test_{name}.py" for name in "abcd"]
BASE_SECONDS = 3.0  # each file's figure in base's (plugin) reports: a 30 s limit at head
HOLD_S = 5.0  # a held run gives up waiting after this: the order assertion then fails


def plugin_report(files: tuple[str, ...], seconds: float) -> bytes:
    """A report as the gate's pytest plugin writes it: one passing case per file, with the
    file's figures (`seconds`), so `known_seconds` learns from it."""
    suites = "".join(
        f'<testsuite name="{f}" file="{f}" tests="1" failures="0" errors="0"><properties>'
        '<property name="release-ledger.file-start" value="rss_kb=40960 peak_kb=40960" />'
        f'<property name="release-ledger.file-end" value="seconds={seconds:.3f} '
        'rss_kb=40960 peak_kb=40960" /></properties>'
        f'<testcase classname="x" name="test_one" file="{f}" time="{seconds}"><properties>'
        f'<property name="release-ledger.nodeid" value="{f}::test_one" /></properties>'
        "</testcase></testsuite>"
        for f in files
    )
    return (
        f'<?xml version="1.0" encoding="utf-8"?><testsuites tests="{len(files)}" failures="0" '
        'errors="0"><properties><property name="release-ledger.plugin" value="2" />'
        f"</properties>{suites}<properties>"
        f'<property name="release-ledger.complete" value="{len(files)}" /></properties>'
        "</testsuites>"
    ).encode()


class Timeline:
    """An executor whose every file passes at both revisions (a plugin report), keeping the
    order runs start and end in; `hold` names a run to keep going until `release` is set
    (by a run that `releases` starting), at most `HOLD_S`."""

    name = "fake"

    def __init__(
        self,
        hold: Callable[[ShardRun], bool] = lambda run: False,
        releases: Callable[[ShardRun], bool] = lambda run: False,
    ) -> None:
        self.hold, self.releases = hold, releases
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, tuple[str, ...]]] = []  # (start|end, revision, files)
        self.calls: list[ShardRun] = []
        self.closed = False

    def prepare(self, commits: list[str]) -> None:
        pass

    def run(self, shard: ShardRun) -> Observation:
        with self.lock:
            self.calls.append(shard)
            self.log.append(("start", shard.revision, shard.files))
        if self.releases(shard):
            self.release.set()
        if self.hold(shard):
            self.release.wait(HOLD_S)
        with self.lock:
            self.log.append(("end", shard.revision, shard.files))
        return Observation(
            exit_code=0, report=plugin_report(shard.files, BASE_SECONDS), seconds=0.1,
            rss_mb=30.0, sandbox="none",
        )  # fmt: skip

    def shard_log(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """The log of the shard runs only (a solo measurement runs one file: left out)."""
        return [entry for entry in self.log if len(entry[2]) > 1]

    def cancel_all(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def ledger(disk_ledger: Ledger) -> Ledger:
    return disk_ledger


def _gate(
    ledger: Ledger,
    repo: InMemoryWorkspace,
    executor: Timeline,
    collector: GivenCollector | None = None,
    **options: Any,
) -> str:
    settings: dict[str, Any] = {
        "repo": repo.repo, "base": "v1", "jobs": 2, "rounds": 1, "shards": 2,
        "release_builds": False, "environment": "none", "question_budget": 0,
    } | options  # fmt: skip
    run_id = start(ledger, GateOptions(**settings), repo)
    verdict = GateProcess(ledger, run_id, executor, workspace=repo, collector=collector).drive()
    assert verdict.status == "passed"
    return run_id


def _with(file: str) -> Callable[[ShardRun], bool]:
    return lambda run: run.revision == "base" and file in run.files and len(run.files) > 1


def test_a_head_run_whose_files_are_known_starts_before_bases_slowest_run_ends(
    ledger: Ledger,
) -> None:
    # Every file measured alone first (`--measure always`): each head run may start at once.
    # Base's run of test_a's shard is held until a head run has started.
    # (A solo measurement is a head run of one file: it releases nothing.)
    executor = Timeline(
        hold=_with(FILES[0]), releases=lambda run: run.revision == "head" and len(run.files) > 1
    )
    _gate(ledger, two_commit_workspace(FILES), executor, measure="always")

    log = executor.shard_log()
    held = next(files for _, revision, files in log if revision == "base" and FILES[0] in files)
    first_head = next(i for i, (what, revision, _) in enumerate(log) if revision == "head")
    assert log[first_head][0] == "start"
    assert first_head < log.index(("end", "base", held))  # started while base's still ran
    # Its limits are the measurements', given at once: each file's floor (10 s, as 0.1 s
    # x10 is less), the shard's twice their sum and a minute.
    head = next(c for c in executor.calls if c.revision == "head" and len(c.files) > 1)
    assert head.file_limits == dict.fromkeys(head.files, 10.0)
    assert head.timeout_s == 2 * 10.0 * len(head.files) + 60.0


def test_a_head_run_of_unknown_files_waits_for_its_base_run_and_gets_bases_figures(
    ledger: Ledger,
) -> None:
    # Nothing is known before the round (measured in place): each head run waits for its
    # own shard's base run, and only for it. Base's run of test_a's shard is held until the
    # other shard's head run has started, which it may once that shard's base is recorded.
    executor = Timeline(
        hold=_with(FILES[0]),
        releases=lambda run: run.revision == "head" and FILES[0] not in run.files,
    )
    _gate(ledger, two_commit_workspace(FILES), executor)

    log = executor.shard_log()
    for _, revision, files in log:
        if revision == "head":
            assert log.index(("start", "head", files)) > log.index(("end", "base", files))
    held = next(files for _, revision, files in log if revision == "base" and FILES[0] in files)
    other = next(files for _, revision, files in log if revision == "head" and files != held)
    assert log.index(("start", "head", other)) < log.index(("end", "base", held))
    # Base's runs had no figure to set a file's limit by; head's have base's (3 s x10).
    for call in executor.calls:
        expected = dict.fromkeys(call.files, 30.0) if call.revision == "head" else {}
        assert call.file_limits == expected, call
    heads = [c for c in executor.calls if c.revision == "head"]
    assert all(c.timeout_s == 2 * 30.0 * len(c.files) + 60.0 for c in heads)


def _one_job_starts(
    ledger: Ledger, items: dict[str, int]
) -> tuple[list[tuple[str, tuple[str, ...]]], tuple[str, ...], tuple[str, ...]]:
    """A first gate of two shards on one job, its files collecting `items` at both
    revisions: the runs' starts in order, test_d's shard's files, and the other shard's."""
    repo = two_commit_workspace(FILES)
    collector = GivenCollector(repo, {"HEAD": items, "v1": items})
    executor = Timeline()
    _gate(ledger, repo, executor, collector=collector, jobs=1)
    starts = [(revision, files) for what, revision, files in executor.log if what == "start"]
    with_d = next(files for _, files in starts if FILES[3] in files)
    without_d = next(files for _, files in starts if FILES[3] not in files)
    return starts, with_d, without_d


def test_the_longest_shard_runs_first_and_its_head_run_follows_its_base_run(
    ledger: Ledger,
) -> None:
    # test_d collects 900 items (parametrized) in one `def test`: planned the heaviest, its
    # shard is run first, and its head run next, before the light shard's base run.
    starts, heavy, light = _one_job_starts(ledger, dict.fromkeys(FILES, 1) | {FILES[3]: 900})
    assert starts == [("base", heavy), ("head", heavy), ("base", light), ("head", light)]


def test_a_base_run_that_frees_a_head_run_goes_before_a_longer_ready_head_run(
    ledger: Ledger,
) -> None:
    # test_d collects 60 items, alone in its shard; test_a..c 42 items together in the other.
    # Once d's base run is recorded, d's head run (60 items) is ready, but the other base
    # run (42 items) and the head run it frees (42 more) are the longer path: the round ends
    # with that path, so it starts first. Longest-first ran d's head run before it.
    items = {FILES[0]: 1, FILES[1]: 1, FILES[2]: 40, FILES[3]: 60}
    starts, alone, others = _one_job_starts(ledger, items)
    assert alone == (FILES[3],) and len(others) == 3
    assert starts == [("base", alone), ("base", others), ("head", alone), ("head", others)]


def test_a_dominant_files_head_run_does_not_wait_for_its_base_run(ledger: Ledger) -> None:
    # test_d collects 5000 items (a nominal 100 s): most of its revision's work, so its head
    # run, started after its base run, would end the round alone (2 jobs). It
    # starts at once, beside base's (held until it starts), with no figure to set a file's
    # limit by: `--timeout` bounds it, as it bounds base's. The light shard's head run still
    # waits for its base run and gets base's figures (3 s x10).
    repo = two_commit_workspace(FILES)
    items = dict.fromkeys(FILES, 1) | {FILES[3]: 5000}
    collector = GivenCollector(repo, {"HEAD": items, "v1": items})
    heavy_head = lambda run: run.revision == "head" and FILES[3] in run.files  # noqa: E731
    executor = Timeline(
        hold=lambda run: run.revision == "base" and FILES[3] in run.files, releases=heavy_head
    )
    _gate(ledger, repo, executor, collector=collector, jobs=2, timeout_s=600.0)

    log = executor.log
    heavy = next(files for _, _, files in log if FILES[3] in files)
    assert log.index(("start", "head", heavy)) < log.index(("end", "base", heavy))
    [head] = [c for c in executor.calls if heavy_head(c)]
    assert head.file_limits == {} and head.timeout_s == 600.0
    light = next(c for c in executor.calls if c.revision == "head" and c is not head)
    assert log.index(("start", "head", light.files)) > log.index(("end", "base", light.files))
    assert light.file_limits == dict.fromkeys(light.files, 30.0)


def _pool(jobs: int) -> Any:
    """What `run_parallel` reads of a step's context."""
    options = SimpleNamespace(jobs=jobs, rounds=0, machine_mb=None)
    return SimpleNamespace(options=options, observer=QuietObserver())


def _run(shard: str, revision: str = "base") -> ShardRun:
    return ShardRun(
        run_id="r", shard_id=shard, attempt=1, revision=revision, commit="c" * 40,
        files=(f"tests/test_{shard}.py",), command=("pytest",), timeout_s=60.0,
    )  # fmt: skip


def test_run_parallel_starts_the_longest_first_and_a_waiting_run_once_it_is_ready() -> None:
    executor = Timeline()
    runs = [_run("short"), _run("long"), _run("middle"), _run("long", "head")]
    seconds = {"short": 1.0, "middle": 5.0, "long": 9.0}
    taken: list[str] = []

    def ready(run: ShardRun) -> ShardRun | None:
        # the head run waits for the base run of its shard, and then gets a limit of 42 s
        if run.revision == "base":
            return run
        return run.model_copy(update={"timeout_s": 42.0}) if "long" in taken else None

    results = run_parallel(
        _pool(1), executor, runs, "runs", first=lambda r: seconds[r.shard_id], ready=ready
    )
    for run, _ in results:
        taken.append(run.shard_id)
    assert [(c.shard_id, c.revision) for c in executor.calls] == [
        ("long", "base"), ("long", "head"), ("middle", "base"), ("short", "base"),
    ]  # fmt: skip
    assert executor.calls[1].timeout_s == 42.0


def test_a_run_waiting_for_the_second_of_two_results_that_landed_together_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two base runs end before the pool looks (one `wait` hands back both): the head run
    waiting for the second is not taken for stuck when the first is handed back (a CI run
    of the adversarial gates ended in `RuntimeError` so)."""
    from concurrent import futures

    from release_ledger.ledger.steps import parallel

    def late_wait(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)  # every run submitted so far has ended by now
        return futures.wait(*args, **kwargs)

    monkeypatch.setattr(parallel, "wait", late_wait)
    taken: list[tuple[str, str]] = []

    def ready(run: ShardRun) -> ShardRun | None:
        return run if run.revision == "base" or ("b", "base") in taken else None

    runs = [_run("a"), _run("b"), _run("b", "head")]
    for run, _ in run_parallel(_pool(2), Timeline(), runs, "runs", ready=ready):
        taken.append((run.shard_id, run.revision))

    assert taken == [("a", "base"), ("b", "base"), ("b", "head")]


def test_run_parallel_refuses_runs_that_wait_for_what_no_run_gives() -> None:
    with pytest.raises(RuntimeError, match="wait for results no run will give"):
        list(run_parallel(_pool(2), Timeline(), [_run("a")], "runs", ready=lambda run: None))


def test_the_plan_weighs_a_file_by_its_collected_items_else_its_def_tests(
    ledger: Ledger, tmp_path: Path
) -> None:
    # test_d has two `def test`s; its invocation collects 900 items of them (parametrized).
    tree = {f: "def test_one():\n    pass\n" for f in FILES}
    tree[FILES[3]] += "def test_two():\n    pass\n"
    repo = InMemoryWorkspace({"v1": tree, "HEAD": tree | {"README": "head\n"}})
    items = dict.fromkeys(FILES, 1) | {FILES[3]: 900}

    collected = _gate(ledger, repo, Timeline(), GivenCollector(repo, {"HEAD": items}))
    # (another ledger: this one's measurements of the same files would be reused)
    other = open_ledger(f"sqlite:///{tmp_path / 'other.db'}")
    walked = _gate(other, repo, Timeline(), GivenCollector(repo, {}))

    def planned(run_id: str) -> dict[str, float]:
        state = project(ledger, run_id)
        assert state.plan is not None
        return {f: s.seconds for s in state.plan.shards for f in s.files if len(s.files) == 1}

    # 0.05 s a file and 0.02 s a test: 900 items, or the walk's two `def test`s
    assert planned(collected) == {FILES[3]: pytest.approx(0.05 + 0.02 * 900)}
    assert _discovered(ledger, collected).collected_items == items
    assert _discovered(other, walked).collected_items == {}
    state = project(other, walked)
    other.close()
    assert state.nominal_tests(FILES[3]) == 2
    assert state.plan is not None
    # test_d (two `def test`s) with one other file, the two others together
    by_seconds = sorted((s.seconds, FILES[3] in s.files) for s in state.plan.shards)
    assert by_seconds == [(pytest.approx(0.14), False), (pytest.approx(0.16), True)]


def _discovered(ledger: Ledger, run_id: str) -> ev.TestFilesDiscovered:
    (found,) = [r.event for r in ledger.read(run_id) if r.event.kind == "TestFilesDiscovered"]
    assert isinstance(found, ev.TestFilesDiscovered)
    return found


def test_a_discovery_recorded_before_collected_items_loads_and_is_stored_as_it_was() -> None:
    old = (
        '{"kind":"TestFilesDiscovered","run_id":"r","at":"2026-01-01T00:00:00Z",'
        '"files":["tests/test_a.py"],"sizes":{"tests/test_a.py":30},'
        '"test_functions":{"tests/test_a.py":3}}'
    )
    event = ev.event_from_json(old)
    assert isinstance(event, ev.TestFilesDiscovered)
    assert event.collected_items == {}
    assert "collected_items" not in ev.event_to_json(event)  # its stored form is unchanged
    state = fold([event], {})
    assert state.discovered_items == {} and state.nominal_tests("tests/test_a.py") == 3


def test_on_a_pool_a_known_head_run_still_waits_for_its_own_shards_base_run() -> None:
    # Placement reserved each shard one slot of a member: its two runs take turns in it.
    # Elsewhere the known head run starts at once, the other shard's never waits for it.
    known = {"tests/test_s01.py": 1.0, "tests/test_s02.py": 1.0}
    runs = [_run("s01"), _run("s01", "head"), _run("s02", "head")]
    for pool, waits in ((True, ["s01"]), (False, [])):
        ctx: Any = SimpleNamespace(capabilities=SimpleNamespace(places_on_pool=pool))
        round_ = Round(ctx, runs, known)
        assert [r.shard_id for r in runs[1:] if round_.ready(r) is None] == waits
        round_.recorded(runs[0])
        assert all(round_.ready(r) is r for r in runs)  # its limits as known: unchanged
