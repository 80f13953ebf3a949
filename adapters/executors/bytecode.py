"""Bytecode compiled once per environment and worker, not once per shard process.

A shard process compiles every module it imports that has no bytecode beside it, and it can
write none into its environment (read-only in its sandbox; uv installs without bytecode):
each shard paid for the project and its dependencies again (networkx: 0.5 s of CPU a
process, 0.13 s with bytecode; numpy and scipy: 0.74 s, 0.31 s; docs/benchmarks.md).
So the gate writes it into the environments it built, where no shard can:

- at the build, the installed project's modules, and what its top-level packages import
  (`COMPILE_PROJECT`, run in the new environment);
- after a revision's collection, every module the collection imported from the environment
  without bytecode (a test's dependency the project does not import: `UNCOMPILED_MARK`
  lines of the collect program, compiled by `compile_collected`).

Only bytecode is written, by the environment's own interpreter run with neither site nor
`.pth` files (`-I -S`), so no code of the environment runs outside a sandbox; and only for
sources inside the environment, whatever a collection printed. A resident worker's shards
write the checkout's bytecode themselves, in the worker's own checkout (`local.py`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable

# A step of the environment build (`python -I -c COMPILE_PROJECT NAME LIMIT_S`): compiles the
# distribution NAME's modules, then imports its top-level packages with bytecode on, which
# writes the bytecode of the dependencies they import and of nothing else (compiling every
# installed package costs a small suite more than its shards save: numpy and scipy 5.9 s).
# It never fails the build (what does not compile or import stays source), and an import
# that hangs is ended after LIMIT_S.
IMPORT_LIMIT_S = 60
COMPILE_PROJECT = r"""
import compileall, importlib, importlib.metadata, os, signal, sys
sys.dont_write_bytecode = False
try:
    files = importlib.metadata.distribution(sys.argv[1]).files or []
except importlib.metadata.PackageNotFoundError:
    files = []
tops = set()
for path in files:
    if path.suffix == ".py":
        compileall.compile_file(str(path.locate()), quiet=2)
    top = path.parts[0]
    if len(path.parts) == 1 and path.suffix == ".py" and path.stem not in ("setup", "conftest"):
        tops.add(path.stem)
    elif len(path.parts) > 1 and path.parts[1] == "__init__.py" and top.isidentifier():
        tops.add(top)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):  # what an import starts must not hold the step's output open
    os.dup2(null, fd)
signal.alarm(int(sys.argv[2]))
for name in sorted(tops):
    try:
        importlib.import_module(name)
    except BaseException:
        pass
"""

# What the collect program prints, after its items, for each module it imported that has no
# bytecode beside it (`invocation_run.COLLECT_PROGRAM`).
UNCOMPILED_MARK = "release-ledger-uncompiled"

# Compiles the sources named on stdin, one per line; what does not compile stays source.
COMPILE_FILES = r"""
import py_compile, sys
for line in sys.stdin:
    try:
        py_compile.compile(line.rstrip("\n"), doraise=True)
    except Exception:
        pass
"""
COMPILE_TIMEOUT_S = 300.0


def project_name(wheel: str) -> str:
    """The distribution name a wheel's file name gives (`name-version-...whl`)."""
    return os.path.basename(wheel).split("-", 1)[0]


def uncompiled(output: str) -> list[str]:
    """The sources a collection's output names as imported without bytecode."""
    found = []
    for line in output.splitlines():
        mark, _, path = line.partition("\t")
        if mark == UNCOMPILED_MARK and path:
            found.append(path)
    return found


def within(paths: Iterable[str], folder: str) -> list[str]:
    """Of `paths`, the Python sources really inside `folder` (links resolved), each once."""
    root = os.path.realpath(folder)
    kept: dict[str, None] = {}
    for path in paths:
        real = os.path.realpath(path)
        if real.endswith(".py") and real.startswith(root + os.sep) and os.path.isfile(real):
            kept[real] = None
    return list(kept)


def compile_collected(python: str, environment: str, output: str) -> int:
    """Compile what a collection imported from `environment` (the venv folder of `python`,
    one the gate built) without bytecode; the number of sources given to the compiler.
    Never raises: bytecode only saves time."""
    sources = within(uncompiled(output), environment)
    if not sources:
        return 0
    try:
        subprocess.run(
            [python, "-I", "-S", "-c", COMPILE_FILES], input="\n".join(sources) + "\n",
            text=True, capture_output=True, timeout=COMPILE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return 0
    return len(sources)
