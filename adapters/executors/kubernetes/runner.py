"""Runs in the pod's runner container (stdlib only, sent as `python -c` after the supervisor
and the environment preparation, see `adapters/executors/programs.py`): one shard attempt.

Usage: python -c PROGRAM SPEC_JSON ARGV...

With `collect` in the spec it runs the invocation's collect-only run instead of a shard (the
local executor's, `invocation_run.py`) and writes the items it read to `items.json`.

The init container has cloned the revision at its exact commit. The runner prepares that
revision's environment in the pod (cache in the shared volume), runs the command under the
shard supervisor — the same peak-memory rule, watchdog and kill as everywhere else — and
writes the JUnit report, a log tail, `environment.json` and a manifest (exit code, sizes,
sha256s) into the shared volume; the manifest is also its termination message. It never exits
non-zero once the manifest is written, so the exit code travels as data, not as a pod failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

try:  # on the gate's machine; in the pod these names come from the program's earlier parts
    from release_ledger.adapters.executors.checkout_guard import changed_tracked, tracked_snapshot
    from release_ledger.adapters.executors.env_variables import shard_env
    from release_ledger.adapters.executors.environment import prepare, with_plugin
    from release_ledger.adapters.executors.invocation_run import (
        COLLECT_PROGRAM,
        FILES_MARK,
        FILES_ROOT_VARIABLE,
        collect_targets,
        collection_failure,
        item_paths,
        site_packages_of,
        start_and_files,
        with_files,
    )
    from release_ledger.adapters.executors.supervisor import ShardProcess, log_tail, run_shard
except ImportError:  # pragma: no cover - only in the pod
    pass

PYTHON_MARK = "@RELEASE_LEDGER_PYTHON@"
DEFAULT_IMAGE = "python:3.11-slim"  # the pods' image; `python:3.12-slim` in a matrix lane


def _oom_kills() -> int:
    """Kernel OOM kills in this container's cgroup (one that hit only the test process still
    reads as an OOM, even when the supervisor's sampling missed the spike)."""
    try:
        with open("/sys/fs/cgroup/memory.events") as events:
            for line in events:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _described(path: str) -> dict[str, object] | None:
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return {"sha256": digest.hexdigest(), "size": os.path.getsize(path)}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    out, src, junit, term = spec["out"], spec["src"], spec["junit"], spec["termination"]
    os.makedirs(out, exist_ok=True)
    log_path = os.path.join(out, "log")
    prepared = prepare(
        src,
        mode=spec["env_mode"],
        python=sys.executable,
        cache=spec["env_cache"],
        commit=spec["commit"],
        command=spec["env_command"],
        extras=spec.get("env_extras", []),
        exclude_newer=spec.get("env_exclude_newer", ""),
        pinned=spec.get("env_pinned", ""),
        pass_env=spec.get("pass_env", []),
        skip_sources=spec.get("env_skip_sources") or None,
    )
    with open(os.path.join(out, "environment.json"), "w") as handle:
        json.dump(prepared, handle, sort_keys=True)
    manifest: dict[str, object] = {
        "v": 1, "exit_code": None, "signal": None, "seconds": 0.0, "rss_mb": 0.0,
        "oom_killed": False, "timed_out": False, "oom": False,
    }  # fmt: skip
    invocation = prepared.get("invocation")
    declared: dict[str, object] = invocation if isinstance(invocation, dict) else {}
    collecting = bool(spec.get("collect"))  # the invocation's collect-only run, not a shard
    targets, why = collect_targets(declared) if collecting else ([], "")
    if prepared["status"] == "ready" and targets is not None:
        python = str(prepared.get("python") or sys.executable)
        if collecting:
            template, files = [PYTHON_MARK, "-c", COLLECT_PROGRAM, FILES_MARK], targets
        else:
            template, files = argv[1:], list(spec.get("files", []))
        # From the invocation's working directory (tox's `changedir`), as `local.in_workdir`.
        site = site_packages_of(python, str(prepared.get("python_version", "")))
        start, files = start_and_files(src, str(declared.get("workdir") or ""), site, files)
        command = [arg.replace(PYTHON_MARK, python) for arg in with_files(template, files)]
        runtime = with_plugin(
            prepared["runtime"],  # type: ignore[arg-type]
            os.path.join(out, "plugin"),
            spec["plugin_module"],
            spec["plugin_source"],
        )
        env = shard_env(dict(os.environ), runtime, pass_env=spec.get("pass_env", []),
                        file_limits=spec.get("file_limits"))  # fmt: skip
        if start != src:  # the plugin names files from the checkout, not from `start`
            env[FILES_ROOT_VARIABLE] = src
        before = tracked_snapshot(src)
        kills_before = _oom_kills()
        process = ShardProcess(
            command, cwd=start, env=env, log_path=log_path, timeout_s=float(spec["timeout_s"]),
            memory_limit_mb=spec["memory_limit_mb"], tag=f"rl-pod-{os.getpid()}",
        )  # fmt: skip
        seen = run_shard(process)
        manifest.update(
            exit_code=seen.exit_code, signal=seen.signal, seconds=seen.seconds,
            rss_mb=round(seen.peak_kb / 1024.0, 1), timed_out=seen.timed_out, oom=seen.oom,
            oom_killed=_oom_kills() > kills_before,
            modified_files=changed_tracked(src, before, spec.get("outputs", [])),
        )  # fmt: skip
        if collecting:  # the items in a file of their own, not in the log tail: they can be long
            with open(log_path, encoding="utf-8", errors="replace") as handle:
                output = handle.read()
            why = collection_failure(seen.exit_code, seen.signal, seen.timed_out, seen.oom, output)
            if not why:
                with open(os.path.join(out, "items.json"), "w", encoding="utf-8") as handle:
                    json.dump(item_paths(output, src), handle)
    else:
        with open(log_path, "wb") as log:
            log.write(str(prepared.get("log_tail", "")).encode("utf-8", "replace"))
    if collecting:
        manifest["collect_error"] = why
        manifest["items"] = _described(os.path.join(out, "items.json"))
    with open(os.path.join(out, "log_tail"), "wb") as handle:
        handle.write(log_tail(log_path, int(spec["tail_bytes"])))
    manifest["report"] = _described(junit)
    manifest["log_tail"] = _described(os.path.join(out, "log_tail"))
    manifest["environment"] = _described(os.path.join(out, "environment.json"))
    text = json.dumps(manifest, sort_keys=True)
    with open(os.path.join(out, "manifest.json.tmp"), "w") as handle:
        handle.write(text)
    os.replace(os.path.join(out, "manifest.json.tmp"), os.path.join(out, "manifest.json"))
    with open(term, "w") as handle:
        handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
