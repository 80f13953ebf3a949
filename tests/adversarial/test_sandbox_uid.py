"""Where bubblewrap cannot be had, a root gate runs the suite as a separate user (issue 26,
part 1: `sandbox: uid`): the suite writes only its own attempt folder and reads nothing only
the gate's user may read (the ledger's key, a 0600 secret); the attempt records `uid`.

`LEDGER_SANDBOX=uid` skips bwrap as a host without user namespaces would. The suite runs under
the system's `/usr/bin/python3` through a stdlib runner (no pytest there): pyenv's interpreters
live under root's private home, which no other user can run: a command the separate user
cannot run stops a gate told `LEDGER_SANDBOX=uid` (exit 2) and, chosen automatically, gives
way to `sandbox: none` (tested too).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from release_ledger.adapters.executors import sandbox
from tests import gatekit
from tests.gatekit import events
from tests.gitrepo import commit, git, make_repo, tag

SYSTEM_PYTHON = "/usr/bin/python3"

RUNNER = '''\
"""Runs each file's test_* functions and writes JUnit XML (stdlib only)."""
import importlib.util, sys, traceback
from xml.sax.saxutils import quoteattr

junit, files = sys.argv[1], sys.argv[2:]
cases = []
for path in files:
    spec = importlib.util.spec_from_file_location(path.replace("/", "_")[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in sorted(n for n in dir(module) if n.startswith("test_")):
        try:
            getattr(module, name)()
            cases.append((path, name, None))
        except Exception:
            cases.append((path, name, traceback.format_exc()))
failed = sum(1 for case in cases if case[2])
with open(junit, "w") as out:
    out.write(f'<testsuites><testsuite name="runner" tests="{len(cases)}" failures="{failed}">')
    for path, name, error in cases:
        classname = path[:-3].replace("/", ".")
        out.write(f"<testcase classname={quoteattr(classname)} name={quoteattr(name)} "
                  f"file={quoteattr(path)}>")
        if error:
            out.write(f"<failure message={quoteattr(error.splitlines()[-1])}/>")
        out.write("</testcase>")
    out.write("</testsuite></testsuites>")
sys.exit(1 if failed else 0)
'''

HOSTILE = """\
import os, sqlite3
from pathlib import Path

SECRET, REPO, LEDGER = {secret!r}, {repo!r}, {ledger!r}


def test_it_runs_as_another_user():
    assert os.getuid() != 0


def test_a_secret_only_the_gate_may_read_is_unreadable():
    try:
        open(SECRET).read()
    except PermissionError:
        return
    raise AssertionError("read the secret")


def test_the_ledgers_key_is_unreadable():
    try:
        open(LEDGER + ".key", "rb").read()
    except PermissionError:
        return
    raise AssertionError("read the ledger's key")


def test_the_ledger_cannot_be_changed():
    try:
        db = sqlite3.connect(LEDGER)
        db.execute("UPDATE ledger_status SET verdict = 'passed'")
        db.commit()
    except sqlite3.Error:
        return
    raise AssertionError("changed the ledger")


def test_the_users_repository_is_not_writable():
    try:
        Path(REPO, "pwned.txt").write_text("x")
    except OSError:
        return
    raise AssertionError("wrote into the repository")


def test_its_own_checkout_is_writable():
    Path("out.txt").write_text("mine")
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder other users may search (tmp_path's parents are 0700): the repository and the
    ledger the suite attacks live here, as on a build machine."""
    folder = Path(tempfile.mkdtemp(prefix="release-ledger-uid-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _need_uid_sandbox() -> None:
    if sandbox.shard_user() is None:
        pytest.skip("a separate user needs a root gate")
    if not sandbox.others_may_use(SYSTEM_PYTHON):
        pytest.skip(f"{SYSTEM_PYTHON} is not there for other users to run")
    plugin = Path(gatekit.REPO_ROOT, "adapters", "pytest_plugin")
    if not sandbox.others_may_use(str(plugin)):
        pytest.skip("the gate's own checkout is not readable by other users here")


@pytest.mark.slow
def test_a_suite_run_as_a_separate_user_reaches_nothing_of_the_gates(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need_uid_sandbox()
    monkeypatch.setenv("LEDGER_SANDBOX", "uid")
    monkeypatch.setenv("TMPDIR", str(shared_dir))  # the gate's scratch, searchable
    secret = shared_dir / "secret"
    secret.write_text("password = hunter2\n")
    secret.chmod(0o600)
    repo = make_repo(
        shared_dir, {"runner.py": RUNNER, "tests/test_a.py": "def test_a():\n    pass\n"}
    )
    tag(repo, "v1")
    ledger = shared_dir / "ledger" / "ledger.db"
    hostile = HOSTILE.format(secret=str(secret), repo=str(repo), ledger=str(ledger))
    commit(repo, {"tests/test_hostile.py": hostile})
    objects_before = git(repo, "count-objects", "-v")

    result = gatekit.gate(
        shared_dir, repo, "--env", "none", "--measure", "never", "--no-release-builds",
        "--command", f"{SYSTEM_PYTHON} runner.py {{junit}} {{files}}",
    )  # fmt: skip

    assert result.code == 0, (result.document["introduced"], result.document.get("failures"))
    assert result.document["status"] == "passed"
    recorded = events(shared_dir, result.document["run_id"])
    attempts = [e for e in recorded if e["kind"] == "ShardAttemptRecorded"]
    assert attempts and {e["sandbox"] for e in attempts} == {"uid"}
    assert not (repo / "pwned.txt").exists()
    assert git(repo, "count-objects", "-v") == objects_before
    assert gatekit.run_ledger(shared_dir, "verify").code == 0


def test_a_command_another_user_cannot_run_stops_the_uid_mode_and_runs_unconfined_in_auto(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`LEDGER_SANDBOX=uid` insists: a command no other user can run is `Unavailable` (the
    gate stops, exit 2), never a quiet run as root; chosen automatically (no bwrap here), the
    uid mode gives way to `none`, which the attempt records."""
    if sandbox.shard_user() is None:
        pytest.skip("a separate user needs a root gate")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    program = private / "runner"
    program.write_text("#!/bin/sh\ntrue\n")
    program.chmod(0o755)
    mine = Path(tempfile.mkdtemp())
    try:
        monkeypatch.setenv("LEDGER_SANDBOX", "uid")
        with pytest.raises(sandbox.Unavailable, match="LEDGER_SANDBOX=uid"):
            sandbox.wrap([str(program)], cwd=str(mine), writable=[str(mine)], readable=[],
                         hidden=[])  # fmt: skip
        assert mine.stat().st_uid == os.geteuid()  # nothing given away
        monkeypatch.delenv("LEDGER_SANDBOX")
        monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap to be found
        sandbox.bwrap.cache_clear()
        try:
            argv, used = sandbox.wrap([str(program)], cwd=str(mine), writable=[str(mine)],
                                      readable=[], hidden=[])  # fmt: skip
        finally:
            sandbox.bwrap.cache_clear()
        assert (argv, used) == ([str(program)], "none")
        assert mine.stat().st_uid == os.geteuid()
    finally:
        shutil.rmtree(mine)


def test_the_separate_user_is_given_only_the_attempts_folder(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sandbox.shard_user() is None or not sandbox.others_may_use("/bin/true"):
        pytest.skip("a separate user needs a root gate and /bin/true")
    monkeypatch.setenv("LEDGER_SANDBOX", "uid")
    attempt = shared_dir / "attempt"
    (attempt / "w").mkdir(parents=True)
    (attempt / "w" / "file").write_text("x")
    other = shared_dir / "other"
    other.mkdir()

    argv, used = sandbox.wrap(["true"], cwd=str(attempt / "w"), writable=[str(attempt)],
                              readable=[], hidden=[], path="/usr/bin:/bin")  # fmt: skip

    assert (argv, used) == (["true"], "uid")
    owner = sandbox.credentials(used, str(attempt))
    assert owner is not None and owner[0] != 0
    assert {p.stat().st_uid for p in [attempt, attempt / "w", attempt / "w" / "file"]} == {owner[0]}
    assert other.stat().st_uid == os.geteuid()
    assert sandbox.credentials("bwrap", str(attempt)) is None
    assert sandbox.credentials("none", str(attempt)) is None
