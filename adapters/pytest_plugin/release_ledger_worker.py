"""A resident pytest worker: one process that has imported the interpreter, pytest and the
environment's plugins once, and forks a child for each shard, so a shard pays none of that.

Self-contained like the plugin beside it (the standard library and pytest only): the local
executor starts it as `PYTHON -m release_ledger_worker` inside the revision's sandbox, in a
checkout of its own, and supervises it as it supervises a shard process (time and memory
limits per shard, the whole session killed on overrun; `adapters/executors/resident.py`).

Each line on stdin is one shard, as JSON: `args` (pytest's arguments: the gate's plugin, the
declared options, `--junitxml`, the files; with `program`, a program of the gate's run as
`python -c PROGRAM ARGS` would run it: the collection), `log` (the shard's log: fds 1 and 2
are pointed there for the shard), `env` (variables set for the shard only; `null` unsets one) and
`scratch` (folders emptied after the shard: its home and temporary folder). The answer is
one line on the worker's original stdout: `{"exit_code": N, "signal": S, "peak_kb": K,
"reset": B, "child": PID}`.

Why a child per shard: a shard must see what a fresh process would. Installed modules keep
objects of the pytest session that imported them (structlog binds `sys.stderr`, which under
pytest is that session's capture stream): kept from one shard's session to the next, they
made a real suite fail where its own CI passes. A child forked from a worker that has run no
session of the project's starts from the same state every time, and whatever a shard imports,
changes or leaks (modules, environment, cwd, warning filters, threads, memory) ends with it.
A shard that ends its process (`os._exit`, a crash, a file past its time limit) ends only the
child: the reply carries its exit status or signal, as a shard process's would.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import stat
import sys
import threading
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


def _release_rewriters() -> None:
    """Let go of the config of each ended session's assertion rewriter. pytest rewrites the
    asserts of installed plugins, and a plugin module imported during a session (the
    warm-up's) keeps its rewriter as its loader; the rewriter holds that session's config,
    and through it the whole session (with shards run in-process, every test module and what
    it kept: 60 MB a shard, measured). The module keeps its loader (pytest asks for one of
    that type, or warns that the module cannot be rewritten) and the loader what reading the
    module's files needs."""
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
    """Collect the warm-up's garbage, then freeze what survives before any child is forked:
    pytest collects several times at each session's end, and a frozen object is never scanned
    (nor its page copied on write in a child), so the worker's interpreter, pytest and its
    plugins cost those collections nothing (a third of a small shard's CPU, measured)."""
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


def run_one(request: dict[str, Any], fds: list[int]) -> int:
    """Run one shard in this (child) process; its exit code as pytest's `main` gives it."""
    import pytest

    with open(request["log"], "wb"):
        pass  # the shard's log starts empty, as a shard process's does
    _point(fds, request["log"])
    for name, value in dict(request.get("env") or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)
    args = [str(a) for a in request["args"]]
    program = request.get("program")
    try:
        if program:  # `python -c PROGRAM ARGS`, in this process (the gate's collection)
            sys.argv = ["-c", *args]
            exec(compile(program, "<release-ledger>", "exec"), {"__name__": "__main__"})
            return 0
        sys.argv = [_pytest_main_path(), *args]  # as `python -m pytest ARGS` sets it
        return int(pytest.main(args))
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1
    except Exception as error:  # pytest's own crash: the shard's, not the worker's
        print(f"release-ledger worker: pytest raised {error!r}", file=sys.stderr)
        return 3
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _child(request: dict[str, Any], fds: list[int], private: list[int], result: int) -> None:
    """The forked child: run the shard, send its exit code and peak on `result`, end."""
    code = 1
    try:
        for fd in private:  # the worker's channels are not the shard's
            with contextlib.suppress(OSError):
                os.close(fd)
        reset = _peak_reset()
        code = run_one(request, fds)
        os.write(result, json.dumps({"peak_kb": _peak_kb(), "reset": reset}).encode())
    finally:
        os._exit(code if 0 <= code <= 255 else 1)


def _warm_up() -> None:
    """Load the environment's pytest plugins the way a session does (entry points, their
    asserts rewritten), with no project, conftest or capture: each child then starts with
    them loaded, as a fresh process has them before its session starts. A warm-up that
    cannot run leaves each child to load them itself."""
    import shutil
    import tempfile

    import pytest

    try:
        empty = tempfile.mkdtemp(prefix="release-ledger-warm-up-")
    except OSError:
        return
    saved = os.getcwd()
    try:
        ini = os.path.join(empty, "pytest.ini")
        with open(ini, "w", encoding="utf-8") as handle:
            handle.write("[pytest]\n")
        os.chdir(empty)
        pytest.main(["--collect-only", "-q", "-s", "-p", "no:cacheprovider", "--noconftest",
                     "--rootdir", empty, "-c", ini, empty])  # fmt: skip
    except Exception as error:  # a plugin that fails here fails in the shard too, and says so
        print(f"release-ledger worker: warm-up raised {error!r}", file=sys.stderr)
    finally:
        with contextlib.suppress(OSError):
            os.chdir(saved)
        shutil.rmtree(empty, ignore_errors=True)
        _release_rewriters()
    # threads a plugin started for the session (the gate's limit watch stops at unconfigure)
    # must be gone before the first fork: a child gets no copy of them, only their locks
    for thread in threading.enumerate():
        if thread is not threading.main_thread():
            thread.join(timeout=1.0)


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
    _warm_up()
    _freeze()
    private = [requests.fileno(), replies.fileno(), idle]
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        reader, writer = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
            os.close(reader)
            _child(request, fds, private, writer)
        os.close(writer)
        _, status = os.waitpid(child, 0)
        figures = _read_written(reader)
        # its own folder (checkout, logs, home) is bound into a sandbox's /tmp: never emptied
        # as part of /tmp (the home is emptied as a folder of its own)
        for scratch in request.get("scratch") or ():
            _empty(str(scratch), [folder, root])
        answer: dict[str, Any] = {"child": child, "reset": False, "peak_kb": 0}
        with contextlib.suppress(ValueError):
            answer.update(json.loads(figures or b"{}"))
        if os.WIFSIGNALED(status):
            answer["signal"] = os.WTERMSIG(status)
        else:
            answer["exit_code"] = os.WEXITSTATUS(status)
        replies.write(json.dumps(answer) + "\n")
        replies.flush()
    return 0


def _read_written(fd: int) -> bytes:
    """What the ended child wrote on the pipe (one small write, whole or nothing), without
    waiting for its end of file: a process the shard forked holds the pipe open as long as
    it lives, and must not hold the shard's end with it."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
