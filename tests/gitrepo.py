"""Real git repositories for tests, isolated from the machine's git configuration.

    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a(): pass\\n"})
    base = tag(repo, "v1")
    head = commit(repo, {"tests/test_a.py": "def test_a(): assert 0\\n"}, "break a")

File contents may be `str` (written as UTF-8) or `bytes`; `None` deletes the file in `commit`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

Files = Mapping[str, "str | bytes | None"]

# Neither the developer's ~/.gitconfig (signing, hooks, templates) nor /etc/gitconfig applies.
_ENV_OVERRIDES = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_TERMINAL_PROMPT": "0",
}
_REPO_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` and return its stripped stdout; fail the test loudly on error."""
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV} | _ENV_OVERRIDES
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def write(repo: Path, files: Files) -> None:
    """Write (or delete, for None) files in the working tree without committing."""
    for name, content in files.items():
        path = repo / name
        if content is None:
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def make_repo(
    tmp_path: Path, files: Files, *, name: str = "repo", message: str = "initial"
) -> Path:
    """A new repository at `tmp_path/name` on branch `main` with `files` committed."""
    repo = tmp_path / name
    repo.mkdir(parents=True)
    git(repo, "-c", "init.defaultBranch=main", "init", "--quiet")
    for key, value in (
        ("user.name", "Release Ledger Tests"),
        ("user.email", "tests@release-ledger.invalid"),
        ("commit.gpgsign", "false"),
        ("tag.gpgsign", "false"),
        ("core.autocrlf", "false"),
    ):
        git(repo, "config", key, value)
    commit(repo, files, message)
    return repo


def commit(repo: Path, files: Files, message: str = "change") -> str:
    """Write `files`, commit every change in the tree, and return the new commit's full SHA."""
    write(repo, files)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--allow-empty", "--no-verify", "-m", message)
    return head(repo)


def tag(repo: Path, name: str, rev: str = "HEAD") -> str:
    """Tag `rev` (lightweight) and return the tagged commit's full SHA."""
    git(repo, "tag", name, rev)
    return git(repo, "rev-parse", f"{name}^{{commit}}")


def head(repo: Path) -> str:
    """The full SHA of HEAD."""
    return git(repo, "rev-parse", "HEAD")
