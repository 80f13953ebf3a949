"""Environment builds are the project's code too: a build backend (`setup.py`, an in-tree
backend), tox's loader (`toxfile.py`) and a setup command run what the revision wrote. On this
machine each build step runs in bubblewrap, as shards do, where it can:

- the file system read-only, the home directory, the user's repository, the ledger's folder and
  the gate's scratch hidden, so a build cannot read the ledger's key or the user's credentials,
  nor write to the ledger or another revision's checkout;
- shown again read-only: the interpreters (the build's and the gate's, whose environment holds
  uv and tox) and uv's and pip's configuration; nothing of the user's repository, its `.git`
  included (its `config` is where CI keeps a token);
- writable: the revision's checkout (a throw-away clone with its own `.git`: the gate runs no
  git in it after the build), the folder being built in the environments' cache (a
  venv, a wheel; the rest of that cache, other revisions' environments among it, is
  read-only) and uv's and pip's caches; a private `/tmp`;
- the network as the gate has it (installs download).

Where bwrap cannot run, the step runs as before and the environment says so in its warnings.
The release builds (`adapters/distributions.py`: head's sdist and wheel, the upgrade from
base's wheel) run the same way. Not confined: builds on SSH hosts and in pods (a pod is its
own machine), and a build can still write into uv's and pip's caches, which later builds
install from.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from release_ledger.adapters.executors import sandbox
from release_ledger.adapters.executors.env_installer import find_tool, find_uv

UNCONFINED_WARNING = (
    "the environment build ran unconfined (bubblewrap is not available here, or "
    "LEDGER_SANDBOX=none): the project's build code could read what the gate's user can"
)


@functools.cache
def _tool_cache(tool: str) -> str | None:
    """Where uv (`uv cache dir`) or pip (`pip cache dir`) keeps its cache, or None."""
    argv = [sys.executable, "-m", "pip", "cache", "dir"]
    if tool == "uv":
        uv = find_uv(None)
        if uv is None:
            return None
        argv = [uv, "cache", "dir"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = done.stdout.decode(errors="replace").strip().splitlines()
    return found[-1] if done.returncode == 0 and found else None


def confinement(
    *, python: str, repo: Path | None, checkout: Path, envs_dir: Path, hidden: list[str]
) -> tuple[Callable[[list[str], str | None, list[str]], list[str]], list[str]]:
    """A `confine` for `environment.prepare` and the sandboxes it used (one per step). `repo`
    (the user's repository, hidden whole: `.git` and its `config`, where CI keeps a token,
    included) is None for a step with no checkout of it (the release upgrade installs
    wheels). `checkout` is a throw-away clone with a `.git` of its own (`setuptools-scm` asks
    git for the version there), never a tree the gate runs git in afterwards."""
    home = Path.home()
    caches = [c for c in (_tool_cache("uv"), _tool_cache("pip")) if c]
    for cache in caches:
        os.makedirs(cache, exist_ok=True)  # a bind needs its folder; the tool makes it anyway
    tools = [t for t in (find_uv(None), find_tool("tox")) if t]
    readable = [
        *sandbox.prefixes(python),
        *sandbox.prefixes(sys.executable),
        *(os.path.dirname(os.path.realpath(t)) for t in tools),
        *(str(home / c) for c in (".config/uv", ".config/pip", ".pip", ".pydistutils.cfg")),
        str(envs_dir),  # the environments built: read, never written, by another's build
    ]
    writable = [str(checkout), *caches]
    used: list[str] = []

    def confine(argv: list[str], cwd: str | None, building: list[str]) -> list[str]:
        wrapped, how = sandbox.wrap(
            argv, cwd=cwd or str(checkout), writable=[*writable, *building], readable=readable,
            hidden=[*([str(repo)] if repo else []), *hidden], path=os.environ.get("PATH"),
            by_uid=False,
        )  # fmt: skip
        used.append(how)
        return wrapped

    return confine, used
