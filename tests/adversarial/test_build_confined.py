"""Environment builds are the project's code too: a head whose `setup.py` looks for the gate's
secrets while its wheel is built (the gate's tokens in the environment, a file in the home
directory, the ledger's key) and tries to plant a file in the user's repository finds none of
them, because each build step runs with the build environment's allow-list and in bubblewrap.

What the build found is built into the package; head's test fails if anything was found, so a
leak is an introduced failure and the verdict `failed`.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from adapters.executors import build_sandbox, environment, sandbox
from tests import gatekit
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

SECRET = "b41ld-s3cret"
PYPROJECT = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    '[project]\nname = "snoop"\nversion = "{version}"\n'
    '[project.optional-dependencies]\ntest = ["pytest"]\n'
)
SNOOPING_SETUP = '''
import os
from setuptools import setup

found = {{"env": sorted(k for k, v in os.environ.items() if {secret!r} in v)}}
for label, path in {paths!r}.items():
    try:
        with open(path) as handle:
            found[label] = handle.read()
    except OSError:
        pass
try:
    with open({planted!r}, "w") as handle:  # checked from outside: it must not be there
        handle.write("planted by a build")
except OSError:
    pass
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "src", "snoop", "_found.py"), "w") as h:
    h.write("FOUND = %r\\n" % (found,))
setup()
'''
INIT = "try:\n    from snoop._found import FOUND\nexcept ImportError:\n    FOUND = {'env': []}\n"
TEST = (
    "from snoop import FOUND\n\n\n"
    "def test_the_build_found_nothing():\n    assert FOUND == {'env': []}\n"
)


def test_a_build_finds_no_secret_and_writes_nothing_outside_its_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap cannot run here: builds run unconfined")
    real_cache = build_sandbox._tool_cache("uv")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine example.org password {SECRET}\n")
    monkeypatch.setenv("HOME", str(home))
    if real_cache:
        monkeypatch.setenv("UV_CACHE_DIR", real_cache)  # the downloads already made
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    files = {
        "pyproject.toml": PYPROJECT.format(version="1.0"),
        "setup.py": "from setuptools import setup\nsetup()\n",
        "src/snoop/__init__.py": INIT,  # src layout: the tests import the built wheel
        "tests/test_snoop.py": TEST,
        ".gitignore": "src/snoop/_found.py\n",
    }
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    planted = repo / "planted.txt"
    paths = {
        "netrc": str(home / ".netrc"),
        "ledger_key": str(tmp_path / "ledger" / "ledger.db.key"),
    }
    snooping = SNOOPING_SETUP.format(secret=SECRET, paths=paths, planted=str(planted))
    commit(repo, {"setup.py": snooping, "pyproject.toml": PYPROJECT.format(version="2.0")})

    result = gatekit.gate(tmp_path, repo, "--no-release-builds")

    assert result.code == 0, result.document.get("introduced") or result.stderr
    assert result.document["status"] == "passed"
    assert not planted.exists()
    assert (tmp_path / "ledger" / "ledger.db.key").is_file()  # there, but out of the build's sight
    prepared = [
        e for e in gatekit.events(tmp_path, result.document["run_id"])
        if e["kind"] == "EnvironmentPrepared"
    ]  # fmt: skip
    assert {e["status"] for e in prepared} == {"ready"}
    assert all(build_sandbox.UNCONFINED_WARNING not in e["warnings"] for e in prepared)


def test_a_build_environment_keeps_the_allow_list_and_what_installs_need() -> None:
    gate_env = {
        "PATH": "/usr/bin", "HOME": "/root", "GITHUB_TOKEN": SECRET, "LEDGER_URL": SECRET,
        "UV_INDEX_URL": "https://pypi.example/simple", "HTTPS_PROXY": "http://proxy:3128",
        "PIP_FIND_LINKS": "/wheels", "CFLAGS": "-O2", "AWS_SECRET_ACCESS_KEY": SECRET,
        "CI_JOB_ID": "7",
    }  # fmt: skip
    env = environment.build_env(gate_env, ["CI_*", "LEDGER_*"])
    assert env == {
        "PATH": "/usr/bin", "HOME": "/root", "UV_INDEX_URL": "https://pypi.example/simple",
        "HTTPS_PROXY": "http://proxy:3128", "PIP_FIND_LINKS": "/wheels", "CFLAGS": "-O2",
        "CI_JOB_ID": "7",
    }  # fmt: skip


def test_a_confined_step_cannot_write_to_the_repository_but_can_to_its_checkout() -> None:
    """Outside /tmp (whose private mount would hide anything under it anyway): the user's
    repository and the home directory are covered, the checkout and the caches writable."""
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap cannot run here")
    top = Path(tempfile.mkdtemp(prefix="release-ledger-build-", dir="/var/tmp"))
    try:
        repo = make_repo(top, {"a.txt": "a\n"})
        checkout, envs = top / "checkout", top / "envs"
        checkout.mkdir()
        envs.mkdir()
        confine, used = build_sandbox.confinement(
            python=sys.executable, repo=repo, checkout=checkout, envs_dir=envs, hidden=[]
        )
        script = (
            f"import pathlib; pathlib.Path({str(checkout / 'ok')!r}).write_text('x'); "
            f"pathlib.Path({str(envs / 'ok')!r}).write_text('x'); "
            f"print(pathlib.Path({str(repo / 'a.txt')!r}).exists(), "
            f"pathlib.Path({str(Path.home())!r}).exists() and "
            f"sorted(p.name for p in pathlib.Path({str(Path.home())!r}).iterdir())); "
            f"pathlib.Path({str(repo / 'b.txt')!r}).write_text('x')"
        )
        argv = confine([sys.executable, "-c", script], None)
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert used == ["bwrap"]
        seen, home = done.stdout.split(maxsplit=1)
        assert seen == "False", done.stderr  # the working tree is out of sight
        # of the home directory only what builds read back in: interpreters, caches, config
        assert set(ast.literal_eval(home) or []) <= {".cache", ".config", ".pyenv", ".local"}
        assert done.returncode != 0 and "Read-only file system" in done.stderr
        assert (checkout / "ok").exists() and (envs / "ok").exists()
        assert not (repo / "b.txt").exists()
    finally:
        shutil.rmtree(top, ignore_errors=True)
