"""A head's build cannot poison what other builds install from (issue 38): its `setup.py`
writes a marker into every installers' cache it can find (`UV_CACHE_DIR`, `PIP_CACHE_DIR`,
`uv cache dir`, `~/.cache`, and uv's and pip's shared caches by their paths) and appends it to
every pytest module in them. With uv's hard links a cached file is the same inode as what is
installed from it, so a shared cache a head could write would reach base's environments,
this gate's and every later one's. Head's builds get caches of their own: base's environment,
built afterwards from the shared cache, shows no trace.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from release_ledger.adapters.executors import build_sandbox, sandbox
from release_ledger.adapters.executors.env_installer import find_uv
from tests import gatekit
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

MARK = "poisoned-by-head"
PYPROJECT = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    '[project]\nname = "victim"\nversion = "{version}"\n'
    '[project.optional-dependencies]\ntest = ["pytest"]\n'
)
POISONING_SETUP = '''
import os, subprocess
from setuptools import setup

roots = {{os.environ.get("UV_CACHE_DIR"), os.environ.get("PIP_CACHE_DIR"),
         os.path.expanduser("~/.cache"), *{known!r}}}
try:
    roots.add(subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True,
                             timeout=30).stdout.strip())
except Exception:
    pass
for root in sorted(r for r in roots if r and os.path.isdir(r)):
    try:
        with open(os.path.join(root, {mark!r}), "w") as handle:
            handle.write({mark!r})
    except OSError:
        pass
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".py") and "pytest" in folder:
                try:
                    with open(os.path.join(folder, name), "a") as handle:
                        handle.write("\\n# " + {mark!r} + "\\n")
                except OSError:
                    pass
setup()
'''
TEST = "import victim\n\n\ndef test_it_imports():\n    assert victim.VALUE == 1\n"


def poisoning_repo(where: Path, caches: list[Path]) -> Path:
    """An honest base (tagged `v1`) and a head whose `setup.py` marks every cache it can find,
    `caches` (the shared ones the test knows of) among them."""
    files = {
        "pyproject.toml": PYPROJECT.format(version="1.0"),
        "setup.py": "from setuptools import setup\nsetup()\n",
        "src/victim/__init__.py": "VALUE = 1\n",
        "tests/test_victim.py": TEST,
    }
    repo = make_repo(where, files)
    tag(repo, "v1")
    poisoning = POISONING_SETUP.format(known=[str(c) for c in caches], mark=MARK)
    commit(repo, {"setup.py": poisoning, "pyproject.toml": PYPROJECT.format(version="2.0")})
    return repo


@pytest.fixture
def shared_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    """uv's and pip's shared caches in the test's own folders (the machine's stay clean
    whatever the build does), warmed with pytest as a CI machine's are; a home of the test's."""
    caches = {"UV_CACHE_DIR": tmp_path / "shared-uv", "PIP_CACHE_DIR": tmp_path / "shared-pip"}
    for name, folder in caches.items():
        folder.mkdir()
        monkeypatch.setenv(name, str(folder))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    build_sandbox._asked_tool_cache.cache_clear()  # read again: the caches above
    uv = find_uv(None)
    assert uv is not None
    warm = tmp_path / "warm"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(warm)], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(warm / "bin" / "python"),
                    "pytest", "setuptools>=61"], check=True)  # fmt: skip
    yield caches
    build_sandbox._asked_tool_cache.cache_clear()


def marked(folder: Path) -> list[str]:
    """The files under `folder` that carry the head's marker (by name or in their text)."""
    found = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root, name)
            text = path.read_text("utf-8", "replace") if name.endswith(".py") else ""
            if name == MARK or MARK in text:
                found.append(str(path))
    return found


def base_venv(workdir: Path, run_id: str) -> Path:
    """The folder of the environment base's tests ran in."""
    prepared = [
        e for e in gatekit.events(workdir, run_id)
        if e["kind"] == "EnvironmentPrepared" and e["revision"] == "base"
    ]  # fmt: skip
    assert prepared and prepared[0]["status"] == "ready", prepared
    return Path(prepared[0]["python"]).parent.parent


def test_a_head_build_cannot_poison_the_caches_base_installs_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_caches: dict[str, Path]
) -> None:
    if sandbox.bwrap() is None and sandbox.setting() != sandbox.UID:
        pytest.skip("no sandbox for builds here: a build runs with the gate's own rights")
    repo = poisoning_repo(tmp_path / "r", list(shared_caches.values()))

    # The first gate: head's build poisons what it can while both revisions build.
    monkeypatch.setenv("LEDGER_ENVS_DIR", str(tmp_path / "envs-1"))
    first = gatekit.gate(tmp_path, repo, "--no-release-builds")
    assert first.code == 0, first.stderr or first.document.get("introduced")
    # A later gate (another ledger, environments built afresh): base's environment is
    # installed from the shared caches after head's build had its go at them.
    monkeypatch.setenv("LEDGER_ENVS_DIR", str(tmp_path / "envs-2"))
    later = tmp_path / "later"
    later.mkdir()
    second = gatekit.gate(later, repo, "--no-release-builds")
    assert second.code == 0, second.stderr or second.document.get("introduced")

    for folder in shared_caches.values():
        assert marked(folder) == []
    for workdir, result in ((tmp_path, first), (later, second)):
        venv = base_venv(workdir, result.document["run_id"])
        assert (venv / "bin" / "python").exists()
        assert marked(venv) == []
    # Head's own caches, kept per commit under the environments' cache, took its writes.
    assert marked(tmp_path / "envs-1" / "caches") != []
