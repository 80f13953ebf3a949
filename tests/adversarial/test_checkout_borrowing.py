"""Attempt checkouts borrow nothing writable (issue 26, parts 3 and 4).

A hostile suite, run unconfined (the worst case: the gate's own user, as on a machine with no
sandbox), attacks the user's repository through what its checkout holds: the `alternates`
file a `--shared` clone writes, object files a hard-linked clone shares (chmod-ed writable and
overwritten), the `origin` remote; and plants a `core.fsmonitor` hook in its checkout's
`.git/config`, which a `git status` run by the gate afterwards would execute with the gate's
rights. The user's repository must come out byte for byte the same, and the hook must never run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests import gatekit
from tests.gitrepo import commit, git, make_repo, tag

ATTACKER = '''
import os
import stat
import subprocess
from pathlib import Path

MARKER = {marker!r}


def test_attacks_through_the_checkout():
    git_dir = Path(".git")
    alternates = git_dir / "objects" / "info" / "alternates"
    if alternates.exists():
        for line in alternates.read_text().split():
            Path(line, "pwned").write_text("x")
    for root, _, names in os.walk(git_dir / "objects"):
        for name in names:
            path = Path(root, name)
            os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
            path.write_bytes(b"corrupted")
    remotes = subprocess.run(["git", "remote", "-v"], capture_output=True, text=True).stdout
    for line in remotes.splitlines():
        url = line.split()[1]
        Path(url, "pwned").write_text("x")
    hook = Path(os.environ.get("TMPDIR", "/tmp"), "hook.sh")
    hook.write_text(f"#!/bin/sh\\ntouch {{MARKER}}\\n")
    hook.chmod(0o755)
    subprocess.run(["git", "config", "core.fsmonitor", str(hook)], check=True)
'''


def _object_digests(repo: Path) -> dict[str, str]:
    objects = repo / ".git" / "objects"
    return {
        str(p.relative_to(objects)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(objects.rglob("*"))
        if p.is_file()
    }


@pytest.mark.usefixtures("unsandboxed")
def test_a_suite_cannot_reach_the_users_repository_through_its_checkout(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    marker = tmp_path / "fsmonitor-ran"
    commit(repo, {"tests/test_attack.py": ATTACKER.format(marker=str(marker))})
    git(repo, "gc", "--quiet")  # packed, as most repositories are: one pack to attack
    before = _object_digests(repo)

    result = gatekit.gate(tmp_path, repo, "--env", "none", "--no-release-builds")

    assert result.code == 0, result.document.get("unmeasured") or result.stderr
    assert result.document["status"] == "passed"  # its own .git is not a tracked file
    assert _object_digests(repo) == before
    assert not list(repo.rglob("pwned"))
    git(repo, "fsck", "--strict")
    assert not marker.exists(), "the gate ran a hook the suite planted in its checkout"
