"""An in-memory `Workspace` (`adapters/workspace.py`): commits as dicts of file contents, so
the gate's process manager is driven without a git repository (with `tests/fake_executor.py`).

Test files are those named `test_*.py` or `*_test.py` (or matching `--discover` globs), blobs
are git's blob hashes of the contents, and a file gone at head whose content is at head
under another name is a rename, as git pairs them.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from release_ledger.adapters.executors.collection import Collected
from release_ledger.adapters.release_info import ReleaseFacts
from release_ledger.domain.errors import BadInput


def _sha(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


class InMemoryWorkspace:
    """`commits`: ref -> {path: content}; each ref resolves to a commit of its own. `tests`:
    the test files where they are not only `test_*.py` (doctest files, say), and `starts`
    pytest's start paths (`testpaths`), as the project's configuration would declare them."""

    def __init__(
        self,
        commits: Mapping[str, Mapping[str, str]],
        repo: str = "/fake/repo",
        tests: Sequence[str] = (),
        starts: Sequence[str] = (".",),
    ) -> None:
        self.repo = Path(repo)
        self.tests, self.starts = set(tests), list(starts)
        self.refs = {ref: _sha(ref) for ref in commits}
        self.trees = {self.refs[ref]: dict(files) for ref, files in commits.items()}
        self.checkouts_released = 0

    def resolve(self, rev: str) -> str:
        if rev in self.refs:
            return self.refs[rev]
        if rev in self.trees:
            return rev
        raise BadInput(f"unknown revision {rev!r}")

    def uncommitted_changes(self) -> int:
        return 0

    def runtime_pin(self, commit: str) -> str | None:
        return None

    def release_facts(self, head: str, base: str, head_ref: str) -> ReleaseFacts:
        return ReleaseFacts()

    def test_files(self, commit: str, patterns: Sequence[str] | None) -> list[str]:
        def wanted(path: str) -> bool:
            name = PurePosixPath(path).name
            if patterns:
                return any(fnmatch.fnmatch(path, p) for p in patterns)
            if path in self.tests:
                return True
            return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))

        return sorted(path for path in self._tree(commit) if wanted(path))

    def collection_starts(self, commit: str) -> list[str]:
        return list(self.starts)

    def nominal_inputs(
        self, commit: str, files: Sequence[str]
    ) -> tuple[dict[str, int], dict[str, int]]:
        tree = self._tree(commit)
        sizes = {f: len(tree[f].encode()) for f in files if f in tree}
        tests = {f: tree[f].count("def test") for f in files if f in tree}
        return sizes, tests

    def files_at(self, commit: str) -> set[str]:
        return set(self._tree(commit))

    def renames(self, base: str, head: str) -> dict[str, str]:
        old, new = self._tree(base), self._tree(head)
        added = {content: path for path, content in new.items() if path not in old}
        return {path: added[content] for path, content in old.items()
                if path not in new and content in added}  # fmt: skip

    def blob_hashes(self, commit: str) -> dict[str, str]:
        return {path: _blob(content) for path, content in self._tree(commit).items()}

    def read_file(self, commit: str, path: str) -> bytes | None:
        content = self._tree(commit).get(path)
        return content.encode() if content is not None else None

    def release_checkouts(self) -> None:
        self.checkouts_released += 1

    def _tree(self, commit: str) -> dict[str, str]:
        return self.trees[self.resolve(commit)]


def _blob(content: str) -> str:
    data = content.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def two_commit_workspace(files: Sequence[str]) -> InMemoryWorkspace:
    """`files` (one passing test each) at `v1`, and a head (`HEAD`) that changes no test."""
    tree = {f: "def test_one():\n    pass\n" for f in files}
    return InMemoryWorkspace({"v1": tree, "HEAD": tree | {"README": "head\n"}})


class GivenCollector:
    """A `Collector` (`adapters/executors/collection.py`) that answers with given files:
    `collected`: ref -> the files its declared invocation collects, in collection order
    (one item each), or file -> its items (a parametrized file's cases); a ref not given
    falls back to the file walk, as an executor that cannot collect does."""

    def __init__(
        self,
        workspace: InMemoryWorkspace,
        collected: Mapping[str, Sequence[str] | Mapping[str, int]],
    ):
        self.by_commit = {
            workspace.resolve(ref): dict(files) if isinstance(files, Mapping)
            else dict.fromkeys(files, 1)
            for ref, files in collected.items()
        }  # fmt: skip
        self.asked: list[str] = []

    def collected(self, commit: str, timeout_s: float, memory_limit_mb: int | None) -> Collected:
        self.asked.append(commit)
        items = self.by_commit.get(commit)
        if items is None:
            return Collected(None, "file walk (fallback: nothing collected for this commit)")
        how = f"collected by pytest: {sum(items.values())} items in {len(items)} files"
        return Collected(list(items), how, items)
