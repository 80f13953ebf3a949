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
  read-only) and the installers' caches: uv's and pip's shared ones for a build of the
  release already approved (base), and for the candidate's (head, or any commit not named
  trusted) caches of its own (`own_caches`: `UV_CACHE_DIR` and `PIP_CACHE_DIR` in a folder
  of the environments' cache kept for that commit), never the shared ones. With uv's hard
  links a cached file is the very inode installed in every venv made from it: a head that
  could write the shared cache could rewrite base's installed pytest. Its environments are
  keyed apart too (`environment.prepare(own_caches=True)`), so no build of base reuses one;
  a private `/tmp`;
- the network as the gate has it (installs download).

Where bwrap cannot run and the gate runs as root (`LEDGER_SANDBOX=uid`, or `auto` without
bwrap) each step runs as the build's own user (`sandbox.as_build_user`: a fresh uid drawn
once per build, no groups): for the step it is given the checkout, the folder being built and
the build's caches (its own, base's build too: it cannot write the gate's user's), with a
private home (copies of the installers' configuration) and temporary folder; after the step
every process of that user is killed and what it wrote is given back to the gate's user,
with no set-id and no group or other write bit, so later builds and shards (other users) read
it and cannot write it. What only the gate's user may read (a private home, the ledger's key,
a 0600 file, another revision's checkout in the gate's 0700 scratch) is out of its reach; the
user's repository and the ledger are not writable to it. A build whose interpreter, tools or
environments' cache another user cannot use stops a gate told `uid` (`Unavailable`); under
`auto` its steps run as before. Where neither applies (not root, or `LEDGER_SANDBOX=none`),
the step runs as before and the environment says so in its warnings.
The release builds (`adapters/distributions.py`: head's sdist and wheel, the upgrade from
base's wheel) run the same way; builds on SSH hosts by the same rule, in bwrap only
(`host_build.py`). Not confined: builds in pods (a pod is its own machine, its caches thrown
away with it).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from release_ledger.adapters.executors import env_cache, sandbox
from release_ledger.adapters.executors.env_installer import find_tool, find_uv

# The installers' configuration a build reads from the home directory (shown read-only in
# bwrap; copied into the private home of a build's own user under `sandbox: uid`).
USER_CONFIGS = (".config/uv/uv.toml", ".config/pip/pip.conf", ".pip/pip.conf", ".pydistutils.cfg")
# What `used` records for a step that only asked and was not run (see `confinement`).
NOT_RUN = "not-run"
UNCONFINED_WARNING = (
    "the environment build ran unconfined (bubblewrap is not available here and no separate "
    "user could run it, or LEDGER_SANDBOX=none): the project's build code could read what "
    "the gate's user can"
)


_ASKING = threading.Lock()


def _tool_cache(tool: str) -> str | None:
    """Where uv (`uv cache dir`) or pip (`pip cache dir`) keeps its cache, or None: asked
    once per process, also when both revisions' builds start at once (pip takes a quarter
    second of CPU to answer)."""
    with _ASKING:
        return _asked_tool_cache(tool)


@functools.cache
def _asked_tool_cache(tool: str) -> str | None:
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


def own_caches(envs_dir: Path | str, commit: str) -> dict[str, str]:
    """uv's and pip's caches for the builds of one candidate commit (`UV_CACHE_DIR`,
    `PIP_CACHE_DIR`), made if missing: under the environments' cache, kept per commit so a
    gate of the same head again reuses what its first build downloaded; never read by a
    build of another commit, so nothing a head's build writes there reaches what others
    install (`env_cache.own_caches`, which SSH build hosts use too)."""
    return env_cache.own_caches(str(envs_dir), commit)


def confinement(
    *, python: str, repo: Path | None, checkout: Path, envs_dir: Path, hidden: list[str],
    caches: dict[str, str] | None = None, asking: bool = False,
) -> tuple[Callable[[list[str], str | None, list[str]], list[str]], list[str]]:  # fmt: skip
    """A `confine` for `environment.prepare` and the sandboxes it used (one per step). `repo`
    (the user's repository, hidden whole: `.git` and its `config`, where CI keeps a token,
    included) is None for a step with no checkout of it (the release upgrade installs
    wheels). `checkout` is a throw-away clone with a `.git` of its own (`setuptools-scm` asks
    git for the version there), never a tree the gate runs git in afterwards. `caches`
    (`own_caches`: the candidate's build, whose environment the caller gives those variables)
    are writable instead of uv's and pip's shared caches. `asking`: the steps build nothing,
    they only ask (`--env none`: whether the interpreter given has pytest-cov); under `sandbox:
    uid` one that no other user can run is not run (it cannot answer: `NOT_RUN`) instead of
    stopping a gate told `uid`."""
    home = Path.home()
    if caches is None:
        caches = {t: c for t in ("uv", "pip") if (c := _tool_cache(t))}
    for cache in caches.values():
        os.makedirs(cache, exist_ok=True)  # a bind needs its folder; the tool makes it anyway
    tools = [t for t in (find_uv(None), find_tool("tox")) if t]
    readable = [
        *sandbox.prefixes(python),
        *sandbox.prefixes(sys.executable),
        *(os.path.dirname(os.path.realpath(t)) for t in tools),
        *(str(home / c) for c in (".config/uv", ".config/pip", ".pip", ".pydistutils.cfg")),
        str(envs_dir),  # the environments built: read, never written, by another's build
    ]
    writable = [str(checkout), *caches.values()]
    used: list[str] = []
    by_user = sandbox.uid_applies()
    # `sandbox: uid`: the build's own user reads the installers' configuration from copies
    # in its private home, and needs the build's interpreter and the environments' cache.
    configs = [(rel, str(home / rel)) for rel in USER_CONFIGS if (home / rel).is_file()]
    needed = [*sandbox.prefixes(python), str(envs_dir)]
    owner: list[tuple[int, int]] = []  # drawn at the build's first step, kept for the rest

    def confine(argv: list[str], cwd: str | None, building: list[str]) -> list[str]:
        if not by_user:
            wrapped, how = sandbox.wrap(
                argv, cwd=cwd or str(checkout), writable=[*writable, *building],
                readable=readable, hidden=[*([str(repo)] if repo else []), *hidden],
                path=os.environ.get("PATH"), by_uid=False,
            )  # fmt: skip
        elif not owner and not _draw(owner):
            if sandbox.setting() == sandbox.UID:
                raise sandbox.Unavailable(f"{sandbox.SETTING}=uid: no uid left for a build")
            wrapped, how = list(argv), sandbox.NONE
        else:
            try:
                wrapped, how = sandbox.as_build_user(
                    argv, cwd=cwd or str(checkout), writable=[*writable, *building],
                    needed=needed, owner=owner[0], path=os.environ.get("PATH"),
                    configs=configs,
                )  # fmt: skip
            except sandbox.Unavailable:
                if not asking:
                    raise
                wrapped, how = [sys.executable, "-I", "-S", "-c", "raise SystemExit(126)"], NOT_RUN
            if asking and how == sandbox.NONE:  # `auto`: not run as root either
                wrapped, how = [sys.executable, "-I", "-S", "-c", "raise SystemExit(126)"], NOT_RUN
        used.append(how)
        return wrapped

    return confine, used


def _draw(owner: list[tuple[int, int]]) -> bool:
    """A fresh user for the build into `owner`; False when none can be had."""
    drawn = sandbox.shard_user()
    if drawn is not None:
        owner.append(drawn)
    return drawn is not None


def own_caches_needed(trusted: bool) -> bool:
    """Whether a build gets installers' caches of its own: the candidate's always; under
    `sandbox: uid` every build, base's too (its user cannot write the gate's user's)."""
    return not trusted or sandbox.uid_applies()
