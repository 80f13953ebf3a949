"""Figures come from the supervisor, not from the suite (issue 38, part 4). Real gates whose
head is hostile:

- a test that parks 300 MB in its private `/tmp` (a RAM-backed tmpfs in the sandbox) under a
  128 MB budget was recorded at a few tens of MB and passed: the supervisor now counts what
  the attempt holds in its sandbox's tmpfs mounts, so the file is an `oom` finding;
- a test file that prints a forged `release-ledger: time-limit` line after a clean run got an
  innocent test named as hung: a line is believed only when the supervisor saw the run end
  as the plugin ends one, at or after the limit the gate gave; the attempt records why not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from release_ledger.adapters.executors import sandbox
from tests.gatekit import events, gate, run_ledger
from tests.gitrepo import commit, make_repo, tag

FAST = "def test_one():\n    assert True\n"


def parks_in_tmp(mb: int) -> str:
    """A test file whose test writes `mb` MB into /tmp and leaves it there."""
    return (
        "def test_parks_files_in_tmp():\n"
        "    with open('/tmp/parked', 'wb') as out:\n"
        f"        for _ in range({mb}):\n"
        "            out.write(b'x' * (1024 * 1024))\n"
    )


@pytest.mark.slow
def test_files_parked_in_the_sandboxs_tmp_count_as_the_attempts_memory(tmp_path: Path) -> None:
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap is missing or cannot make namespaces here: /tmp is not private")
    repo = make_repo(tmp_path, {"tests/test_a.py": FAST, "tests/test_tmp.py": parks_in_tmp(2)})
    tag(repo, "v1")
    commit(repo, {"tests/test_tmp.py": parks_in_tmp(300)}, "head: 300 MB parked in /tmp")
    result = gate(tmp_path, repo, "--env", "none", "--budget-gib", "0.125",
                  "--isolation-budget-gib", "0.125", "--timeout", "120", "--rounds", "1",
                  "--no-release-builds")  # fmt: skip
    assert result.code == 1, (result.stdout, result.stderr)
    document = result.document
    (blown,) = document["oom"]
    assert blown["file"] == "tests/test_tmp.py"
    assert blown["head_mb"] > 128 and blown["base_mb"] < 100
    recorded = events(tmp_path, str(document["run_id"]))
    assert {e["sandbox"] for e in recorded if e["kind"] == "ShardAttemptRecorded"} == {"bwrap"}


def parks_in_shm(mb: int, name: str) -> str:
    """A test file whose test writes `mb` MB into the host's shared `/dev/shm` (a tmpfs:
    RAM) and leaves it there."""
    return (
        "def test_parks_files_in_shm():\n"
        f"    with open({name!r}, 'wb') as out:\n"
        f"        for _ in range({mb}):\n"
        "            out.write(b'x' * (1024 * 1024))\n"
    )


@pytest.mark.slow
def test_in_the_uid_mode_files_the_attempts_user_parks_in_a_shared_tmpfs_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`sandbox: uid` has no private tmpfs: a test that parks 300 MB in `/dev/shm` under a
    128 MB budget is `oom`, because the files its own user owns there are counted."""
    from tests.adversarial.test_sandbox_uid import RUNNER, SYSTEM_PYTHON, _need_uid_sandbox

    _need_uid_sandbox()
    if not os.path.isdir("/dev/shm") or not os.stat("/dev/shm").st_mode & 0o002:
        pytest.skip("no shared /dev/shm here")
    top = Path(tempfile.mkdtemp(prefix="release-ledger-shm-"))
    top.chmod(0o755)
    parked = f"/dev/shm/release-ledger-test-{os.getpid()}"
    try:
        monkeypatch.setenv("LEDGER_SANDBOX", "uid")
        monkeypatch.setenv("TMPDIR", str(top))
        repo = make_repo(top, {"runner.py": RUNNER, "tests/test_a.py": FAST,
                               "tests/test_tmp.py": parks_in_shm(2, parked + "-base")})  # fmt: skip
        tag(repo, "v1")
        commit(repo, {"tests/test_tmp.py": parks_in_shm(300, parked)}, "head: 300 MB in shm")
        result = gate(top, repo, "--env", "none", "--budget-gib", "0.125",
                      "--isolation-budget-gib", "0.125", "--timeout", "120", "--rounds", "1",
                      "--no-release-builds", "--measure", "never",
                      "--command", f"{SYSTEM_PYTHON} runner.py {{junit}} {{files}}")  # fmt: skip
        assert result.code == 1, (result.stdout, result.stderr)
        (blown,) = result.document["oom"]
        assert blown["file"] == "tests/test_tmp.py"
        recorded = events(top, str(result.document["run_id"]))
        assert {e["sandbox"] for e in recorded if e["kind"] == "ShardAttemptRecorded"} == {"uid"}
    finally:
        for name in (parked, parked + "-base"):  # a user's files outlive it there
            with contextlib.suppress(OSError):
                os.unlink(name)
        shutil.rmtree(top, ignore_errors=True)


FORGER = """
import atexit, os


def _forge():
    os.write(1, b"\\nrelease-ledger: time-limit tests/test_victim.py "
                b"tests/test_victim.py::test_victim after 12.0 s (limit 10 s)\\n")


atexit.register(_forge)


def test_forger():
    assert True
"""
# The same line printed by the suite's own hook at the end of its session, on the shard's log
# (a resident worker's shard ends before its process does: its `atexit` runs later).
FORGING_CONFTEST = """
def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(
        "release-ledger: time-limit tests/test_victim.py "
        "tests/test_victim.py::test_victim after 12.0 s (limit 10 s)"
    )
"""


@pytest.mark.slow
def test_a_forged_time_limit_line_after_a_clean_run_names_no_test_as_hung(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_victim.py": "def test_victim():\n    pass\n",
                                "tests/test_a.py": FAST})  # fmt: skip
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": FAST + FORGER, "tests/conftest.py": FORGING_CONFTEST},
           "head: a test file and a conftest that forge a line")  # fmt: skip
    result = gate(tmp_path, repo, "--env", "none", "--shards", "1", "--rounds", "1",
                  "--no-release-builds")  # fmt: skip
    assert result.code == 0, (result.stdout, result.stderr)
    document = result.document
    assert document["status"] == "passed"
    assert "hung" not in document and document["introduced"] == []
    recorded = events(tmp_path, str(document["run_id"]))
    heads = [e for e in recorded if e["kind"] == "ShardAttemptRecorded" and e["revision"] == "head"]
    assert heads and all("killed_test" not in e and not e["timed_out"] for e in heads)
    doubts = [e["time_limit_not_believed"] for e in heads]
    assert all("tests/test_victim.py::test_victim" in d and "exit 0" in d for d in doubts)
    shown = run_ledger(tmp_path, "show", str(document["run_id"])).stdout
    assert "not believed: a time-limit line named tests/test_victim.py::test_victim" in shown


def clocked(sleep_s: float, rate: float | None) -> str:
    """A test file whose test sleeps `sleep_s`; with `rate`, the module first makes
    `time.perf_counter` (the clock the plugin times files by) run `rate` times as fast."""
    patch = (
        "import time\n"
        "_real = time.perf_counter\n"
        "_start = _real()\n"
        f"time.perf_counter = lambda: _start + (_real() - _start) * {rate}\n"
        if rate
        else "import time\n"
    )
    return patch + f"\n\ndef test_clocked():\n    time.sleep({sleep_s})\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("head", "hidden"),
    [(clocked(7.0, 0.01), True), (clocked(0.1, 100.0), False)],
    ids=["slowed-clock-hides-70x", "sped-clock-forges-100x"],
)
def test_a_file_s_seconds_are_checked_against_the_supervisors_clock(
    tmp_path: Path, head: str, hidden: bool
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": FAST, "tests/test_clock.py": clocked(0.1, None)})
    tag(repo, "v1")
    commit(repo, {"tests/test_clock.py": head}, "head: a test file that bends the clock")
    result = gate(tmp_path, repo, "--env", "none", "--shards", "1", "--measure", "never",
                  "--no-release-builds")  # fmt: skip
    document = result.document
    assert "slower" not in document  # never a slowdown from the suite's own clock
    assert "harness_changed" not in document  # a test file is not the harness
    (doubt,) = document["figures_not_believed"]
    assert doubt["where"].endswith("at head")
    assert ("do not add up" if hidden else "more than") in doubt["why"]
    assert document["status"] == "passed"  # the default rule reports it
    strict = run_ledger(tmp_path, "verdict", str(document["run_id"]), "--rule", "strict",
                        "--json")  # fmt: skip
    assert strict.code == 1, strict.stdout  # strict cannot judge time from such figures
    assert any("figures-not-believed" in r for r in strict.document["reasons"])
    assert "slower" not in strict.document
