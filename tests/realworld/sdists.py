"""Real projects as two-commit git repositories built from their public sdists.

    repo = release_pair(tmp_path, "toolz", "0.12.1", "1.0.0")   # tags v0.12.1, then v1.0.0
    mutate(repo, "toolz/itertoolz.py", "old line", "new line")  # a one-line bug at head

Sdists are fetched with `pip download --no-deps --no-binary :all: NAME==VERSION` into a cache
outside the repository (`${XDG_CACHE_HOME:-~/.cache}/release-ledger/sdists`, or
`LEDGER_SDIST_CACHE`), once; they are never vendored into the repository. When an sdist can be
neither found in the cache nor downloaded, the test is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import defusedxml.ElementTree as ET
import pytest

from tests.gitrepo import commit, git, make_repo, tag


def cache_dir() -> Path:
    explicit = os.environ.get("LEDGER_SDIST_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "release-ledger" / "sdists"


def _normalized(name: str) -> str:
    return name.replace("-", "_").replace(".", "_").lower()


def _cached(name: str, version: str) -> Path | None:
    folder = cache_dir()
    if not folder.is_dir():
        return None
    for path in folder.glob("*.tar.gz"):
        project, _, release = path.name.removesuffix(".tar.gz").rpartition("-")
        if _normalized(project) == _normalized(name) and release == version:
            return path
    return None


def sdist(name: str, version: str) -> Path:
    """The cached sdist of NAME==VERSION, downloaded once (the test skips when it cannot be)."""
    found = _cached(name, version)
    if found is not None:
        return found
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--disable-pip-version-check", "-q", "-d", str(folder), f"{name}=={version}"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    found = _cached(name, version)
    if done.returncode != 0 or found is None:
        pytest.skip(f"the sdist of {name}=={version} is not available: {done.stderr[-300:]}")
    return found


def _unpack(archive: Path, into: Path) -> None:
    """The sdist's contents (without its top folder) as the whole working tree of `into`."""
    for child in into.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    with tempfile.TemporaryDirectory() as scratch, tarfile.open(archive) as tar:
        tar.extractall(scratch, filter="data")
        [top] = Path(scratch).iterdir()
        for child in top.iterdir():
            shutil.move(str(child), into / child.name)


def release_pair(workdir: Path, name: str, base: str, head: str) -> Path:
    """A repository holding the `base` release (tag `vBASE`), then the `head` release (tag
    `vHEAD`, checked out), over an empty root commit."""
    repo = make_repo(workdir, {}, name=name, message="empty root")
    for version in (base, head):
        _unpack(sdist(name, version), repo)
        commit(repo, {}, f"{name} {version}")
        tag(repo, f"v{version}")
    return repo


def mutate(repo: Path, path: str, old: str, new: str) -> str:
    """Commit a one-line change at head (`old` must occur exactly once); returns the commit."""
    text = (repo / path).read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path}"
    return commit(repo, {path: text.replace(old, new)}, f"mutation in {path}")


def project_python(workdir: Path, repo: Path, *requirements: str) -> str:
    """A virtual environment of the project's own (its checkout installed in editable mode with
    `requirements`, e.g. `.[testing]`, `pytest`; `.` is the checkout), made with uv: the
    interpreter plain pytest runs on for the ground truth. Skips the test without uv.

    Resolved as PyPI stood at head's commit, as the gate resolves by default
    (`--resolve-as-of head`): otherwise the two run different releases of pytest, whose
    parametrize ids differ (pytest 9.0.2 escapes a multi-line string into the id, 9.2.0
    names it `expected_dump2`), and the ground truth names other tests than the gate."""
    from release_ledger.adapters.executors.env_installer import find_uv

    uv = find_uv()
    if uv is None:
        pytest.skip("uv is needed to build the project's own environment")
    venv = workdir / "plain-venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    wanted = [f"{repo}{r[1:]}" if r.startswith(".") else r for r in requirements]
    as_of = git(repo, "log", "-1", "--format=%cI", "HEAD")
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", python, "--exclude-newer", as_of,
         "-e", wanted[0], *wanted[1:]],
        check=True, timeout=1800,
    )  # fmt: skip
    return python


def plain_pytest_failures(repo: Path, *args: str, python: str = sys.executable) -> set[str]:
    """The ids plain pytest (no gate plugin) reports failing or erroring in the checkout, read
    from pytest's own JUnit report (`FILE::CLASS::NAME`): the ground truth for a mutation.
    `python` is the interpreter (default: this one); its `bin` folder goes first on PATH, as
    in an activated environment."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
    if python != sys.executable:  # the project's own environment: nothing of the gate's
        env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
             "junit_family=xunit1", f"--junitxml={junit}", *args],
            cwd=repo, capture_output=True, timeout=1800, check=False, env=env,
        )  # fmt: skip
        root = ET.parse(junit).getroot()
    failing = set()
    for case in root.iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        module = case.get("classname", "").split(".")
        file = case.get("file", "")
        stem = file.removesuffix(".py").split("/")
        rest = module[len(stem) :] if module[: len(stem)] == stem else module[-1:]
        failing.add("::".join([file, *rest, case.get("name", "")]))
    return failing
