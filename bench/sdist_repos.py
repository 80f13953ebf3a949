"""Two-commit git repositories built from public sdists of real projects (base, then head).

Sdists are downloaded once with pip into `${XDG_CACHE_HOME:-~/.cache}/release-ledger/sdists`
(never into this repository) and unpacked into a repository whose first commit is the base
release, tagged `base`, and whose second is the head release.

    repo = two_release_repo("six", "1.16.0", "1.17.0", workdir)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@release-ledger.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@release-ledger.invalid",
}


def sdist_cache() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(cache) / "release-ledger" / "sdists"


def sdist(name: str, version: str) -> Path:
    """The sdist of `name==version`, downloaded once into the cache."""
    folder = sdist_cache() / f"{name}-{version}"
    found = sorted(folder.glob("*.tar.gz")) + sorted(folder.glob("*.zip"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "-d", str(folder), f"{name}=={version}"],
        check=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    found = sorted(folder.glob("*.tar.gz")) + sorted(folder.glob("*.zip"))
    if not found:
        raise RuntimeError(f"no sdist downloaded for {name}=={version}")
    return found[0]


def _unpack(archive: Path, into: Path) -> None:
    """The sdist's top folder's content into `into` (replacing what was there)."""
    for child in into.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    scratch = into.parent / f".unpack-{archive.stem}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as handle:
            handle.extractall(scratch)
    else:
        with tarfile.open(archive) as handle:
            handle.extractall(scratch, filter="data")
    (top,) = list(scratch.iterdir())
    for child in top.iterdir():
        shutil.move(str(child), into / child.name)
    shutil.rmtree(scratch)


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
        env=dict(os.environ, **GIT_ENV),
    )  # fmt: skip
    return done.stdout.strip()


def two_release_repo(name: str, base: str, head: str, workdir: Path) -> Path:
    """A repository at `workdir/NAME`: base release (tagged `base`), then head release."""
    repo = workdir / name
    if (repo / ".git").exists():
        return repo
    repo.mkdir(parents=True)
    _git(repo, "-c", "init.defaultBranch=main", "init", "-q")
    for version, message in ((base, f"{name} {base}"), (head, f"{name} {head}")):
        _unpack(sdist(name, version), repo)
        _git(repo, "add", "-A", "-f")
        _git(repo, "commit", "-q", "--no-verify", "-m", message)
        if version == base:
            _git(repo, "tag", "base")
    return repo
