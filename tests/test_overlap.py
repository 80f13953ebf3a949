"""Fixed costs overlapped (issue 41, part 3): both revisions' environments are made at once,
and the release builds run while the shards do — with the same events, the same errors, and
nothing left running when the gate stops."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from release_ledger.adapters.executors import environment
from release_ledger.adapters.executors.local import LocalExecutor
from release_ledger.adapters.git import Worktrees
from release_ledger.domain import events as ev
from release_ledger.domain.execution import EnvironmentRequest
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.gate import GateInterrupted, GateProcess, start
from release_ledger.ledger.options import GateOptions
from release_ledger.ledger.projection import project
from release_ledger.ledger.release import ReleaseWork, release_builds
from release_ledger.ledger.service import Ledger
from release_ledger.ledger.steps.discover import discover
from release_ledger.projections.next_step import Step
from tests.gitrepo import commit, make_repo, tag

# A setup command that starts, then waits for a second one to start (each leaves a mark in
# $RENDEZVOUS): it fails when the builds run one after the other.
RENDEZVOUS = """import os, sys, time, uuid
folder = os.environ["RENDEZVOUS"]
open(os.path.join(folder, uuid.uuid4().hex), "w").close()
deadline = time.time() + 20
while len(os.listdir(folder)) < 2:
    if time.time() > deadline:
        sys.exit("alone: no other build started while this one ran")
    time.sleep(0.05)
"""
TESTS = {"tests/test_a.py": "def test_a():\n    assert True\n"}


@pytest.fixture
def unconfined(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Builds unconfined (the rendezvous folder is outside any build's sandbox)."""
    folder = tmp_path / "rendezvous"
    folder.mkdir()
    monkeypatch.setenv("LEDGER_SANDBOX", "none")
    monkeypatch.setenv("RENDEZVOUS", str(folder))
    return folder


def two_revisions(tmp_path: Path, files: dict[str, str | None]) -> tuple[Path, str, str]:
    repo = make_repo(tmp_path, {**files, **TESTS})
    base = tag(repo, "v1")
    head = commit(repo, {"tests/test_b.py": "def test_b():\n    assert True\n"}, "more tests")
    return repo, base, head


RENDEZVOUS_REQUEST = EnvironmentRequest(
    mode="command", command=("{python}", "rendezvous.py"), pass_env=("RENDEZVOUS",)
)


def test_prepare_builds_both_revisions_environments_at_once(
    tmp_path: Path, unconfined: Path
) -> None:
    repo, base, head = two_revisions(tmp_path, {"rendezvous.py": RENDEZVOUS})
    local = LocalExecutor(
        repo, Worktrees(repo, tmp_path / "cache"), work_dir=tmp_path / "work",
        environment_request=RENDEZVOUS_REQUEST, envs_dir=tmp_path / "envs",
    )  # fmt: skip
    try:
        local.prepare([base, head])
        reports = [local.environment_for(c)[0] for c in (base, head)]
    finally:
        local.close()
    assert [r.status for r in reports] == ["ready", "ready"], [r.error for r in reports]
    assert len(list(unconfined.iterdir())) == 2
    assert reports[0].python != reports[1].python


def test_two_builds_of_one_cache_entry_at_once_build_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two revisions whose environments share a key (here: the same setup command and
    commit): the cache's lock lets one build it while the other waits, then reuses it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setenv("RUNS", str(runs))
    setup = (
        "import os, time, uuid; open(os.path.join(os.environ['RUNS'], uuid.uuid4().hex), 'w');"
        " time.sleep(1)"
    )
    checkouts = []
    for name in ("one", "two"):
        checkout = tmp_path / name
        checkout.mkdir()
        checkouts.append(checkout)
    found: list[dict[str, object]] = []

    def build(checkout: Path) -> None:
        made = environment.prepare(
            str(checkout), mode="command", python=sys.executable, cache=str(tmp_path / "envs"),
            commit="same", command=["{python}", "-c", setup], pass_env=["RUNS"],
        )  # fmt: skip
        found.append(made)

    threads = [threading.Thread(target=build, args=(c,)) for c in checkouts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [f["status"] for f in found] == ["ready", "ready"], found
    assert len(list(runs.iterdir())) == 1  # built once
    assert sorted(bool(f["reused"]) for f in found) == [False, True]
    assert found[0]["python"] == found[1]["python"] and found[0]["key"] == found[1]["key"]


def test_discover_makes_base_environment_while_head_collects(
    tmp_path: Path, sqlite_url: str, unconfined: Path
) -> None:
    """Collection builds the revision's environment first: discovery's two (head's, base's
    for lost coverage) are built at once, before any shard runs."""
    repo, base, head = two_revisions(tmp_path, {"rendezvous.py": RENDEZVOUS})
    ledger = open_ledger(sqlite_url)
    options = GateOptions(repo=repo, base="v1", jobs=2, environment="none", question_budget=0)
    run_id = start(ledger, options)
    local = LocalExecutor(repo, environment_request=RENDEZVOUS_REQUEST, envs_dir=tmp_path / "envs")
    try:
        process = GateProcess(ledger, run_id, local)
        discover(process.step_context, project(ledger, run_id), Step("discover"))
        reports = [local.environment_for(c)[0] for c in (base, head)]
    finally:
        local.close()
    assert [r.status for r in reports] == ["ready", "ready"], [r.error for r in reports]
    assert len(list(unconfined.iterdir())) == 2
    kinds = [r.event.kind for r in ledger.read(run_id)]
    assert kinds[-1] == "TestFilesDiscovered" and "EnvironmentPrepared" not in kinds
    ledger.close()


# --- the release builds while the shards run ------------------------------------------------------


class Watching:
    """An observer that, at the first shard's result, waits (bounded) for the release work to
    end, and keeps what it was told in order."""

    def __init__(self, work: ReleaseWork) -> None:
        self.work = work
        self.said: list[str] = []
        self.ended_during_shards: bool | None = None

    def notice(self, message: str) -> None:
        self.said.append(message)

    def begin(self, label: str, total: int) -> None:
        self.said.append(f"begin {label}")

    def advance(self, label: str, detail: str = "") -> None:
        if self.ended_during_shards is None:
            self.ended_during_shards = self.work.wait(60)
        self.said.append(f"advance {label}")

    def end(self, label: str) -> None:
        self.said.append(f"end {label}")


def gate_with(
    ledger: Ledger, repo: Path, tmp_path: Path, hooks: list[Any], early: list[Any],
    observer: Any = None, trusted: tuple[str, ...] = (), **changes: Any,
) -> list[ev.Event]:  # fmt: skip
    """A gate's run; `trusted`: the commits whose builds share the installers' caches (base's,
    as the gate's wiring names them)."""
    options = GateOptions(
        repo=repo, base="v1", jobs=2, question_budget=0, **{"environment": "none", **changes}
    )
    run_id = start(ledger, options)
    request = options.environment_request.model_copy(update={"trusted_commits": trusted})
    local = LocalExecutor(repo, environment_request=request, envs_dir=tmp_path / "envs")
    try:
        GateProcess(ledger, run_id, local, observer, hooks=hooks, early=early).drive()
    finally:
        local.close()
    return [r.event for r in ledger.read(run_id)]


def released(events: list[ev.Event]) -> list[dict[str, Any]]:
    kinds = (ev.DistributionsBuilt, ev.UpgradeChecked)
    ignored = {"run_id", "at", "id", "interpreter"}
    return [
        {k: v for k, v in e.model_dump().items() if k not in ignored}
        for e in events
        if isinstance(e, kinds)
    ]


def test_the_release_work_runs_while_the_shards_run_and_records_the_same_events(
    tmp_path: Path, sqlite_url: str
) -> None:
    repo, _, _ = two_revisions(tmp_path, {})  # not a packaged project: nothing to build
    ledger = open_ledger(sqlite_url)
    work = ReleaseWork()
    watching = Watching(work)
    overlapped = gate_with(ledger, repo, tmp_path, [work], [work], watching)
    inline = gate_with(ledger, repo, tmp_path, [release_builds], [])
    ledger.close()
    assert watching.ended_during_shards is True
    started = watching.said.index("building head's sdist and wheel, while the tests run")
    assert started < watching.said.index("begin running shards")
    assert released(overlapped) == released(inline)
    assert released(overlapped)[0]["status"] == "not-packaged"
    kinds = [e.kind for e in overlapped]
    # recorded where the hook at the end records them: after every shard
    last_shard = max(i for i, k in enumerate(kinds) if k == "ShardAttemptRecorded")
    assert last_shard < kinds.index("DistributionsBuilt") < kinds.index("RunCompleted")


@pytest.mark.slow
def test_base_s_wheel_for_the_upgrade_is_its_environment_s_never_built_beside_it(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release work starts before the environments are built; base's wheel is taken
    once discovery is done: the one base's environment built, not a second build racing it
    for its lock (nor one the environment would then wait for)."""
    envs = tmp_path / "envs"
    monkeypatch.setenv("LEDGER_ENVS_DIR", str(envs))
    setup = "from setuptools import setup\nsetup(name='demo', version='1.0', py_modules=[])\n"
    repo, base, head = two_revisions(tmp_path, {"setup.py": setup})
    ledger = open_ledger(sqlite_url)
    work = ReleaseWork()
    events = gate_with(
        ledger, repo, tmp_path, [work], [work], trusted=(base,), environment="auto"
    )
    ledger.close()
    prepared = {e.revision: e for e in events if isinstance(e, ev.EnvironmentPrepared)}
    assert {r: e.status for r, e in prepared.items()} == {"head": "ready", "base": "ready"}
    built = {e.revision: e for e in events if isinstance(e, ev.DistributionsBuilt)}
    assert built["base"].status == "built" and built["base"].reused
    assert [f.type for f in built["base"].files] == ["wheel"]
    assert [f.type for f in built["head"].files] == ["sdist", "wheel"]
    # one wheel from the tree per revision (the environments'), one release build (head's)
    assert sorted(p.name.split("-")[0] for p in (envs / "projects").glob("*-*")) == sorted(
        [base, head]
    )
    assert [p.name.split("-")[0] for p in (envs / "dists").glob("*-*")] == [head]


@pytest.mark.slow
def test_base_s_wheel_is_not_built_before_discovery_is_done(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started before discovery, the release work builds head's files, and leaves base's
    wheel to the environment discovery builds: it takes it (or builds it, where no
    environment did, as here: `--env none`) only once discovery is done."""
    envs = tmp_path / "envs"
    monkeypatch.setenv("LEDGER_ENVS_DIR", str(envs))
    setup = "from setuptools import setup\nsetup(name='demo', version='1.0', py_modules=[])\n"
    repo, base, head = two_revisions(tmp_path, {"setup.py": setup})
    ledger = open_ledger(sqlite_url)
    run_id = start(ledger, GateOptions(repo=repo, base="v1", environment="none"))
    local = LocalExecutor(repo)
    context = GateProcess(ledger, run_id, local).context
    undiscovered = project(ledger, run_id)
    work = ReleaseWork()
    work.begin(context, undiscovered)
    deadline = time.monotonic() + 120
    while not list((envs / "dists").glob(f"{head}-*/ready.json")):
        assert time.monotonic() < deadline, "head's files were never built"
        time.sleep(0.05)
    assert not work.wait(1.0)  # waiting for discovery, base's wheel not built
    assert not list((envs / "projects").glob(f"{base}-*"))
    work.begin(context, dataclasses.replace(undiscovered, discovered=True))
    assert work.wait(120)
    assert list((envs / "projects").glob(f"{base}-*/ready.json"))
    local.close()
    ledger.close()


def test_an_error_in_the_background_build_is_recorded_as_at_the_end(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _, _ = two_revisions(tmp_path, {"setup.py": "from setuptools import setup\nsetup()\n"})
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("LEDGER_ENVS_DIR", str(blocked / "envs"))  # the builds' cache: unusable
    ledger = open_ledger(sqlite_url)
    work = ReleaseWork()
    overlapped = gate_with(ledger, repo, tmp_path, [work], [work])
    inline = gate_with(ledger, repo, tmp_path, [release_builds], [])
    ledger.close()
    assert work.started()
    (built,) = released(overlapped)
    assert built["status"] == "error" and built["error"].startswith("NotADirectoryError")
    assert released(overlapped) == released(inline)
    assert [e.kind for e in overlapped][-1] == "RunCompleted"


def test_without_release_builds_nothing_starts(tmp_path: Path, sqlite_url: str) -> None:
    repo, _, _ = two_revisions(tmp_path, {"setup.py": "from setuptools import setup\nsetup()\n"})
    ledger = open_ledger(sqlite_url)
    work = ReleaseWork()
    events = gate_with(ledger, repo, tmp_path, [work], [work], release_builds=False)
    ledger.close()
    assert not work.started()
    assert released(events) == []
    assert events[-1].kind == "RunCompleted"


def test_cancel_kills_what_the_release_work_runs(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (the gate calls `cancel`): the build's running step is killed, nothing kept."""
    monkeypatch.setenv("LEDGER_SANDBOX", "none")
    monkeypatch.setenv("LEDGER_ENVS_DIR", str(tmp_path / "envs"))
    repo, _, _ = two_revisions(tmp_path, {"setup.py": "from setuptools import setup\nsetup()\n"})
    pid_file = tmp_path / "pid"
    hangs = tmp_path / "python"  # head's "interpreter": hangs when the build inspects it
    hangs.write_text(
        f'#!/bin/sh\ncase "$*" in *python_version*) echo $$ > {pid_file}; exec sleep 60;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    hangs.chmod(0o755)
    ledger = open_ledger(sqlite_url)
    run_id = start(ledger, GateOptions(repo=repo, base="v1", environment="none"))
    local = LocalExecutor(repo, python=str(hangs))
    context = GateProcess(ledger, run_id, local).context
    assert context.interpreter == str(hangs)
    work = ReleaseWork()
    work.begin(context, project(ledger, run_id))
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the build never inspected head's interpreter"
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    work.cancel()
    assert work.wait(0) is False and not work.started()  # dropped
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # reaped by the build's own wait once killed
            os.kill(pid, 0)
            time.sleep(0.1)
    local.close()
    ledger.close()


HANGING_BACKEND = """import os, time
def build_sdist(sdist_directory, config_settings=None):
    with open({pid_file!r}, "w") as handle:
        handle.write(str(os.getpid()))
    time.sleep(60)
build_wheel = build_sdist
"""


class InterruptedOnceBuilding:
    """Ctrl-C at the first shard result, once the release build is under way."""

    def __init__(self, pid_file: Path) -> None:
        self.pid_file = pid_file

    def notice(self, message: str) -> None:
        pass

    def begin(self, label: str, total: int) -> None:
        pass

    def advance(self, label: str, detail: str = "") -> None:
        deadline = time.monotonic() + 60
        while not self.pid_file.exists() or not self.pid_file.read_text():
            assert time.monotonic() < deadline, "the release build never started"
            time.sleep(0.05)
        raise KeyboardInterrupt

    def end(self, label: str) -> None:
        pass


def test_ctrl_c_while_the_release_builds_kills_the_build_and_records_nothing_of_it(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "backend.pid"
    monkeypatch.setenv("LEDGER_SANDBOX", "none")  # the backend writes its pid outside
    monkeypatch.setenv("LEDGER_ENVS_DIR", str(tmp_path / "envs"))
    pyproject = (
        '[build-system]\nrequires = []\nbuild-backend = "hang"\nbackend-path = ["."]\n\n'
        '[project]\nname = "hangs"\nversion = "1.0"\n'
    )
    repo, _, _ = two_revisions(
        tmp_path,
        {"pyproject.toml": pyproject, "hang.py": HANGING_BACKEND.format(pid_file=str(pid_file))},
    )
    ledger = open_ledger(sqlite_url)
    work = ReleaseWork()
    options = GateOptions(repo=repo, base="v1", jobs=1, environment="none", question_budget=0)
    run_id = start(ledger, options)
    local = LocalExecutor(repo, environment_request=options.environment_request,
                          envs_dir=tmp_path / "executor-envs")  # fmt: skip
    observer = InterruptedOnceBuilding(pid_file)
    try:
        with pytest.raises(GateInterrupted):
            GateProcess(ledger, run_id, local, observer, hooks=[work], early=[work]).drive()
    finally:
        local.close()
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
    kinds = [r.event.kind for r in ledger.read(run_id)]
    assert kinds[-1] == "RunInterrupted" and "DistributionsBuilt" not in kinds
    ledger.close()
