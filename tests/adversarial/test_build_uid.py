"""Where bwrap cannot be had, a root gate runs each environment build as a user of its own
(issue 38, `sandbox: uid`): a head whose `setup.py` reads a secret only root may read, writes
into the user's repository and leaves a set-uid, world-writable file in its checkout finds
nothing, writes nothing outside what it was given, and its build ran as a non-zero uid.

What the build saw is built into the package; head's test fails if it saw anything (or ran
as root), so a leak is an introduced failure and the verdict `failed`: the right one is
`passed`. The builds' interpreter is the system's (pyenv's, under root's private home, is
one no other user can run: then `LEDGER_SANDBOX=uid` stops, tested below).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from release_ledger.adapters.executors import build_sandbox, sandbox
from release_ledger.adapters.executors.env_installer import find_uv
from tests import gatekit
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

SYSTEM_PYTHON = "/usr/bin/python3"
PYPROJECT = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    '[project]\nname = "snoop"\nversion = "{version}"\n'
    '[project.optional-dependencies]\ntest = ["pytest"]\n'
)
SNOOPING_SETUP = '''
import os
from setuptools import setup

found = {{"uid": os.getuid()}}
try:
    with open({secret!r}) as handle:
        found["secret"] = handle.read()
except OSError:
    pass
try:
    with open({planted!r}, "w") as handle:
        handle.write("planted by a build")
    found["planted"] = True
except OSError:
    pass
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "src", "snoop", "_found.py"), "w") as h:
    h.write("FOUND = %r\\n" % (found,))
setup()
'''
INIT = "try:\n    from snoop._found import FOUND\nexcept ImportError:\n    FOUND = {'uid': 1}\n"
TEST = (
    "from snoop import FOUND\n\n\n"
    "def test_the_build_ran_as_another_user_and_found_nothing():\n"
    "    assert FOUND.pop('uid') != 0\n"
    "    assert FOUND == {}\n"
)


@pytest.fixture
def shared_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder other users may search (tmp_path's parents are 0700), as on a build machine:
    the repository, the ledger, the gate's scratch and the environments' cache live here."""
    folder = Path(tempfile.mkdtemp(prefix="release-ledger-build-uid-"))
    folder.chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setenv("LEDGER_ENVS_DIR", str(folder / "envs"))
    monkeypatch.setenv("LEDGER_SANDBOX", "uid")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _need_build_user() -> None:
    if sandbox.shard_user() is None:
        pytest.skip("a separate user needs a root gate")
    if not sandbox.others_may_use(SYSTEM_PYTHON):
        pytest.skip(f"{SYSTEM_PYTHON} is not there for other users to run")
    uv = find_uv(None)
    if uv is None or not sandbox.others_may_use(uv):
        pytest.skip("uv is not there for other users to run")
    if not sandbox.others_may_use(str(Path(gatekit.REPO_ROOT, "adapters", "pytest_plugin"))):
        pytest.skip("the gate's own checkout is not readable by other users here")


def _snooping_repo(folder: Path) -> tuple[Path, Path, Path]:
    """(repository, the 0600 secret, where the build tries to plant a file)."""
    secret = folder / "secret"
    secret.write_text("password = hunter2\n")
    secret.chmod(0o600)
    files = {
        "pyproject.toml": PYPROJECT.format(version="1.0"),
        "setup.py": "from setuptools import setup\nsetup()\n",
        "src/snoop/__init__.py": INIT,
        "tests/test_snoop.py": TEST,
        ".gitignore": "src/snoop/_found.py\n",
    }
    repo = make_repo(folder, files)
    tag(repo, "v1")
    planted = repo / "planted.txt"
    snooping = SNOOPING_SETUP.format(secret=str(secret), planted=str(planted))
    commit(repo, {"setup.py": snooping, "pyproject.toml": PYPROJECT.format(version="2.0")})
    return repo, secret, planted


def test_a_build_run_as_its_own_user_reads_no_secret_and_writes_nothing_of_the_users(
    shared_dir: Path,
) -> None:
    _need_build_user()
    repo, secret, planted = _snooping_repo(shared_dir)

    result = gatekit.gate(shared_dir, repo, "--python", SYSTEM_PYTHON, "--no-release-builds")

    assert result.code == 0, result.stderr or result.document.get("introduced")
    assert result.document["status"] == "passed"
    assert not planted.exists()
    assert secret.stat().st_uid == 0 and secret.read_text().startswith("password")
    recorded = gatekit.events(shared_dir, result.document["run_id"])
    prepared = [e for e in recorded if e["kind"] == "EnvironmentPrepared"]
    assert {e["status"] for e in prepared} == {"ready"} and len(prepared) == 2
    assert all(build_sandbox.UNCONFINED_WARNING not in e["warnings"] for e in prepared)
    attempts = [e for e in recorded if e["kind"] == "ShardAttemptRecorded"]
    assert attempts and {e["sandbox"] for e in attempts} == {"uid"}
    head_venv = Path(next(e["python"] for e in prepared if e["revision"] == "head")).parent.parent
    built = [p.read_text() for p in head_venv.rglob("snoop/_found.py")]
    assert len(built) == 1 and "'uid': 0" not in built[0] and "secret" not in built[0], built
    # What the builds made is the gate's user's again: no other user can write it.
    for venv in {Path(e["python"]).parent.parent for e in prepared}:
        for path in [venv, *venv.rglob("*")]:
            seen = path.lstat()
            assert seen.st_uid == os.geteuid(), path
            assert path.is_symlink() or not seen.st_mode & 0o6022, path


def test_a_build_another_user_cannot_run_stops_the_uid_mode(shared_dir: Path) -> None:
    """The gate's own interpreter lies under root's private home here: a build on it cannot
    run as another user, and `LEDGER_SANDBOX=uid` stops (exit 2, one line), never builds as
    root."""
    if sandbox.shard_user() is None:
        pytest.skip("a separate user needs a root gate")
    if all(sandbox.others_may_use(p) for p in sandbox.prefixes(sys.executable)):
        pytest.skip("the gate's interpreter is one other users may run here")
    repo, _secret, planted = _snooping_repo(shared_dir)

    result = gatekit.gate(shared_dir, repo, "--no-release-builds")

    assert result.code == 2, result.stdout
    assert "LEDGER_SANDBOX=uid" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not planted.exists()
