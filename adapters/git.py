"""Git, read-only toward the user: resolve revisions, read commits, and keep clean checkouts.

Checkouts are `git worktree`s in a cache outside the user's working tree, so the user's tree and
index are never touched, and a commit checked out once is reused by later runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import stat
import subprocess
import threading
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar, cast

from release_ledger.domain.errors import BadInput

# Variables that would point git at another repository than the one we name with `-C`
# (they are set when the gate runs inside a git hook).
_REPO_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# Hooks could touch anything (even the user's tree); a checkout for the gate runs none.
_NO_HOOKS = ("-c", "core.hooksPath=/dev/null")
# Every git the gate runs: no hook, no fsmonitor (a program named in configuration, run by
# `status`), and the ownership check left to the gate, which names the repository itself and
# makes every other tree it runs git in.
SAFE_GIT = (
    *_NO_HOOKS, "-c", "core.fsmonitor=false", "-c", "safe.directory=*",
)  # fmt: skip


def git_env() -> dict[str, str]:
    """The environment for a git subprocess: ours, minus what would redirect git elsewhere,
    and no configuration but the repository's own and the gate's (no system or user file)."""
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    return env


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run git in `cwd` (hooks and fsmonitor off: `SAFE_GIT`); raise `GitError` on failure
    when `check`."""
    try:
        done = subprocess.run(
            ["git", *SAFE_GIT, "-C", str(cwd), *args],
            capture_output=True,
            env=git_env(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as error:
        raise BadInput("git is not installed (no 'git' on PATH)") from error
    if check and done.returncode != 0:
        raise GitError(args, done.returncode, done.stderr.decode(errors="replace").strip())
    return done


def isolated_copy(repo: Path, sha: str, dest: Path) -> Path:
    """A private checkout of `sha` for one attempt, borrowing nothing writable from the user's
    repository: its objects copied (no `alternates` into the user's object store, no hard
    link a suite running as the same user could open for writing), no `origin` naming the
    user's repository. Nothing an attempt's tests write reaches the user's repository, any
    other attempt or a later run. (Copying measured 0.08 s for pytest's 60 MB history.)"""
    _git(dest.parent, *_NO_HOOKS, "clone", "--quiet", "--no-hardlinks", "--no-checkout",
         str(repo), str(dest))  # fmt: skip
    _git(dest, "remote", "remove", "origin")
    _git(dest, *_NO_HOOKS, "-c", "advice.detachedHead=false", "checkout", "--quiet",
         "--detach", sha)  # fmt: skip
    return dest


class GitError(RuntimeError):
    """A git command that should have worked did not (not the user's input: a real fault)."""

    def __init__(self, args: tuple[str, ...], code: int, stderr: str) -> None:
        super().__init__(f"git {' '.join(args)} exited {code}: {stderr}")
        self.code = code
        self.stderr = stderr


# Answers the gate's steps ask again and again (a repeat gate of a small suite asked 72 times
# before these were kept, 20 of them whether the repository is one), kept for the process:
# where a folder's repository is (keyed by the folder, its inode and its change time: one
# removed and made again, even on the same inode, is asked again), and what a commit's tree
# holds (a commit never changes). Never a revision name (a branch moves) nor a "no" about a
# folder (it may become a repository).
_KEPT: dict[tuple[object, ...], object] = {}
_KEPT_LOCK = threading.Lock()
_KEPT_MOST = 4096
_KEPT_FILE_BYTES = 256 * 1024
T = TypeVar("T")


def _is_sha(rev: str) -> bool:
    """A commit's full name: what it holds never changes (a branch or tag moves)."""
    return _SHA.match(rev) is not None


def _folder(path: Path) -> tuple[str, int, int, int]:
    try:
        seen = os.stat(path)
    except OSError:
        return str(path), -1, -1, -1
    return str(path), seen.st_dev, seen.st_ino, seen.st_ctime_ns


def _asked_once(
    key: tuple[object, ...], ask: Callable[[], T], keep: Callable[[T], bool] = lambda _: True
) -> T:
    """What `ask` answered before under `key`, else its answer now, kept where `keep` says
    (an ask that raised keeps nothing)."""
    with _KEPT_LOCK:
        if key in _KEPT:
            return cast(T, _KEPT[key])
    answer = ask()
    if keep(answer):
        with _KEPT_LOCK:
            if len(_KEPT) >= _KEPT_MOST:
                _KEPT.clear()
            _KEPT[key] = answer
    return answer


def _require_repo(repo: Path) -> None:
    def ask() -> bool:
        if not repo.is_dir() or _git(repo, "rev-parse", "--git-dir", check=False).returncode:
            raise BadInput(f"not a git repository: {repo}")
        return True

    _asked_once(("repo", *_folder(repo)), ask)


def resolve_commit(repo: Path, rev: str) -> str:
    """The full SHA of `rev^{commit}`; an unknown revision is the user's input to correct."""
    _require_repo(repo)

    def ask() -> str:
        done = _git(
            repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}",
            check=False,
        )  # fmt: skip
        sha = done.stdout.decode().strip()
        if done.returncode != 0 or not _SHA.match(sha) or rev.startswith("-"):
            raise BadInput(f"unknown revision '{rev}' in {repo}")
        return sha

    if not _is_sha(rev):
        return ask()  # a branch or tag moves: asked each time
    return _asked_once(("commit", *_folder(repo), rev), ask)


def committer_date(repo: Path, sha: str) -> str:
    """The commit's committer date in UTC, ISO 8601 (`2024-11-03T09:12:00Z`)."""
    done = _git(repo, "show", "-s", "--format=%ct", sha, check=False)
    try:
        stamp = int(done.stdout.decode().strip())
    except ValueError:
        raise BadInput(f"cannot read the committer date of {sha} in {repo}") from None
    import datetime as dt

    return dt.datetime.fromtimestamp(stamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def repo_root(path: Path) -> Path:
    """The top of the working tree that contains `path`."""
    _require_repo(path)

    def ask() -> Path:
        done = _git(path, "rev-parse", "--show-toplevel", check=False)
        if done.returncode != 0 or not done.stdout.strip():
            raise BadInput(f"not a git repository: {path}")
        return Path(done.stdout.decode().strip()).resolve()

    return _asked_once(("top", *_folder(path)), ask)


def uncommitted_changes(repo: Path) -> int:
    """How many tracked files differ from the commit checked out (staged or not): the gate
    tests commits, so these changes are not what it tests."""
    done = _git(repo, "status", "--porcelain", "--untracked-files=no", check=False)
    if done.returncode != 0:
        return 0
    return len([line for line in done.stdout.splitlines() if line.strip()])


def _common_dir(repo: Path) -> Path:
    def ask() -> Path:
        common = Path(_git(repo, "rev-parse", "--git-common-dir").stdout.decode().strip())
        return (common if common.is_absolute() else repo / common).resolve()

    return _asked_once(("common", *_folder(repo)), ask)


def files_at_commit(repo: Path, sha: str) -> set[str]:
    """Every file path in the commit's tree, as git spells it (POSIX, relative)."""

    def ask() -> frozenset[str]:
        done = _git(repo, "ls-tree", "-r", "-z", "--name-only", "--end-of-options", sha,
                    check=False)  # fmt: skip
        if done.returncode != 0:
            raise BadInput(f"unknown revision '{sha}' in {repo}")
        return frozenset(name.decode() for name in done.stdout.split(b"\0") if name)

    return set(_asked_once(("files", *_folder(repo), sha), ask, lambda _: _is_sha(sha)))


def renames(repo: Path, base: str, head: str) -> dict[str, str]:
    """Files git's rename detection pairs between two commits (old path -> new path): a
    file deleted at one path and added at another with at least half its content alike."""
    done = _git(repo, "diff", "--name-status", "-z", "-M", "--diff-filter=R",
                "--end-of-options", base, head, check=False)  # fmt: skip
    if done.returncode != 0:
        raise BadInput(f"cannot compare {base} and {head} in {repo}")
    fields = [f.decode() for f in done.stdout.split(b"\0") if f]
    found: dict[str, str] = {}
    for index in range(0, len(fields) - 2, 3):  # R<score>, old, new
        if fields[index].startswith("R"):
            found[fields[index + 1]] = fields[index + 2]
    return found


def blob_hashes(repo: Path, sha: str) -> dict[str, str]:
    """Every file of the commit's tree mapped to its git blob hash (one `ls-tree`): the
    content identity measurement and result reuse key on (`domain/content.py`)."""

    def ask() -> dict[str, str]:
        done = _git(repo, "ls-tree", "-r", "-z", "--full-tree", "--end-of-options", sha,
                    check=False)  # fmt: skip
        if done.returncode != 0:
            raise BadInput(f"unknown revision '{sha}' in {repo}")
        found: dict[str, str] = {}
        for entry in done.stdout.split(b"\0"):
            if not entry:
                continue
            meta, _, path = entry.partition(b"\t")
            kind_and_hash = meta.split()
            if len(kind_and_hash) == 3 and kind_and_hash[1] == b"blob":
                found[path.decode()] = kind_and_hash[2].decode()
        return found

    return dict(_asked_once(("blobs", *_folder(repo), sha), ask, lambda _: _is_sha(sha)))


def origin_url(repo: Path) -> str | None:
    """The `origin` remote's URL, or None when there is no origin."""
    done = _git(repo, "config", "--get", "remote.origin.url", check=False)
    url = done.stdout.decode().strip()
    return url if done.returncode == 0 and url else None


def read_file_at_commit(repo: Path, sha: str, path: str) -> bytes | None:
    """The file's bytes at the commit, or None when it does not exist there (or is no file)."""
    spec = f"{sha}:{path.removeprefix('./')}"

    def ask() -> bytes | None:
        if _git(repo, "cat-file", "-e", spec, check=False).returncode != 0:
            return None
        done = _git(repo, "cat-file", "blob", spec, check=False)
        return done.stdout if done.returncode == 0 else None

    def keep(found: bytes | None) -> bool:
        return _is_sha(sha) and (found is None or len(found) <= _KEPT_FILE_BYTES)

    return _asked_once(("file", *_folder(repo), spec), ask, keep)


def is_tag(repo: Path, name: str) -> bool:
    """Whether `name` is a tag of the repository (`refs/tags/NAME`), not a branch or commit."""
    if name.startswith("-"):
        return False
    done = _git(repo, "show-ref", "--verify", "--quiet", f"refs/tags/{name}", check=False)
    return done.returncode == 0


def tags_at(repo: Path, sha: str) -> list[str]:
    """The tags that point at the commit, sorted."""
    done = _git(repo, "tag", "--points-at", sha, check=False)
    if done.returncode != 0:
        return []
    return sorted(t for t in done.stdout.decode(errors="replace").splitlines() if t.strip())


def runtime_pin(repo: Path, sha: str) -> str | None:
    """The Python the commit asks for: `.python-version`, else `[project] requires-python`."""
    pinned = read_file_at_commit(repo, sha, ".python-version")
    if pinned is not None:
        for line in pinned.decode(errors="replace").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                return line
    pyproject = read_file_at_commit(repo, sha, "pyproject.toml")
    if pyproject is None:
        return None
    try:
        document = tomllib.loads(pyproject.decode(errors="replace"))
    except tomllib.TOMLDecodeError:
        return None  # a broken pyproject at some commit is that commit's problem, not the gate's
    project = document.get("project")
    requires = project.get("requires-python") if isinstance(project, dict) else None
    return requires.strip() if isinstance(requires, str) and requires.strip() else None


def default_cache_dir(repo: Path) -> Path:
    """Where a repository's checkouts are cached: outside its working tree, one folder per repo.

    `$LEDGER_WORKTREES_DIR/<repo>-<hash>`, else `${XDG_CACHE_HOME:-~/.cache}/release-ledger/
    worktrees/<repo>-<hash>`. Not under `.git`: pytest looks for its config file (and
    `setup.py`) in every ancestor of the test files, so a checkout nested in the user's tree
    would pick up the user's uncommitted `pyproject.toml` whenever the commit has none. Falls
    back to `<git common dir>/release-ledger/worktrees` when no home cache is writable.
    Folders of repositories that no longer exist are swept when another one is opened.
    """
    common = _common_dir(repo)
    name = common.parent.name if common.name == ".git" else common.name
    key = f"{name or 'repo'}-{hashlib.sha256(str(common).encode()).hexdigest()[:12]}"
    override = os.environ.get("LEDGER_WORKTREES_DIR")
    if override:
        base = Path(override).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        home_cache = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
        base = home_cache / "release-ledger" / "worktrees"
    candidate = base / key
    try:
        candidate.mkdir(parents=True, exist_ok=True)
        marker = candidate / _REPO_MARKER
        if not marker.is_file():
            marker.write_text(str(common))
    except OSError:
        return common / "release-ledger" / "worktrees"
    _sweep_orphans(base)
    return candidate


_REPO_MARKER = ".repository"


def _sweep_orphans(base: Path) -> None:
    """Remove cache folders whose repository is gone (its worktrees died with it)."""
    try:
        folders = [d for d in base.iterdir() if d.is_dir()]
    except OSError:
        return
    for folder in folders:
        try:
            owner = Path((folder / _REPO_MARKER).read_text().strip())
        except OSError:
            continue  # no marker: not ours to judge
        if not owner.is_absolute() or owner.exists():
            continue
        try:
            fd = os.open(folder / ".admin.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass  # someone is working in it
        finally:
            os.close(fd)


def _remove_tree(path: Path, cache_dir: Path) -> None:
    """Remove a folder (or link) of the checkout cache without following anything out of it."""
    if not path.parent.resolve().is_relative_to(cache_dir.resolve()):
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


class WorktreeBusy(RuntimeError):
    """The checkout is in use (by this process) and cannot be removed now."""


@dataclass
class _Lease:
    """One open lock file per checkout per process, shared by every holder in the process.

    flock locks belong to the open file description, so two descriptors in one process would
    contend with each other; holders in one process therefore share one descriptor.
    """

    guard: threading.Lock = field(default_factory=threading.Lock)
    fd: int | None = None
    holders: int = 0


_LEASES: dict[Path, _Lease] = {}
_LEASES_GUARD = threading.Lock()


def _lease_for(lock_path: Path) -> _Lease:
    with _LEASES_GUARD:
        return _LEASES.setdefault(lock_path, _Lease())


class Worktrees:
    """Clean, detached checkouts of exact commits, cached and shared between gate processes.

    `checkout` holds a shared lock on the commit's lock file until `release`/`close` (or the
    process exits), so a checkout is only ever repaired or removed (exclusive lock) while nobody
    runs tests in it.
    """

    def __init__(self, repo: Path, cache_dir: Path | None = None) -> None:
        _require_repo(repo)
        self.repo = repo_root(repo)
        if cache_dir is None:
            cache_dir = default_cache_dir(self.repo)
        self.cache_dir = cache_dir
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.cache_dir = self.cache_dir.resolve()
        self._held: set[str] = set()
        self._held_guard = threading.Lock()

    def path_for(self, sha: str) -> Path:
        return self.cache_dir / sha

    def checkout(self, sha: str) -> Path:
        """A clean detached worktree at exactly `sha`, created or repaired as needed."""
        sha = resolve_commit(self.repo, sha)
        path = self.path_for(sha)
        with self._held_guard:
            if sha in self._held:
                return path
        lease = _lease_for(self._lock_path(sha))
        with lease.guard:
            with self._held_guard:
                if sha in self._held:  # another thread of ours got here first
                    return path
            if lease.fd is None:
                lease.fd = os.open(self._lock_path(sha), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    self._acquire_ready(lease.fd, sha, path)
                except BaseException:
                    os.close(lease.fd)
                    lease.fd = None
                    raise
            lease.holders += 1
        with self._held_guard:
            self._held.add(sha)
        return path

    def release(self, sha: str) -> None:
        """Stop using the checkout (it stays cached for the next run)."""
        with self._held_guard:
            if sha not in self._held:
                return
            self._held.discard(sha)
        lease = _lease_for(self._lock_path(sha))
        with lease.guard:
            lease.holders -= 1
            if lease.holders <= 0 and lease.fd is not None:
                os.close(lease.fd)  # closing drops the flock
                lease.fd = None
                lease.holders = 0

    def close(self) -> None:
        """Release every checkout this object holds."""
        with self._held_guard:
            held = list(self._held)
        for sha in held:
            self.release(sha)

    def remove(self, sha: str, *, wait: bool = True) -> None:
        """Remove the checkout once nobody uses it (`wait=False`: raise `WorktreeBusy` instead)."""
        if not _SHA.match(sha):
            sha = resolve_commit(self.repo, sha)
        self.release(sha)
        lease = _lease_for(self._lock_path(sha))
        with lease.guard:
            if lease.fd is not None:
                raise WorktreeBusy(f"worktree {sha} is in use in this process")
            fd = os.open(self._lock_path(sha), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                except BlockingIOError as error:
                    raise WorktreeBusy(f"worktree {sha} is in use by another process") from error
                self._remove_unlocked(self.path_for(sha))
            finally:
                os.close(fd)

    # -- internals -------------------------------------------------------------------------

    def _lock_path(self, sha: str) -> Path:
        return self.cache_dir / f"{sha}.lock"

    @contextmanager
    def _admin(self) -> Iterator[None]:
        """Serialise `worktree add/remove/prune` (they all edit `.git/worktrees`)."""
        fd = os.open(self.cache_dir / ".admin.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _acquire_ready(self, fd: int, sha: str, path: Path) -> None:
        """Leave `fd` holding a shared lock on a checkout verified clean at `sha`."""
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits while another process repairs it
        if self._is_ready(path, sha):
            return
        # Upgrade: waits until nobody runs tests in it. Not atomic, so check again.
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if not self._is_ready(path, sha):
                self._repair(path, sha)
        finally:
            fcntl.flock(fd, fcntl.LOCK_SH)

    def _ours(self, path: Path) -> bool:
        """Whether `path/.git` is the file `git worktree add` wrote for `path` (read, never
        run git on: a build that rewrote it to a git directory of its own, with a
        `core.fsmonitor` or a filter, would have git run that program with the gate's rights):
        `gitdir: <the repository's>/worktrees/<id>`, whose `gitdir` names `path/.git` back."""
        dot_git = path / ".git"
        try:
            if not stat.S_ISREG(os.lstat(dot_git).st_mode):
                return False
            text = dot_git.read_text(encoding="utf-8")
            if not text.startswith("gitdir: ") or text.count("\n") > 1:
                return False
            named = text[len("gitdir: ") :].strip()
            admin = Path(os.path.normpath(path / named))  # relative paths: to the worktree
            worktrees = _common_dir(self.repo) / "worktrees"
            if admin.is_symlink() or Path(os.path.realpath(admin)).parent != worktrees:
                return False
            back = (admin / "gitdir").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError, GitError):
            return False
        return os.path.realpath(os.path.join(admin, back)) == os.path.realpath(dot_git)

    def _is_ready(self, path: Path, sha: str) -> bool:
        if not self._ours(path):
            return False
        top = _git(path, "rev-parse", "--show-toplevel", check=False)
        if top.returncode != 0 or Path(top.stdout.decode().strip()).resolve() != path.resolve():
            return False
        try:
            if _common_dir(path) != _common_dir(self.repo):
                return False
        except GitError:
            return False
        head = _git(path, "rev-parse", "--verify", "--quiet", "HEAD", check=False)
        if head.stdout.decode().strip() != sha:
            return False
        status = _git(
            path, "--no-optional-locks", "status", "--porcelain", "-z",
            "--ignored=matching", "--untracked-files=all", check=False,
        )  # fmt: skip
        return status.returncode == 0 and status.stdout == b""

    def _repair(self, path: Path, sha: str) -> None:
        if self._ours(path) and self._clean_in_place(path, sha):
            return
        with self._admin():
            if os.path.lexists(path) and not self._ours(path):
                # not the worktree the gate made: removed without running git in it
                _remove_tree(path, self.cache_dir)
            self._remove_unlocked_admin(path)
            # -f twice: a crash mid-add leaves the entry registered and locked.
            _git(self.repo, *_NO_HOOKS, "worktree", "add", "-f", "-f", "--detach", str(path), sha)
        if not self._is_ready(path, sha):
            raise GitError(("worktree", "add", str(path), sha), 0, "checkout is not clean")

    def _clean_in_place(self, path: Path, sha: str) -> bool:
        if not self._ours(path):
            return False
        top = _git(path, "rev-parse", "--show-toplevel", check=False)
        if top.returncode != 0 or Path(top.stdout.decode().strip()).resolve() != path.resolve():
            return False  # never reset a tree that is not our worktree
        reset = _git(path, *_NO_HOOKS, "reset", "--hard", "--quiet", sha, check=False)
        clean = _git(path, "clean", "-ffdxq", check=False)
        return reset.returncode == 0 and clean.returncode == 0 and self._is_ready(path, sha)

    def _remove_unlocked(self, path: Path) -> None:
        with self._admin():
            self._remove_unlocked_admin(path)

    def _remove_unlocked_admin(self, path: Path) -> None:
        if os.path.lexists(path) and not self._ours(path):
            _remove_tree(path, self.cache_dir)
        if path.exists():
            _git(self.repo, "worktree", "remove", "--force", "--force", str(path), check=False)
        if path.exists() and path.resolve().is_relative_to(self.cache_dir):
            shutil.rmtree(path, ignore_errors=True)
        _git(self.repo, "worktree", "prune", check=False)
