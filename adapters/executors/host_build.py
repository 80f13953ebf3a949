"""Environment builds on an SSH build host, under the rule the gate's own machine keeps
(`build_sandbox`): stdlib only, sent to the host with the environment preparation
(`programs.REMOTE_PARTS`). The host keeps environments for every gate that uses it, and uv's
and pip's caches that all its builds install from; with uv's hard links a cached file is the
very inode installed in the venvs made from it. So:

- only a commit the gate trusts (base: `EnvironmentRequest.trusted_commits`) builds with the
  host's shared caches; any other commit's build gets caches of its own under the host's
  environments' cache (`env_cache.own_caches`) and its environments are keyed apart;
- each build step runs in bubblewrap where the host has it: the file system read-only, the
  home (and with it the mirror and the environments' cache, shown again read-only) hidden,
  writable only the checkout, the folder being built and that build's caches; a private
  `/tmp`. Where bwrap cannot run there, the step runs as before and the environment says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

try:  # on the gate's machine; on the host these names come from the program's earlier parts
    from release_ledger.adapters.executors.env_cache import own_caches
    from release_ledger.adapters.executors.env_installer import find_tool, find_uv
    from release_ledger.adapters.executors.sandbox import NONE, prefixes, wrap
except ImportError:  # pragma: no cover - only on the build host
    pass

HOST_UNCONFINED_WARNING = (
    "the environment build ran unconfined on the build host (bubblewrap is not available "
    "there, or LEDGER_SANDBOX=none): the project's build code could reach what the host's "
    "user can, the host's shared installers' caches among it"
)
_CONFIGS = (".config/uv", ".config/pip", ".pip", ".pydistutils.cfg")


def host_shared_caches(python: str) -> dict[str, str]:
    """Where the host's uv and pip keep their shared caches (`uv cache dir`, `pip cache
    dir`), by the variable that names each: what a trusted build may write."""
    found: dict[str, str] = {}
    uv = find_uv(None)
    asks = [("PIP_CACHE_DIR", [python, "-m", "pip", "cache", "dir"])]
    if uv is not None:
        asks.insert(0, ("UV_CACHE_DIR", [uv, "cache", "dir"]))
    for name, argv in asks:
        try:
            done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        lines = done.stdout.decode(errors="replace").strip().splitlines()
        if done.returncode == 0 and lines:
            found[name] = lines[-1]
    return found


def host_build_confinement(
    *, python: str, checkout: str, envs_dir: str, hidden: list[str], own: dict[str, str] | None
) -> tuple[Callable[[list[str], str | None, list[str]], list[str]], list[str]]:
    """A `confine` for `environment.prepare` on the host and the sandboxes it used (one per
    step): writable the checkout, what each step builds and the build's caches (`own`, or for
    a trusted build the host's shared ones, asked of uv and pip at the first step that builds:
    pip takes a second to answer, and a shard whose environment is cached builds nothing);
    `hidden` (the mirror's folder, the other shards' folders) out of sight, the environments
    built shown read-only."""
    home = os.path.expanduser("~")
    tools = [t for t in (find_uv(None), find_tool("tox")) if t]
    readable = [
        *prefixes(python),
        *prefixes(sys.executable),
        *(os.path.dirname(os.path.realpath(t)) for t in tools),
        *(os.path.join(home, c) for c in _CONFIGS),
        envs_dir,  # read, never written, by another's build
    ]
    caches: list[str] = [] if own is None else list(own.values())
    asked: list[bool] = [own is not None]
    used: list[str] = []

    def confine(argv: list[str], cwd: str | None, building: list[str]) -> list[str]:
        if building and not asked[0]:
            asked[0] = True
            caches.extend(host_shared_caches(python).values())
        for cache in caches:
            os.makedirs(cache, exist_ok=True)  # a bind needs its folder; the tool makes it too
        wrapped, how = wrap(
            argv, cwd=cwd or checkout, writable=[checkout, *caches, *building],
            readable=readable, hidden=hidden, path=os.environ.get("PATH"), by_uid=False,
        )  # fmt: skip
        used.append(how)
        return wrapped

    return confine, used


def host_build_settings(
    *, python: str, checkout: str, envs_dir: str, hidden: list[str], commit: str, trusted: bool
) -> tuple[dict[str, object], list[str]]:
    """`environment.prepare`'s arguments for one host build (`base_env`, `confine`,
    `own_caches`) and the list of sandboxes its steps used: a trusted commit with the host's
    shared caches, any other with caches of its own, keyed apart."""
    own = None if trusted else own_caches(envs_dir, commit)
    confine, used = host_build_confinement(
        python=python, checkout=checkout, envs_dir=envs_dir, hidden=hidden, own=own
    )
    settings: dict[str, object] = {
        "base_env": {**os.environ, **(own or {})}, "confine": confine,
        "own_caches": own is not None,
    }  # fmt: skip
    return settings, used


def note_unconfined(prepared: dict[str, object], used: list[str]) -> None:
    """Say on the environment where a step of its build ran without a sandbox."""
    if NONE in used:
        warnings = prepared.setdefault("warnings", [])
        if isinstance(warnings, list) and HOST_UNCONFINED_WARNING not in warnings:
            warnings.append(HOST_UNCONFINED_WARNING)
