"""No capability in the suite or its build, whoever runs the gate (issue 38, part 1).

bubblewrap started by a root gate kept every capability (`CapEff 000001fffeffffff`): a test
could remount `/` read-write and unmount the tmpfs covering `/tmp` and the home directory.
A root gate's bwrap now makes a user namespace where the command is an unprivileged user
with no capability. Each attack is a head whose test (or whose `setup.py`, run while its
environment is built) tries it; a test passes when the attack fails, so an escape is an
introduced failure and the verdict `failed`.

The `uid` mode (hosts without user namespaces) gives each attempt a uid of its own, and a
mode the gate is told to use that cannot apply stops it: one line, exit 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from release_ledger.adapters.executors import sandbox
from tests import gatekit
from tests.adversarial.test_build_confined import PYPROJECT, secrets_around
from tests.gitrepo import commit, make_repo, tag

NO_CAPABILITY = "0000000000000000"

# Each attack, from inside: what it found (the capabilities, whether a remount or an unmount
# worked, whether a file under the covered home appeared).
PROBE = '''
import os, subprocess

def _status(name):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return line.split()[1]

def _works(*argv):
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except OSError:
        return False

def probe(covered):
    found = {{
        "uid": os.getuid(),
        "CapEff": _status("CapEff"), "CapPrm": _status("CapPrm"), "CapBnd": _status("CapBnd"),
        "remount /": _works("mount", "-o", "remount,rw", "/"),
        "umount /tmp": _works("umount", "-l", "/tmp"),
        "nested user namespace": _works("unshare", "--user", "--map-root-user", "true"),
    }}
    for folder in covered:
        found["umount " + folder] = _works("umount", "-l", folder)
        found["saw " + folder] = os.path.exists(os.path.join(folder, {marker!r}))
    return found

'''

SUITE = '''
from probe import probe

COVERED = {covered!r}
SECRET_HOME_FILE = {home_file!r}


def test_the_suite_has_no_capability():
    found = probe(COVERED)
    assert found["uid"] != 0
    assert (found["CapEff"], found["CapPrm"], found["CapBnd"]) == ({none!r},) * 3


def test_the_suite_can_neither_remount_nor_uncover():
    found = probe(COVERED)
    escapes = sorted(k for k, v in found.items() if v is True)
    assert escapes == []


def test_the_home_directory_stays_out_of_sight():
    import os
    assert not os.path.exists(SECRET_HOME_FILE)


def test_holds_some_memory():
    block = bytearray(96 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])
    import time
    time.sleep(1.0)
'''


def _need_root_bwrap() -> None:
    if os.geteuid() != 0:
        pytest.skip("the attack is a root gate's: run as root")
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap is missing or cannot make namespaces here")


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A folder outside /tmp (whose private mount hides anything under it anyway), so the
    cover over the home directory is what hides its files."""
    folder = Path(tempfile.mkdtemp(prefix="release-ledger-caps-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_a_root_gates_suite_has_no_capability_and_cannot_uncover_anything(
    outside_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need_root_bwrap()
    home = outside_tmp / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine example.org password hunter2\n")
    monkeypatch.setenv("HOME", str(home))
    repo = make_repo(outside_tmp, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    covered = [str(home), str(repo)]
    commit(repo, {
        "tests/probe.py": PROBE.format(marker=".netrc"),
        "tests/test_escape.py": SUITE.format(
            covered=covered, home_file=str(home / ".netrc"), none=NO_CAPABILITY
        ),
    })  # fmt: skip

    result = gatekit.gate(outside_tmp, repo, "--env", "none", "--no-release-builds",
                          "--measure", "never")  # fmt: skip

    assert result.code == 0, (result.document.get("introduced"), result.stderr)
    assert result.document["status"] == "passed"
    attempts = [
        e for e in gatekit.events(outside_tmp, result.document["run_id"])
        if e["kind"] == "ShardAttemptRecorded"
    ]  # fmt: skip
    assert attempts and {e["sandbox"] for e in attempts} == {"bwrap"}
    # the suite runs in a session of its own inside the sandbox: its memory is still counted
    head = [e for e in attempts if e["revision"] == "head"]
    assert max(e["rss_mb"] for e in head) >= 90
    assert (home / ".netrc").read_text() == "machine example.org password hunter2\n"


BUILD_SETUP = '''
import os, sys
from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "tests"))
from probe import probe

found = probe({covered!r})
with open(os.path.join(here, "src", "capsule", "_found.py"), "w") as handle:
    handle.write("FOUND = %r\\n" % (found,))
setup()
'''
BUILD_TEST = '''
from capsule import FOUND


def test_the_build_had_no_capability_and_uncovered_nothing():
    assert FOUND["uid"] != 0
    assert (FOUND["CapEff"], FOUND["CapPrm"], FOUND["CapBnd"]) == ({none!r},) * 3
    assert sorted(k for k, v in FOUND.items() if v is True) == []
'''


@pytest.mark.slow
def test_a_root_gates_build_step_has_no_capability(
    outside_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """head's `setup.py` runs while its environment is built (uv, in bwrap): it finds no
    capability and cannot remount or uncover; the environment still builds (the venv, uv's
    cache and the checkout readable and writable as before)."""
    _need_root_bwrap()
    home = secrets_around(outside_tmp, monkeypatch)
    files = {
        "pyproject.toml": PYPROJECT.format(version="1.0").replace("snoop", "capsule"),
        "setup.py": "from setuptools import setup\nsetup()\n",
        "src/capsule/__init__.py": "FOUND = {}\n",
        "tests/test_capsule.py": "def test_imports():\n    import capsule\n",
        ".gitignore": "src/capsule/_found.py\n",
    }
    repo = make_repo(outside_tmp, files)
    tag(repo, "v1")
    commit(repo, {
        "pyproject.toml": PYPROJECT.format(version="2.0").replace("snoop", "capsule"),
        "tests/probe.py": PROBE.format(marker=".netrc"),
        "setup.py": BUILD_SETUP.format(covered=[str(home), str(repo)]),
        "src/capsule/__init__.py": "from capsule._found import FOUND\n",
        "tests/test_capsule.py": BUILD_TEST.format(none=NO_CAPABILITY),
    })  # fmt: skip

    result = gatekit.gate(outside_tmp, repo, "--no-release-builds", "--measure", "never")

    assert result.code == 0, (result.document.get("introduced"), result.stderr)
    assert result.document["status"] == "passed"
    prepared = [
        e for e in gatekit.events(outside_tmp, result.document["run_id"])
        if e["kind"] == "EnvironmentPrepared"
    ]  # fmt: skip
    assert {e["status"] for e in prepared} == {"ready"}


def test_a_confined_command_is_an_unprivileged_user_in_a_session_of_its_own(
    tmp_path: Path,
) -> None:
    _need_root_bwrap()
    script = (
        "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; id -u; "
        "! mount -o remount,rw / 2>/dev/null && ! umount -l /tmp 2>/dev/null && echo held; "
        "touch mine && echo wrote"
    )
    argv, used = sandbox.wrap(["sh", "-c", script], cwd=str(tmp_path), writable=[str(tmp_path)],
                              readable=[], hidden=[])  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert used == "bwrap", done.stderr
    lines = done.stdout.split("\n")
    assert lines[:3] == [f"Cap{n}:\t{NO_CAPABILITY}" for n in ("Prm", "Eff", "Bnd")]
    assert lines[3] == str(sandbox.inner_user()[0])
    assert lines[4:6] == ["held", "wrote"]
    # written as the unprivileged user inside, owned by the gate's user outside
    assert (tmp_path / "mine").stat().st_uid == os.geteuid()


# -- the uid mode --------------------------------------------------------------------------


def test_each_attempt_in_the_uid_mode_is_a_user_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two attempts side by side: each its own uid, neither can read or write the other's
    folder (both given away: the gate's own files stay the gate's)."""
    if os.geteuid() != 0 or not sandbox.others_may_use("/bin/sh"):
        pytest.skip("users of their own need a root gate")
    monkeypatch.setenv("LEDGER_SANDBOX", "uid")
    top = Path(tempfile.mkdtemp(prefix="release-ledger-uids-", dir="/var/tmp"))
    try:
        top.chmod(0o711)
        folders = [top / "a", top / "b"]
        owners = []
        for folder in folders:
            folder.mkdir(mode=0o700)
            (folder / "secret").write_text(folder.name)
            _, used = sandbox.wrap(["sh"], cwd=str(folder), writable=[str(folder)],
                                   readable=[], hidden=[], path="/usr/bin:/bin")  # fmt: skip
            assert used == "uid"
            owners.append(sandbox.credentials(used, str(folder)))
        assert owners[0] != owners[1] and all(o and o[0] != 0 for o in owners)
        for mine, theirs, owner in [(folders[0], folders[1], owners[0]),
                                    (folders[1], folders[0], owners[1])]:  # fmt: skip
            assert owner is not None
            script = f"cat {theirs}/secret || touch {theirs}/pwned || exit 0; exit 1"
            done = subprocess.run(
                ["sh", "-c", script], cwd=mine, user=owner[0], group=owner[1], extra_groups=[],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout
            assert not (theirs / "pwned").exists()
            own = subprocess.run(["cat", f"{mine}/secret"], user=owner[0], group=owner[1],
                                 extra_groups=[], capture_output=True, text=True, check=False)
            assert own.stdout == mine.name
    finally:
        shutil.rmtree(top, ignore_errors=True)


UID_SUITE = '''
import os

SECRET = {secret!r}


def _gate_pid():
    tag = os.environ["RELEASE_LEDGER_SHARD"]  # rl-<gate pid>-...
    return int(tag.split("-")[1])


def test_the_gates_environment_is_unreadable():
    try:
        open("/proc/%d/environ" % _gate_pid(), "rb").read()
    except PermissionError:
        return
    raise AssertionError("read the gate's environment")


def test_no_command_line_on_the_machine_carries_the_secret():
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                if SECRET.encode() in handle.read():
                    found.append(entry)
        except OSError:
            continue
    assert found == []


def test_no_other_attempt_is_readable():
    here = os.path.dirname(os.getcwd())
    scratch = os.path.dirname(here)
    try:
        os.listdir(scratch)
    except PermissionError:
        return
    raise AssertionError("listed the gate's scratch")
'''


@pytest.mark.slow
def test_in_the_uid_mode_a_suite_reads_neither_the_gates_environment_nor_a_secret_in_argv(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.adversarial.test_sandbox_uid import RUNNER, SYSTEM_PYTHON, _need_uid_sandbox

    _need_uid_sandbox()
    secret = "t0ken-9c2e"
    monkeypatch.setenv("LEDGER_SANDBOX", "uid")
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    top = Path(tempfile.mkdtemp(prefix="release-ledger-uid-"))
    try:
        top.chmod(0o755)
        monkeypatch.setenv("TMPDIR", str(top))
        repo = make_repo(top, {"runner.py": RUNNER, "tests/test_a.py": "def test_a():\n    pass\n"})
        tag(repo, "v1")
        commit(repo, {"tests/test_snoop.py": UID_SUITE.format(secret=secret)})
        result = gatekit.gate(
            top, repo, "--env", "none", "--measure", "never", "--no-release-builds",
            "--command", f"{SYSTEM_PYTHON} runner.py {{junit}} {{files}}",
        )  # fmt: skip
        assert result.code == 0, (result.document.get("introduced"), result.stderr)
        attempts = [
            e for e in gatekit.events(top, result.document["run_id"])
            if e["kind"] == "ShardAttemptRecorded"
        ]  # fmt: skip
        assert attempts and {e["sandbox"] for e in attempts} == {"uid"}
    finally:
        shutil.rmtree(top, ignore_errors=True)


# -- a mode asked for that cannot apply ----------------------------------------------------


def _one_line_exit_2(result: gatekit.Result, *words: str) -> None:
    assert result.code == 2, (result.stdout, result.stderr)
    assert result.stderr.strip().count("\n") == 0, result.stderr
    for word in words:
        assert word in result.stderr


def test_bwrap_asked_for_where_it_cannot_run_stops_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": "def test_b():\n    pass\n"})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "sh"):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))  # git, but no bwrap
    monkeypatch.setenv("LEDGER_SANDBOX", "bwrap")
    sandbox.bwrap.cache_clear()
    try:
        result = gatekit.gate(tmp_path, repo, "--env", "none", "--no-release-builds")
    finally:
        sandbox.bwrap.cache_clear()
    _one_line_exit_2(result, "LEDGER_SANDBOX=bwrap")


def test_uid_asked_for_with_an_interpreter_other_users_cannot_run_stops_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the uid mode is a root gate's")
    if sandbox.others_may_use(sys.executable):
        pytest.skip("this interpreter is usable by other users here")
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": "def test_b():\n    pass\n"})
    monkeypatch.setenv("LEDGER_SANDBOX", "uid")
    result = gatekit.gate(tmp_path, repo, "--env", "none", "--no-release-builds",
                          "--measure", "never")  # fmt: skip
    _one_line_exit_2(result, "LEDGER_SANDBOX=uid")


def test_an_unknown_sandbox_stops_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    monkeypatch.setenv("LEDGER_SANDBOX", "chroot")
    result = gatekit.gate(tmp_path, repo, "--env", "none", "--no-release-builds")
    _one_line_exit_2(result, "LEDGER_SANDBOX=chroot")
