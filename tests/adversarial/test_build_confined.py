"""Environment builds are the project's code too: a head whose `setup.py` looks for the gate's
secrets while its wheel is built (the gate's tokens in the environment, a file in the home
directory, the ledger's key) and tries to plant a file in the user's repository finds none of
them, because each build step runs with the build environment's allow-list and in bubblewrap.

What the build found is built into the package; head's test fails if anything was found, so a
leak is an introduced failure and the verdict `failed`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from release_ledger.adapters.executors import build_sandbox, environment, sandbox
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


def secrets_around(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The gate's tokens in its environment and a `~/.netrc` in a home of the test's own
    (uv's real cache kept: the downloads already made); returns that home."""
    real_cache = build_sandbox._tool_cache("uv")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine example.org password {SECRET}\n")
    monkeypatch.setenv("HOME", str(home))
    if real_cache:
        monkeypatch.setenv("UV_CACHE_DIR", real_cache)
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    return home


def test_a_build_finds_no_secret_and_writes_nothing_outside_its_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap cannot run here: builds run unconfined")
    home = secrets_around(tmp_path, monkeypatch)
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


PROBE = """
import json, os, pathlib, sys
paths = json.loads(sys.argv[1])

def writes(path):
    try:
        pathlib.Path(path).write_text("x")
        return True
    except OSError:
        return False

print(json.dumps({
    "repo_seen": os.path.exists(paths["repo_file"]),
    "home": sorted(os.listdir(paths["home"])) if os.path.isdir(paths["home"]) else None,
    "ready_read": pathlib.Path(paths["ready"]).read_text(),
    "ready_written": writes(paths["ready"]),
    "repo_written": writes(paths["repo_new"]),
    "checkout_written": writes(paths["checkout_new"]),
    "building_written": writes(paths["building_new"]),
}))
"""


def test_a_confined_step_writes_only_its_checkout_and_what_it_builds() -> None:
    """Outside /tmp (whose private mount would hide anything under it anyway): the user's
    repository and the home directory are covered, another revision's environment is
    read-only, the checkout and the folder being built are writable."""
    if sandbox.bwrap() is None:
        pytest.skip("bubblewrap cannot run here")
    top = Path(tempfile.mkdtemp(prefix="release-ledger-build-", dir="/var/tmp"))
    try:
        repo = make_repo(top, {"a.txt": "a\n"})
        checkout, envs = top / "checkout", top / "envs"
        building = envs / ".build-1"
        checkout.mkdir()
        building.mkdir(parents=True)
        (envs / "ready").write_text("base's environment")
        confine, used = build_sandbox.confinement(
            python=sys.executable, repo=repo, checkout=checkout, envs_dir=envs, hidden=[]
        )
        paths = {
            "repo_file": str(repo / "a.txt"), "home": str(Path.home()),
            "ready": str(envs / "ready"), "repo_new": str(repo / "b.txt"),
            "checkout_new": str(checkout / "ok"), "building_new": str(building / "ok"),
        }  # fmt: skip
        argv = confine([sys.executable, "-c", PROBE, json.dumps(paths)], None, [str(building)])
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert used == ["bwrap"], done.stderr
        seen = json.loads(done.stdout)
        assert seen["repo_seen"] is False  # the working tree is out of sight
        # of the home directory only what builds read back in: interpreters, caches, config
        assert set(seen["home"] or []) <= {".cache", ".config", ".pyenv", ".local"}
        assert seen["ready_read"] == "base's environment" and seen["ready_written"] is False
        assert seen["repo_written"] is False and not (repo / "b.txt").exists()
        assert seen["checkout_written"] and seen["building_written"]
        assert (envs / "ready").read_text() == "base's environment"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_head_release_build_finds_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release build (`uv build` of head's sdist and wheel, for the approval report) runs
    head's build backend too: with the same allow-list, and in bwrap where it can."""
    from release_ledger.adapters import distributions

    home = secrets_around(tmp_path, monkeypatch)
    snooping = SNOOPING_SETUP.format(
        secret=SECRET, paths={"netrc": str(home / ".netrc")}, planted=str(tmp_path / "planted")
    )
    repo = make_repo(tmp_path, {
        "pyproject.toml": PYPROJECT.format(version="2.0"), "setup.py": snooping,
        "src/snoop/__init__.py": INIT, ".gitignore": "src/snoop/_found.py\n",
    })  # fmt: skip
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    built = distributions.build(repo, head, "head", str(tmp_path / "cache"), check_readme=False)
    assert built.fields["status"] == "built", built.fields
    assert built.wheel is not None
    with zipfile.ZipFile(built.wheel) as wheel:
        found = wheel.read("snoop/_found.py").decode()
    assert found == "FOUND = {'env': []}\n"
