"""A hostile suite inside the sandbox (issue 26, part 1): it cannot read the home directory,
see the ledger or the user's repository, touch another attempt, or outlive its shard.

A real gate whose head adds a test file that tries each escape: a test passes when the escape
fails, so a sandbox that holds gives `passed` and any escape is an introduced failure. What the
suite tried to damage is checked from outside afterwards. Skipped where bubblewrap cannot make
its namespaces (the attempts then record `sandbox: none`, tested below).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from release_ledger.adapters.executors import sandbox
from tests import gatekit
from tests.gatekit import events
from tests.gitrepo import commit, git, make_repo, tag

ORPHAN_SECONDS = "313.25"  # a `sleep` no other process on the machine runs

HOSTILE = '''
import os, subprocess, sys
from pathlib import Path

HOME_SECRET = {home_secret!r}
REPO = {repo!r}
LEDGER = {ledger!r}


def test_the_home_directory_is_not_visible():
    assert not os.path.exists(HOME_SECRET)


def test_the_users_repository_is_neither_visible_nor_writable():
    assert not os.path.exists(os.path.join(REPO, ".git"))
    try:
        Path(REPO, "pwned.txt").write_text("x")
    except OSError:
        pass
    assert not os.path.exists(os.path.join(REPO, "pwned.txt"))


def test_the_ledger_is_not_visible():
    assert not os.path.exists(LEDGER)


def test_no_other_attempt_is_visible():
    here = Path.cwd().resolve()
    scratch = here.parent.parent  # the gate's scratch folder holds every attempt's folder
    assert [p for p in scratch.iterdir() if p != here.parent] == []


def test_nothing_outside_the_attempt_is_writable():
    for target in ("/usr/pwned", "/etc/pwned", os.path.join(sys.prefix, "pwned")):
        try:
            Path(target).write_text("x")
        except OSError:
            continue
        raise AssertionError(f"wrote {{target}}")


def test_an_orphan_that_leaves_the_session_and_environment_is_started():
    subprocess.Popen(["sleep", {seconds!r}], start_new_session=True, env={{}},
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''


def _orphans() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline[:2] == [b"sleep", ORPHAN_SECONDS.encode()]:
            found.append(int(entry))
    return found


@pytest.mark.slow
def test_a_hostile_suite_reaches_nothing_outside_its_attempt_and_dies_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap is missing or cannot make namespaces here")
    home = tmp_path / "home"
    home.mkdir()
    secret = home / ".pypirc"
    secret.write_text("password = hunter2\n")
    monkeypatch.setenv("HOME", str(home))
    sandbox.bwrap.cache_clear()
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    ledger = tmp_path / "ledger" / "ledger.db"
    commit(repo, {"tests/test_hostile.py": HOSTILE.format(
        home_secret=str(secret), repo=str(repo), ledger=str(ledger), seconds=ORPHAN_SECONDS,
    )})  # fmt: skip
    refs_before = git(repo, "show-ref")
    objects_before = git(repo, "count-objects", "-v")

    result = gatekit.gate(tmp_path, repo, "--env", "none", "--no-release-builds")

    assert result.code == 0, (result.stdout, result.stderr)
    document = result.document
    assert document["status"] == "passed"
    recorded = events(tmp_path, document["run_id"])
    attempts = [e for e in recorded if e["kind"] == "ShardAttemptRecorded"]
    assert attempts and {e["sandbox"] for e in attempts} == {"bwrap"}
    assert _orphans() == []  # died with its shard, whatever it did with its session
    assert secret.read_text() == "password = hunter2\n"
    assert not (repo / "pwned.txt").exists()
    assert git(repo, "show-ref") == refs_before
    assert git(repo, "count-objects", "-v") == objects_before
    assert gatekit.run_ledger(tmp_path, "verify").code == 0


def test_without_bubblewrap_the_attempt_says_it_ran_unconfined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap to be found
    sandbox.bwrap.cache_clear()
    try:
        argv, used = sandbox.wrap(["true"], cwd=str(tmp_path), writable=[str(tmp_path)],
                                  readable=[], hidden=[])  # fmt: skip
    finally:
        sandbox.bwrap.cache_clear()
    assert (argv, used) == (["true"], "none")


def test_a_sandboxed_command_sees_its_writable_folder_and_a_private_tmp(tmp_path: Path) -> None:
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap is missing or cannot make namespaces here")
    outside = tmp_path / "hidden"
    outside.mkdir()
    (outside / "secret").write_text("s")
    mine = tmp_path / "mine"
    mine.mkdir()
    shared_tmp = Path("/tmp") / f"release-ledger-{os.getpid()}-visible"
    shared_tmp.write_text("v")
    script = (
        f"test ! -e {outside}/secret && touch {mine}/ok && ! touch /usr/x 2>/dev/null"
        f" && test ! -e {shared_tmp}"
    )
    argv, used = sandbox.wrap(["sh", "-c", script], cwd=str(mine), writable=[str(mine)],
                              readable=[], hidden=[str(outside)])  # fmt: skip

    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    finally:
        shared_tmp.unlink()

    assert used == "bwrap"
    assert done.returncode == 0, done.stderr
    assert (mine / "ok").exists()


def test_the_approval_report_says_when_the_suite_ran_unconfined() -> None:
    from release_ledger.domain.rules import get_rule
    from release_ledger.domain.run_state import fold
    from release_ledger.projections.checks import Index, gate_metric_v1
    from tests.runbuilder import RunBuilder

    def gate_why(sandboxed: str) -> str:
        run = RunBuilder().discover(["tests/test_a.py"]).plan({"s1": ["tests/test_a.py"]})
        for revision in ("head", "base"):
            run.attempt("s1", revision, ["tests/test_a.py"], {"tests/test_a.py::test_a": "passed"},
                        sandbox=sandboxed)  # fmt: skip
        facts = list(enumerate(run.events, start=1))
        state = fold(facts, run.artifacts)
        return gate_metric_v1(state, get_rule("default").decide(state), Index(facts)).why

    assert "2 shard attempts ran without a sandbox" in gate_why("none")
    assert "sandbox" not in gate_why("bwrap")
    assert "sandbox" not in gate_why("")  # runs recorded before sandboxes read as they did


HOLDER = f"""\
import os, subprocess, time


def test_leaves_a_daemon_and_holds():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvpe("sleep", ["sleep", "{ORPHAN_SECONDS}"], {{}})
        os._exit(0)
    time.sleep(300)
"""


@pytest.mark.slow
def test_after_kill_9_of_the_gate_nothing_of_a_sandboxed_suite_is_alive(tmp_path: Path) -> None:
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap is missing or cannot make namespaces here")
    import signal
    import time

    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    commit(repo, {"tests/test_hold.py": HOLDER})
    gate = gatekit.start_process(
        tmp_path, "gate", "--base", "v1", "--repo", str(repo), "--env", "none",
        "--measure", "never", "--questions", "0",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _orphans() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _orphans(), "the suite's daemon never started"
        gate.send_signal(signal.SIGKILL)
        gate.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _orphans() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _orphans() == []
    finally:
        if gate.poll() is None:
            gate.kill()
        for pid in _orphans():
            os.kill(pid, signal.SIGKILL)
