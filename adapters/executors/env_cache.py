"""The cache of built environments: entries keyed by the hash of their inputs, made under a
lock, published when complete, and pruned least recently used past a size. Stdlib-only, like
`environment.py` (sent with it)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil

DEFAULT_MAX_BYTES = 8 * 1024**3


def _key(parts: dict[str, object]) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@contextlib.contextmanager
def _locked(cache: str, name: str):  # type: ignore[no-untyped-def]
    """One builder per cache entry across processes; others wait, then reuse its result."""
    os.makedirs(os.path.join(cache, "locks"), exist_ok=True)
    with open(os.path.join(cache, "locks", name), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ready(entry: str) -> dict[str, object] | None:
    try:
        with open(os.path.join(entry, "ready.json"), encoding="utf-8") as handle:
            found: dict[str, object] = json.load(handle)
    except (OSError, ValueError):
        return None
    with contextlib.suppress(OSError):
        os.utime(os.path.join(entry, "ready.json"))  # least recently *used*
    return found


def _publish(staging: str, entry: str, meta: dict[str, object]) -> None:
    """Make a built entry ready: `ready.json` written whole (renamed into place), then the
    staging folder renamed to `entry`, unless it was built `in_place`."""
    meta["bytes"] = _size(staging)
    stamp = os.path.join(staging, "ready.json")
    with open(stamp + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(meta, handle, sort_keys=True)
    os.replace(stamp + ".tmp", stamp)
    if os.path.abspath(staging) != os.path.abspath(entry):
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(staging, entry)


def record_failed_before(
    entry: str, key: str, cache: str, failures: list[dict[str, object]]
) -> None:
    """Keep in a ready entry's `ready.json` the sources before it that failed again now, so
    the next gate reuses it without trying them (an entry built before this was recorded)."""
    with _locked(cache, key):
        found = _ready(entry)
        if found is None or found.get("failed_before") == failures:
            return
        found["failed_before"] = failures
        stamp = os.path.join(entry, "ready.json")
        with contextlib.suppress(OSError):
            with open(stamp + ".tmp", "w", encoding="utf-8") as handle:
                json.dump(found, handle, sort_keys=True)
            os.replace(stamp + ".tmp", stamp)


def stamp(folder: str) -> None:
    """Mark a folder of the cache used now, with its size (`ready.json`): a candidate's own
    installers' caches (`caches/<commit>`) are pruned with the entries."""
    meta = {"bytes": _size(folder)}
    with contextlib.suppress(OSError):
        with open(os.path.join(folder, "ready.json.tmp"), "w", encoding="utf-8") as handle:
            json.dump(meta, handle)
        os.replace(os.path.join(folder, "ready.json.tmp"), os.path.join(folder, "ready.json"))


def own_caches(envs_dir: str, commit: str) -> dict[str, str]:
    """uv's and pip's caches for the builds of one candidate commit (`UV_CACHE_DIR`,
    `PIP_CACHE_DIR`), made if missing: under the environments' cache, kept per commit so a
    gate of the same head again reuses what its first build downloaded; never read by a
    build of another commit, so nothing a head's build writes there reaches what others
    install. On the gate's machine and on SSH build hosts alike (sent with this module)."""
    root = os.path.join(envs_dir, "caches", commit or "unnamed")
    found = {"UV_CACHE_DIR": os.path.join(root, "uv"), "PIP_CACHE_DIR": os.path.join(root, "pip")}
    for folder in found.values():
        os.makedirs(folder, exist_ok=True)
    stamp(root)  # used now: the last to be pruned (`prune`)
    return found


def prune(cache: str, max_bytes: int, keep: tuple[str, ...] = ()) -> list[str]:
    """Remove least recently used entries until the cache holds at most `max_bytes`."""
    entries = []
    for kind in ("envs", "projects", "caches"):
        folder = os.path.join(cache, kind)
        with contextlib.suppress(OSError):
            for name in os.listdir(folder):
                path = os.path.join(folder, name)
                stamp = os.path.join(path, "ready.json")
                with contextlib.suppress(OSError, ValueError):
                    with open(stamp, encoding="utf-8") as handle:
                        size = int(json.load(handle).get("bytes", 0))
                    entries.append((os.path.getmtime(stamp), path, size))
    total = sum(size for _, _, size in entries)
    removed = []
    for _, path, size in sorted(entries):
        if total <= max_bytes:
            break
        if path in keep:
            continue
        shutil.rmtree(path, ignore_errors=True)
        total -= size
        removed.append(path)
    return removed
