"""A resident pytest worker: one process that runs shard after shard, so a shard pays no
interpreter, pytest or plugin start, and no import of what its revision installed.

Self-contained like the plugin beside it (the standard library and pytest only): the local
executor starts it as `PYTHON -m release_ledger_worker` inside the revision's sandbox, in a
checkout of its own, and supervises it as it supervises a shard process (time and memory
limits per shard, the whole session killed on overrun; `adapters/executors/resident.py`).

Each line on stdin is one shard, as JSON: `args` (pytest's arguments: the gate's plugin, the
declared options, `--junitxml`, the files; with `program`, a program of the gate's run as
`python -c PROGRAM ARGS` would run it: the collection), `log` (the shard's log: fds 1 and 2
are pointed there for the shard), `env` (variables set for the shard only; `null` unsets one) and
`scratch` (folders emptied after the shard: its home and temporary folder). The answer is
one line on the worker's original stdout: `{"exit_code": N, "peak_kb": K, "reset": B}`.

Between shards the worker keeps what it imported from outside `root` (pytest, plugins, the
installed project and its dependencies) and forgets what it imported from inside it (test
modules, conftests, a project run from its checkout): a shard sees its own files fresh, and
module state of installed code is shared across shards as in one plain pytest run. A shard
that ends the process (`os._exit`, a crash, a file past its time limit) ends the worker: the
executor observes the death as it would a shard process's, and starts another.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import stat
import sys
import warnings
from typing import Any

LIMITS_VARIABLE = "RELEASE_LEDGER_FILE_LIMITS"  # as in release_ledger_pytest


def _peak_reset() -> bool:
    """Reset this process's VmHWM (Linux's clear_refs 5), so its peak is the shard's own."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_kb() -> int:
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _inside(path: object, root: str) -> bool:
    if not isinstance(path, str):
        return False
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)


def _forget_modules(before: set[str], root: str) -> None:
    """Drop the modules a shard imported from inside `root` (its tests, conftests, a project
    run from the checkout): the next shard imports its own files afresh."""
    for name in [n for n in list(sys.modules) if n not in before]:
        module = sys.modules.get(name)
        if module is None or _inside(getattr(module, "__file__", None), root):
            sys.modules.pop(name, None)


def _release_rewriters() -> None:
    """Let go of the config of each ended session's assertion rewriter. pytest rewrites the
    asserts of installed plugins, and a plugin module imported during a shard keeps its
    rewriter as its loader; the rewriter holds the shard's config, and through it the whole
    session: every test module and what it kept (60 MB a shard, measured, for the worker's
    life). The module keeps its loader (pytest asks for one of that type, or warns that the
    module cannot be rewritten) and the loader what reading the module's files needs."""
    from _pytest.assertion.rewrite import AssertionRewritingHook

    active = {id(finder) for finder in sys.meta_path}
    for module in list(sys.modules.values()):
        for loader in (
            getattr(module, "__loader__", None),
            getattr(getattr(module, "__spec__", None), "loader", None),
        ):
            if isinstance(loader, AssertionRewritingHook) and id(loader) not in active:
                loader.config = None  # type: ignore[assignment]  # its session has ended
                loader.session = None


def _freeze() -> None:
    """Collect what the shard left as garbage, then freeze what survives: pytest collects
    several times at each session's end, and a frozen object is never scanned again, so the
    worker's interpreter, pytest, its plugins and the installed modules cost those collections
    nothing (a third of a small shard's CPU, measured)."""
    gc.collect()
    gc.freeze()


def _empty(folder: str, keep: list[str]) -> None:
    """Remove what a shard left in its home or temporary folder, the folder itself kept.

    A sandbox's private `/tmp` holds the mount points of what it shows (the worker's own
    folder, bound from the host, among them): a folder on the way to one in `keep` is emptied
    around it, never removed, and nothing on another filesystem (a mount) is entered."""
    try:
        device = os.lstat(folder).st_dev
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        path = os.path.realpath(entry.path)
        if path in keep:
            continue
        if any(k.startswith(path + os.sep) for k in keep):
            if entry.is_dir(follow_symlinks=False):
                _empty(entry.path, keep)
            continue
        _remove(entry.path, device)


def _remove(path: str, device: int) -> None:
    """Remove `path` and what is under it, on `device` only (a mount below is left alone)."""
    try:
        seen = os.lstat(path)
    except OSError:
        return
    if seen.st_dev != device:
        return
    if stat.S_ISDIR(seen.st_mode):
        with contextlib.suppress(OSError):
            for entry in os.scandir(path):
                _remove(entry.path, device)
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return
    with contextlib.suppress(OSError):
        os.unlink(path)


def _pytest_main_path() -> str:
    """What `sys.argv[0]` is in `python -m pytest`: the path of pytest's `__main__`."""
    import pytest

    return os.path.join(os.path.dirname(os.path.abspath(pytest.__file__)), "__main__.py")


def _point(fds: list[int], path: str) -> None:
    """Point every fd in `fds` at `path` (a shard's log)."""
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        _point_fd(fds, target)
    finally:
        os.close(target)


def _point_fd(fds: list[int], target: int) -> None:
    for fd in fds:
        if fd != target:
            os.dup2(target, fd)


def run_one(request: dict[str, Any], fds: list[int], idle: int, folder: str, root: str) -> int:
    """Run one shard in this process; its exit code as pytest's `main` gives it."""
    import pytest

    sys.stdout.flush()
    sys.stderr.flush()
    with open(request["log"], "wb"):
        pass  # the shard's log starts empty, as a shard process's does
    _point(fds, request["log"])
    saved_env = dict(os.environ)
    saved_path = list(sys.path)
    saved_cwd = os.getcwd()
    saved_filters = list(warnings.filters)
    root_logger = logging.getLogger()
    saved_handlers, saved_level = list(root_logger.handlers), root_logger.level
    before = set(sys.modules)
    for name, value in dict(request.get("env") or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)
    args = [str(a) for a in request["args"]]
    program = request.get("program")
    try:
        if program:  # `python -c PROGRAM ARGS`, in this process (the gate's collection)
            saved_argv, sys.argv = sys.argv, ["-c", *args]
            try:
                exec(compile(program, "<release-ledger>", "exec"), {"__name__": "__main__"})
                code = 0
            finally:
                sys.argv = saved_argv
        else:  # sys.argv as `python -m pytest ARGS` sets it: tests and plugins read it
            saved_argv, sys.argv = sys.argv, [_pytest_main_path(), *args]
            try:
                code = int(pytest.main(args))
            finally:
                sys.argv = saved_argv
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except Exception as error:  # pytest's own crash: the shard's, not the worker's
        print(f"release-ledger worker: pytest raised {error!r}", file=sys.stderr)
        code = 3
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        with contextlib.suppress(OSError):
            os.chdir(saved_cwd)
        # what a conftest set process-wide (warning filters, the root logger's handlers,
        # whose streams were this shard's captures) is set again by the next shard's own
        warnings.filters[:] = saved_filters  # type: ignore[index]  # a list at run time
        getattr(warnings, "_filters_mutated", lambda: None)()  # its cache of the filters
        root_logger.handlers[:] = saved_handlers
        root_logger.setLevel(saved_level)
        _forget_modules(before, root)
        _release_rewriters()
        _freeze()
        # its own folder (checkout, logs, home) is bound into a sandbox's /tmp: never emptied
        # as part of /tmp (the home is emptied as a folder of its own)
        keep = [folder, root]
        for scratch in request.get("scratch") or ():
            _empty(str(scratch), keep)
        _point_fd(fds, idle)
    return code


def main() -> int:
    # The gate's channels, kept off fds 0 and 1: a test (or what it starts) reads stdin as in
    # a shard process, from /dev/null, never the next shard's request.
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    # Between shards its output goes where the gate pointed its stderr (the worker's own log,
    # opened by the gate: under `sandbox: uid` the worker could not open it itself).
    idle = os.dup(2)
    folder = os.path.realpath(os.environ.get("RELEASE_LEDGER_WORKER_DIR") or os.getcwd())
    root = os.path.realpath(os.environ.get("RELEASE_LEDGER_WORKER_ROOT") or os.getcwd())
    # The plugin keeps its own copies of fds 1 and 2 when time limits may be set (its
    # time-limit line must pass pytest's capture): imported with the variable set, its copies
    # are made now and pointed at each shard's log with fds 1 and 2.
    had = os.environ.get(LIMITS_VARIABLE)
    os.environ[LIMITS_VARIABLE] = "{}"
    import pytest  # noqa: F401  (the start paid once)
    import release_ledger_pytest as plugin  # type: ignore[import-not-found]  # its folder is on PYTHONPATH

    if had is None:
        os.environ.pop(LIMITS_VARIABLE, None)
    else:
        os.environ[LIMITS_VARIABLE] = had
    fds = sorted({1, 2, plugin._STDOUT, plugin._STDERR})
    _point_fd(fds, idle)
    _freeze()
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        reset = _peak_reset()
        code = run_one(request, fds, idle, folder, root)
        replies.write(json.dumps({"exit_code": code, "peak_kb": _peak_kb(), "reset": reset}))
        replies.write("\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
