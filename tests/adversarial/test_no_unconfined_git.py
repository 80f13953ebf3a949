"""Nothing of the candidate's runs unconfined (issue 38, part 2).

A head's `setup.py` (run while its environment is built) rewrote the cached checkout's
`.git` file to point at a git directory of its own whose configuration names a
`core.fsmonitor` program: the next gate of that commit ran `git status` there with the gate's
rights and its whole environment. Builds now run in a throw-away clone (the cached checkouts
out of their sight), every git the gate runs has hooks and fsmonitor off, and a cached
checkout whose `.git` is not the one the gate made is made again without running git in it.

Run with bubblewrap (the build cannot reach the cached checkout) and with `LEDGER_SANDBOX=none`
(it can, and rewrites it: the gate must still not run the program).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from release_ledger.adapters import git as ledger_git
from release_ledger.adapters.executors import sandbox
from tests import gatekit
from tests.adversarial.test_build_confined import PYPROJECT, secrets_around
from tests.gitrepo import commit, git, make_repo, tag

# Rewrites every cached checkout's `.git` it can reach to a git directory of its own, a copy
# of the user's repository whose configuration runs HOOK on `git status`.
REWRITING_SETUP = '''
import glob, os, shutil
from setuptools import setup

WORKTREES, EVIL, MARKER = {worktrees!r}, {evil!r}, {marker!r}
for dot_git in glob.glob(os.path.join(WORKTREES, "*", "*", ".git")):
    try:
        admin = open(dot_git).read().split("gitdir: ", 1)[1].strip()
        named = open(os.path.join(admin, "commondir")).read().strip()
        common = os.path.realpath(os.path.join(admin, named))
        own = os.path.join(EVIL, os.path.basename(os.path.dirname(dot_git)))
        shutil.copytree(common, own, ignore=shutil.ignore_patterns("worktrees"))
        shutil.copy(os.path.join(admin, "HEAD"), os.path.join(own, "HEAD"))
        shutil.copy(os.path.join(admin, "index"), os.path.join(own, "index"))
        hook = os.path.join(EVIL, "hook.sh")
        with open(hook, "w") as handle:
            handle.write("#!/bin/sh\\necho ran >> %s\\nenv >> %s\\n" % (MARKER, MARKER))
        os.chmod(hook, 0o755)
        with open(os.path.join(own, "config"), "a") as handle:
            handle.write("[core]\\n\\tfsmonitor = %s\\n\\thooksPath = %s\\n" % (hook, EVIL))
        os.chmod(dot_git, 0o644)
        with open(dot_git, "w") as handle:
            handle.write("gitdir: %s\\n" % own)
        with open(os.path.join(EVIL, "rewritten"), "a") as handle:
            handle.write(dot_git + "\\n")
    except OSError:
        pass
setup()
'''


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """Outside /tmp (whose private mount would hide the cached checkouts anyway)."""
    folder = Path(tempfile.mkdtemp(prefix="release-ledger-gitdir-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("confined", ["bwrap", "none"])
def test_a_build_that_rewrites_the_cached_checkouts_git_runs_nothing_of_it(
    outside_tmp: Path, monkeypatch: pytest.MonkeyPatch, confined: str
) -> None:
    if confined == "bwrap" and sandbox.bwrap() is None:
        pytest.skip("bubblewrap cannot run here")
    monkeypatch.setenv("LEDGER_SANDBOX", confined)
    secrets_around(outside_tmp, monkeypatch)
    evil = outside_tmp / "evil"
    evil.mkdir()
    marker = outside_tmp / "hook-ran"
    files = {
        "pyproject.toml": PYPROJECT.format(version="1.0"),
        "setup.py": "from setuptools import setup\nsetup()\n",
        "src/snoop/__init__.py": "",
        "tests/test_a.py": "def test_a():\n    pass\n",
    }
    repo = make_repo(outside_tmp, files)
    tag(repo, "v1")
    commit(repo, {
        "pyproject.toml": PYPROJECT.format(version="2.0"),
        "setup.py": REWRITING_SETUP.format(
            worktrees=str(outside_tmp / "worktrees"), evil=str(evil), marker=str(marker)
        ),
        "tests/test_b.py": "def test_b():\n    assert False\n",  # a real regression
    })  # fmt: skip

    verdicts = []
    for _ in range(2):  # the second gate of the commit finds the cached checkout as left
        result = gatekit.gate(outside_tmp, repo, "--no-release-builds", "--measure", "never")
        assert result.code == 1, (result.stdout, result.stderr)
        verdicts.append((result.document["status"], result.document["introduced"]))

    assert verdicts == [("failed", ["tests/test_b.py::test_b"])] * 2
    assert not marker.exists(), marker.read_text()[:200]
    rewritten = (evil / "rewritten").exists()
    assert rewritten == (confined == "none")  # in bwrap the build never saw the checkouts
    for dot_git in (outside_tmp / "worktrees").glob("*/*/.git"):
        assert dot_git.read_text().startswith(f"gitdir: {repo / '.git' / 'worktrees'}")


def test_a_cached_checkout_whose_git_is_not_the_gates_is_made_again(tmp_path: Path) -> None:
    """Without running git in it: the hook its configuration names never runs."""
    repo = make_repo(tmp_path, {"a.txt": "a\n"})
    sha = git(repo, "rev-parse", "HEAD")
    worktrees = ledger_git.Worktrees(repo, cache_dir=tmp_path / "cache")
    path = worktrees.checkout(sha)
    worktrees.close()
    evil = tmp_path / "evil"
    shutil.copytree(repo / ".git", evil, ignore=shutil.ignore_patterns("worktrees"))
    (evil / "HEAD").write_text(sha + "\n")
    marker = tmp_path / "ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    hook.chmod(0o755)
    with (evil / "config").open("a") as handle:
        handle.write(f"[core]\n\tfsmonitor = {hook}\n\thooksPath = {tmp_path}\n")
    (path / ".git").write_text(f"gitdir: {evil}\n")

    again = ledger_git.Worktrees(repo, cache_dir=tmp_path / "cache")
    try:
        assert again.checkout(sha) == path
    finally:
        again.close()

    assert not marker.exists()
    assert (path / ".git").read_text().startswith(f"gitdir: {repo / '.git' / 'worktrees'}")
    assert (path / "a.txt").read_text() == "a\n"


def test_every_git_the_gate_runs_has_hooks_and_fsmonitor_off_and_no_outside_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile global configuration (an fsmonitor, a hooks path) is not read either."""
    marker = tmp_path / "ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    hook.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\tfsmonitor = {hook}\n\thooksPath = {tmp_path}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    repo = make_repo(tmp_path, {"a.txt": "a\n"})
    (tmp_path / "post-checkout").symlink_to(hook)
    (repo / "a.txt").write_text("changed\n")
    assert ledger_git.uncommitted_changes(repo) == 1  # runs `git status`
    sha = git(repo, "rev-parse", "HEAD")
    ledger_git.isolated_copy(repo, sha, tmp_path / "copy")  # runs `git checkout`
    assert not marker.exists()
    assert os.environ.get("GIT_CONFIG_GLOBAL") is None
