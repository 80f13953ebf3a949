"""Runs on the build host (stdlib only, sent as `python -c` after the supervisor and the
environment preparation, see `adapters/executors/programs.py`): one shard, framed back.

Usage: python -c PROGRAM TMPDIR SPEC_JSON MIRROR ARGV...

The revision's checkout is `TMPDIR/w`. Its environment is prepared first (cached on the host
beside the mirror, in `release-ledger-envs/`; built as `host_build.py` says), then the command
runs under the shard supervisor exactly as on the gate's machine, with stdout and stderr in
`TMPDIR/log`. End-of-file on our
stdin means the ssh connection is gone: the session is killed and nobody waits for a reader
that no longer exists. The answer is one header line (`release-ledger-frame {json}`) followed
by the report bytes and the log-tail bytes, whose sizes and sha256 the header carries.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading

try:  # on the gate's machine; on the host these names come from the program's earlier parts
    from release_ledger.adapters.executors.checkout_guard import changed_tracked, tracked_snapshot
    from release_ledger.adapters.executors.env_variables import shard_env
    from release_ledger.adapters.executors.environment import prepare, with_plugin
    from release_ledger.adapters.executors.host_build import host_build_settings, note_unconfined
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
    from release_ledger.adapters.executors.sandbox import (
        credentials,
        exit_status,
        harness_levels,
        prefixes,
        shard_environment,
        wrap,
    )
    from release_ledger.adapters.executors.supervisor import ShardProcess, log_tail, run_shard
except ImportError:  # pragma: no cover - only on the build host
    pass

MARK = "@RELEASE_LEDGER_TMP@"
PYTHON_MARK = "@RELEASE_LEDGER_PYTHON@"
FRAME = b"release-ledger-frame "
ENVS_FOLDER = "release-ledger-envs"


class _Link:
    """The ssh connection: gone once our stdin reaches end-of-file."""

    def __init__(self) -> None:
        self.dropped = False
        self.process: ShardProcess | None = None
        self.lock = threading.Lock()

    def attach(self, process: ShardProcess) -> None:
        """The running shard: killed at once if the connection is (or was already) gone."""
        with self.lock:
            self.process = process
            if self.dropped:
                process.kill()

    def watch(self) -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        with self.lock:
            self.dropped = True
            if self.process is not None:
                self.process.kill()


def _frame(header: dict[str, object], report: bytes | None, tail: bytes) -> None:
    header = dict(header)
    header.update(
        report_size=-1 if report is None else len(report),
        report_sha256=hashlib.sha256(report or b"").hexdigest(),
        log_size=len(tail),
        log_sha256=hashlib.sha256(tail).hexdigest(),
    )
    out = sys.stdout.buffer
    out.write(FRAME + json.dumps(header, sort_keys=True).encode() + b"\n")
    out.write(report or b"")
    out.write(tail)
    out.flush()


def main(argv: list[str]) -> int:
    tmp, spec, mirror = argv[0], json.loads(argv[1]), argv[2]
    checkout = os.path.join(tmp, "w")
    link = _Link()
    threading.Thread(target=link.watch, daemon=True).start()
    envs = os.path.join(os.path.dirname(mirror.rstrip("/")), ENVS_FOLDER)
    # Only a commit the gate trusts (base) builds with the host's shared installers' caches;
    # every build runs confined, with the mirror and the other shards' folders out of sight.
    building, used = host_build_settings(
        python=sys.executable, checkout=checkout, envs_dir=envs, commit=spec["commit"],
        hidden=[os.path.dirname(mirror.rstrip("/")), os.path.dirname(tmp.rstrip("/"))],
        trusted=bool(spec.get("trusted")),
    )  # fmt: skip
    prepared = prepare(
        checkout,
        mode=spec["env_mode"],
        python=sys.executable,
        cache=envs,
        commit=spec["commit"],
        command=spec["env_command"],
        extras=spec.get("env_extras", []),
        exclude_newer=spec.get("env_exclude_newer", ""),
        pinned=spec.get("env_pinned", ""),
        pass_env=spec.get("pass_env", []),
        skip_sources=spec.get("env_skip_sources") or None,
        **building,  # type: ignore[arg-type]
    )
    note_unconfined(prepared, used)
    if link.dropped:
        return 3
    header: dict[str, object] = {
        "exit_code": None, "signal": None, "timed_out": False, "oom": False, "rss_kb": 0,
        "seconds": 0.0, "environment": prepared,
    }  # fmt: skip
    if prepared["status"] != "ready":
        _frame(header, None, str(prepared.get("log_tail", "")).encode("utf-8", "replace"))
        return 0
    python = str(prepared.get("python") or sys.executable)
    invocation = prepared.get("invocation")
    declared: dict[str, object] = invocation if isinstance(invocation, dict) else {}
    collecting = bool(spec.get("collect"))
    if collecting:  # the invocation's collect-only run, as the local executor's `collect`
        targets, why = collect_targets(declared)
        if targets is None:
            header["collect_error"] = why
            _frame(header, None, b"")
            return 0
        template, files = [PYTHON_MARK, "-c", COLLECT_PROGRAM, FILES_MARK], targets
    else:
        template, files = argv[3:], list(spec.get("files", []))
    # From the invocation's working directory (tox's `changedir`), as `local.in_workdir`.
    site = site_packages_of(python, str(prepared.get("python_version", "")))
    start, files = start_and_files(checkout, str(declared.get("workdir") or ""), site, files)
    command = [a.replace(MARK, tmp).replace(PYTHON_MARK, python)
               for a in with_files(template, files)]  # fmt: skip
    runtime = with_plugin(
        prepared["runtime"],  # type: ignore[arg-type]
        os.path.join(tmp, "plugin"),
        spec["plugin_module"],
        spec["plugin_source"],
    )
    # A home and temporary folder of the shard's own, inside its folder (given to the shard's
    # user with it); of the host's environment only the allow-list and `pass_env`.
    home, scratch = os.path.join(tmp, "home"), os.path.join(tmp, "tmp")
    for folder in (home, scratch):
        os.makedirs(folder, exist_ok=True)
    env = shard_env(dict(os.environ), runtime, pass_env=spec.get("pass_env", []),
                    home=home, tmp=scratch, file_limits=spec.get("file_limits"))  # fmt: skip
    if start != checkout:  # the plugin names files from the checkout, not from `start`
        env[FILES_ROOT_VARIABLE] = checkout
    before = tracked_snapshot(checkout)  # before the suite runs, and before any sandbox user
    # Sandboxed on the host as on the gate's machine: only this shard's folder writable, the
    # mirror, the other shards' folders and the home directory out of sight.
    readable = [*prefixes(python), *env.get("VIRTUAL_ENV", "").split(os.pathsep)]
    hidden = [os.path.dirname(mirror.rstrip("/")), os.path.dirname(tmp.rstrip("/"))]
    needed = [*env.get("VIRTUAL_ENV", "").split(os.pathsep),
              *env.get("PYTHONPATH", "").split(os.pathsep)]  # fmt: skip
    command, confined = wrap(command, cwd=start, writable=[tmp], readable=readable,
                             hidden=hidden, path=env.get("PATH"), needed=needed)  # fmt: skip
    env = shard_environment(env, confined)
    log_path = os.path.join(tmp, "log")
    process = ShardProcess(
        command,
        cwd=start,
        env=env,
        log_path=log_path,
        timeout_s=float(spec["timeout_s"]),
        memory_limit_mb=spec["memory_limit_mb"],
        tag=f"rl-ssh-{os.getpid()}",  # what leaves the session is found and killed too
        harness_levels=harness_levels(confined),
        user=credentials(confined, tmp),
    )
    seen = run_shard(process, link.attach)
    exit_code, died_of = exit_status(seen.exit_code, seen.signal, confined)
    header.update(
        exit_code=exit_code, signal=died_of, timed_out=seen.timed_out,
        oom=seen.oom, rss_kb=seen.peak_kb, seconds=seen.seconds, sandbox=confined,
        modified_files=changed_tracked(checkout, before, spec.get("outputs", [])),
    )  # fmt: skip
    if link.dropped:
        return 3
    if collecting:  # the items in the frame's body, not in the log tail: they can be long
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            output = handle.read()
        failure = collection_failure(exit_code, died_of, seen.timed_out, seen.oom, output)
        header["collect_error"] = failure
        items = None if failure else json.dumps(item_paths(output, checkout)).encode()
        _frame(header, items, log_tail(log_path, int(spec["tail_bytes"])))
        return 0
    try:
        with open(os.path.join(tmp, "junit.xml"), "rb") as handle:
            report: bytes | None = handle.read()
    except OSError:
        report = None
    _frame(header, report, log_tail(log_path, int(spec["tail_bytes"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
