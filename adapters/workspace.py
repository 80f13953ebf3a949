"""The repository as the gate sees it: the `Workspace` port and its git adapter.

Everything the gate's start and its steps ask of the user's repository (resolving the
revisions, finding the test files at a commit, the files and blobs of a tree, renames, the
release's own facts) goes through this port, so the process manager can be driven without a
git repository (`tests/fake_workspace.py` is the in-memory one its unit tests use).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from release_ledger.adapters import git
from release_ledger.adapters.discovery import (
    collection_starts,
    discover_test_files,
    nominal_inputs,
)
from release_ledger.adapters.release_info import ReleaseFacts, inspect_release


class Workspace(Protocol):
    """A repository's commits, read-only. Test files are found statically (pytest's own
    collection rules); a checkout made for that is given back by `release_checkouts`."""

    @property
    def repo(self) -> Path: ...

    def resolve(self, rev: str) -> str: ...

    def uncommitted_changes(self) -> int: ...

    def runtime_pin(self, commit: str) -> str | None: ...

    def release_facts(self, head: str, base: str, head_ref: str) -> ReleaseFacts: ...

    def test_files(self, commit: str, patterns: Sequence[str] | None) -> list[str]: ...

    def collection_starts(self, commit: str) -> list[str]: ...

    def nominal_inputs(
        self, commit: str, files: Sequence[str]
    ) -> tuple[dict[str, int], dict[str, int]]: ...

    def files_at(self, commit: str) -> set[str]: ...

    def renames(self, base: str, head: str) -> dict[str, str]: ...

    def blob_hashes(self, commit: str) -> dict[str, str]: ...

    def read_file(self, commit: str, path: str) -> bytes | None: ...

    def release_checkouts(self) -> None: ...


class GitWorkspace:
    """The port over a git repository; checkouts are the gate's cached worktrees."""

    def __init__(self, path: Path) -> None:
        self.repo = git.repo_root(path)
        self._worktrees: git.Worktrees | None = None

    def resolve(self, rev: str) -> str:
        return git.resolve_commit(self.repo, rev)

    def uncommitted_changes(self) -> int:
        return git.uncommitted_changes(self.repo)

    def runtime_pin(self, commit: str) -> str | None:
        return git.runtime_pin(self.repo, commit)

    def release_facts(self, head: str, base: str, head_ref: str) -> ReleaseFacts:
        return inspect_release(self.repo, head, base, head_ref)

    def checkout(self, commit: str) -> Path:
        """A clean checkout of `commit`, kept until `release_checkouts`."""
        if self._worktrees is None:
            self._worktrees = git.Worktrees(self.repo)
        return self._worktrees.checkout(commit)

    def test_files(self, commit: str, patterns: Sequence[str] | None) -> list[str]:
        return discover_test_files(self.checkout(commit), patterns)

    def collection_starts(self, commit: str) -> list[str]:
        """pytest's start paths at `commit`, in its configuration's order (`testpaths`)."""
        return collection_starts(self.checkout(commit))

    def nominal_inputs(
        self, commit: str, files: Sequence[str]
    ) -> tuple[dict[str, int], dict[str, int]]:
        return nominal_inputs(self.checkout(commit), files)

    def files_at(self, commit: str) -> set[str]:
        return git.files_at_commit(self.repo, commit)

    def renames(self, base: str, head: str) -> dict[str, str]:
        return git.renames(self.repo, base, head)

    def blob_hashes(self, commit: str) -> dict[str, str]:
        return git.blob_hashes(self.repo, commit)

    def read_file(self, commit: str, path: str) -> bytes | None:
        return git.read_file_at_commit(self.repo, commit, path)

    def release_checkouts(self) -> None:
        if self._worktrees is not None:
            self._worktrees.close()
            self._worktrees = None
