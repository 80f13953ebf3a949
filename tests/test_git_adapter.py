"""The git adapter against real repositories built in tmp_path."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from release_ledger.adapters.git import (
    WorktreeBusy,
    Worktrees,
    files_at_commit,
    origin_url,
    read_file_at_commit,
    repo_root,
    resolve_commit,
    runtime_pin,
)
from release_ledger.domain.errors import BadInput
from tests.gitrepo import commit, git, head, make_repo, tag, write

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"README.md": "hello\n", "pkg/tests/test_a.py": "x = 1\n"})


def test_resolve_commit_gives_the_full_sha_of_tags_branches_and_short_shas(repo: Path) -> None:
    sha = head(repo)
    tag(repo, "v1.0.0")
    assert resolve_commit(repo, "HEAD") == sha
    assert resolve_commit(repo, "v1.0.0") == sha
    assert resolve_commit(repo, "main") == sha
    assert resolve_commit(repo, sha[:8]) == sha
    assert len(sha) == 40


def test_an_annotated_tag_resolves_to_its_commit(repo: Path) -> None:
    git(repo, "tag", "-a", "v2", "-m", "release two")
    assert resolve_commit(repo, "v2") == head(repo)


@pytest.mark.parametrize("rev", ["nope", "v9.9.9", "-all", "HEAD~5", "0" * 40])
def test_an_unknown_revision_is_bad_input(repo: Path, rev: str) -> None:
    with pytest.raises(BadInput, match=re.escape(f"unknown revision '{rev}' in {repo}")):
        resolve_commit(repo, rev)


def test_a_directory_that_is_no_repository_is_bad_input(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(BadInput, match="not a git repository: "):
        resolve_commit(plain, "HEAD")
    with pytest.raises(BadInput, match="not a git repository: "):
        resolve_commit(tmp_path / "missing", "HEAD")


def test_repo_root_is_the_top_of_the_tree_from_a_subdirectory(repo: Path) -> None:
    assert repo_root(repo / "pkg" / "tests") == repo.resolve()


def test_files_at_commit_lists_the_tree_of_that_commit_not_the_working_tree(repo: Path) -> None:
    first = head(repo)
    second = commit(repo, {"pkg/tests/test_b.py": "y = 2\n", "README.md": None}, "more")
    write(repo, {"untracked.py": "z = 3\n"})
    assert files_at_commit(repo, first) == {"README.md", "pkg/tests/test_a.py"}
    assert files_at_commit(repo, second) == {"pkg/tests/test_a.py", "pkg/tests/test_b.py"}


def test_read_file_at_commit_returns_bytes_or_none(repo: Path) -> None:
    sha = head(repo)
    assert read_file_at_commit(repo, sha, "README.md") == b"hello\n"
    assert read_file_at_commit(repo, sha, "missing.txt") is None
    assert read_file_at_commit(repo, sha, "pkg") is None  # a tree is no file


def test_origin_url_is_none_without_a_remote(repo: Path) -> None:
    assert origin_url(repo) is None
    git(repo, "remote", "add", "origin", "https://example.invalid/x.git")
    assert origin_url(repo) == "https://example.invalid/x.git"


def test_runtime_pin_prefers_python_version_over_requires_python(repo: Path) -> None:
    none = head(repo)
    project = commit(repo, {"pyproject.toml": '[project]\nrequires-python = ">=3.11"\n'}, "pyp")
    pinned = commit(repo, {".python-version": "# pyenv\n3.12.1\n"}, "pin")
    broken = commit(repo, {".python-version": None, "pyproject.toml": "[project\n"}, "broken")
    assert runtime_pin(repo, none) is None
    assert runtime_pin(repo, project) == ">=3.11"
    assert runtime_pin(repo, pinned) == "3.12.1"
    assert runtime_pin(repo, broken) is None


def test_checkout_is_a_clean_detached_worktree_of_exactly_that_commit(
    repo: Path, tmp_path: Path
) -> None:
    first = head(repo)
    commit(repo, {"README.md": "changed\n"}, "second")
    trees = Worktrees(repo, tmp_path / "cache")
    path = trees.checkout(first)
    assert (path / "README.md").read_text() == "hello\n"
    assert git(path, "rev-parse", "HEAD") == first
    assert git(path, "status", "--porcelain", "--ignored") == ""
    with pytest.raises(AssertionError):
        git(path, "symbolic-ref", "-q", "HEAD")  # detached: HEAD names no branch
    trees.close()


def test_default_cache_is_per_repository_and_outside_its_working_tree(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEDGER_WORKTREES_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    other = make_repo(tmp_path, {"x.txt": "x"}, name="other")
    trees = Worktrees(repo)
    path = trees.checkout("HEAD")
    assert path.is_relative_to(tmp_path / "xdg" / "release-ledger" / "worktrees")
    assert not path.is_relative_to(repo)
    assert Worktrees(other).cache_dir != trees.cache_dir
    assert git(repo, "status", "--porcelain") == ""
    monkeypatch.setenv("LEDGER_WORKTREES_DIR", str(tmp_path / "elsewhere"))
    assert Worktrees(repo).cache_dir.is_relative_to(tmp_path / "elsewhere")
    trees.close()


def test_cached_checkouts_of_deleted_repositories_are_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGER_WORKTREES_DIR", str(tmp_path / "cache"))
    gone = make_repo(tmp_path, {"a.txt": "a"}, name="gone")
    stale = Worktrees(gone)
    stale.checkout("HEAD")
    stale.close()
    shutil.rmtree(gone)
    kept = make_repo(tmp_path, {"b.txt": "b"}, name="kept")
    fresh = Worktrees(kept)
    assert fresh.cache_dir.exists()
    assert not stale.cache_dir.exists()


def test_checkout_of_an_unknown_revision_is_bad_input(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="unknown revision"):
        Worktrees(repo, tmp_path / "cache").checkout("f" * 40)


def test_a_checkout_is_reused_across_runs_at_the_same_commit(repo: Path, tmp_path: Path) -> None:
    first = Worktrees(repo, tmp_path / "cache")
    path = first.checkout("HEAD")
    marker = path.stat().st_ino
    first.close()
    again = Worktrees(repo, tmp_path / "cache").checkout("HEAD")
    assert again == path
    assert again.stat().st_ino == marker  # same directory, not recreated


def test_a_dirty_cached_checkout_is_cleaned_before_reuse(repo: Path, tmp_path: Path) -> None:
    trees = Worktrees(repo, tmp_path / "cache")
    path = trees.checkout("HEAD")
    trees.close()
    write(path, {"README.md": "tampered\n", "junk.txt": "x", "__pycache__/a.pyc": b"\0"})
    path = Worktrees(repo, tmp_path / "cache").checkout("HEAD")
    assert (path / "README.md").read_text() == "hello\n"
    assert not (path / "junk.txt").exists()
    assert not (path / "__pycache__").exists()


def test_a_broken_cached_checkout_is_recreated(repo: Path, tmp_path: Path) -> None:
    trees = Worktrees(repo, tmp_path / "cache")
    path = trees.checkout("HEAD")
    trees.close()
    (path / ".git").unlink()  # no longer a worktree at all
    path = Worktrees(repo, tmp_path / "cache").checkout("HEAD")
    assert git(path, "rev-parse", "HEAD") == head(repo)


def test_the_users_working_tree_and_index_are_never_touched(repo: Path, tmp_path: Path) -> None:
    first = head(repo)
    second = commit(repo, {"pkg/tests/test_a.py": "x = 2\n"}, "second")
    write(repo, {"README.md": "my local edit\n", "scratch.txt": "notes"})
    git(repo, "add", "scratch.txt")
    status_before = git(repo, "status", "--porcelain")
    trees = Worktrees(repo, tmp_path / "cache")
    for sha in (first, second):
        trees.checkout(sha)
    trees.close()
    trees.remove(first)
    assert (repo / "README.md").read_text() == "my local edit\n"
    assert git(repo, "status", "--porcelain") == status_before
    assert head(repo) == second
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"


def test_remove_deletes_the_worktree_and_its_registration(repo: Path, tmp_path: Path) -> None:
    trees = Worktrees(repo, tmp_path / "cache")
    path = trees.checkout("HEAD")
    trees.remove(head(repo))
    assert not path.exists()
    assert str(path) not in git(repo, "worktree", "list", "--porcelain")


def test_remove_refuses_while_the_checkout_is_in_use_in_this_process(
    repo: Path, tmp_path: Path
) -> None:
    user = Worktrees(repo, tmp_path / "cache")
    user.checkout("HEAD")
    with pytest.raises(WorktreeBusy):
        Worktrees(repo, tmp_path / "cache").remove(head(repo))
    user.close()


def test_two_threads_checking_out_one_commit_get_one_clean_worktree(
    repo: Path, tmp_path: Path
) -> None:
    results: list[Path] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(Worktrees(repo, tmp_path / "cache").checkout("HEAD"))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(set(results)) == 1
    assert git(results[0], "rev-parse", "HEAD") == head(repo)


def test_threads_sharing_one_worktrees_object_hold_one_lease_released_by_close(
    repo: Path, tmp_path: Path
) -> None:
    trees = Worktrees(repo, tmp_path / "cache")
    threads = [threading.Thread(target=trees.checkout, args=("HEAD",)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    trees.close()
    Worktrees(repo, tmp_path / "cache").remove(head(repo), wait=False)  # nobody holds it


_CHECKOUT_SCRIPT = """
import sys
from pathlib import Path
from release_ledger.adapters.git import Worktrees
path = Worktrees(Path(sys.argv[1]), Path(sys.argv[2])).checkout(sys.argv[3])
print(path)
"""


def test_two_processes_checking_out_one_commit_get_one_clean_worktree(
    repo: Path, tmp_path: Path
) -> None:
    sha = head(repo)
    args = [sys.executable, "-c", _CHECKOUT_SCRIPT, str(repo), str(tmp_path / "cache"), sha]
    procs = [
        subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1
    path = Path(paths.pop())
    assert git(path, "rev-parse", "HEAD") == sha
    assert git(path, "status", "--porcelain", "--ignored") == ""
    assert len(git(repo, "worktree", "list", "--porcelain").split("worktree ")) == 3


_HOLD_SCRIPT = """
import sys
from pathlib import Path
from release_ledger.adapters.git import Worktrees
path = Worktrees(Path(sys.argv[1]), Path(sys.argv[2])).checkout(sys.argv[3])
(path / "written-by-a-running-test.txt").write_text("busy")
print(path, flush=True)
sys.stdin.read()  # hold the checkout until the parent closes our stdin
"""


def _holder(repo: Path, cache: Path, sha: str) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_SCRIPT, str(repo), str(cache), sha],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_dirty_checkout_in_use_by_another_process_is_cleaned_only_after_it_is_released(
    repo: Path, tmp_path: Path
) -> None:
    sha = head(repo)
    proc, path = _holder(repo, tmp_path / "cache", sha)
    got: list[Path] = []
    waiter = threading.Thread(
        target=lambda: got.append(Worktrees(repo, tmp_path / "cache").checkout(sha))
    )
    waiter.start()
    waiter.join(timeout=1.0)
    assert waiter.is_alive()  # waits rather than cleaning under a running test
    assert (path / "written-by-a-running-test.txt").exists()
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)
    waiter.join(timeout=30)
    assert got == [path]
    assert not (path / "written-by-a-running-test.txt").exists()


def test_remove_without_waiting_refuses_a_checkout_in_use_by_another_process(
    repo: Path, tmp_path: Path
) -> None:
    sha = head(repo)
    proc, path = _holder(repo, tmp_path / "cache", sha)
    try:
        with pytest.raises(WorktreeBusy):
            Worktrees(repo, tmp_path / "cache").remove(sha, wait=False)
        assert path.exists()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
    Worktrees(repo, tmp_path / "cache").remove(sha, wait=False)
    assert not path.exists()


# --- answers kept for the process -----------------------------------------------------------------


def _counting_git(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every git command the adapter runs from now on (it still runs them)."""
    import release_ledger.adapters.git as adapter

    asked: list[tuple[str, ...]] = []
    real = adapter._git

    def counted(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        asked.append(args)
        return real(cwd, *args, check=check)

    monkeypatch.setattr(adapter, "_git", counted)
    return asked


def test_what_a_commit_holds_and_where_a_repository_is_are_asked_once(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = resolve_commit(repo, "HEAD")
    asked = _counting_git(monkeypatch)
    for _ in range(3):
        assert resolve_commit(repo, sha) == sha
        assert repo_root(repo) == repo.resolve()
        assert "README.md" in files_at_commit(repo, sha)
        assert read_file_at_commit(repo, sha, "no-such-file") is None
    kinds = [" ".join(args[:2]) for args in asked]
    assert len(kinds) == len(set(kinds)), kinds  # each question once, none again


def test_a_branch_is_resolved_again_each_time_it_is_asked(repo: Path) -> None:
    before = resolve_commit(repo, "HEAD")
    after = commit(repo, {"later.txt": "x\n"}, "later")
    assert after != before and resolve_commit(repo, "HEAD") == after


def test_a_kept_answer_is_the_callers_to_change_not_the_next_callers(repo: Path) -> None:
    sha = resolve_commit(repo, "HEAD")
    files_at_commit(repo, sha).clear()
    assert files_at_commit(repo, sha)


def test_a_repository_removed_is_no_repository_even_after_it_was_asked(tmp_path: Path) -> None:
    made = make_repo(tmp_path, {"README.md": "x\n"}, name="gone")
    assert repo_root(made) == made.resolve()
    shutil.rmtree(made)
    made.mkdir()
    with pytest.raises(BadInput, match="not a git repository"):
        repo_root(made)
