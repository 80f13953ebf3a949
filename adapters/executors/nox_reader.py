"""A project's nox test session, read by nox itself: its installs and its test command.

The noxfile is a program, not a declaration: what a session installs and runs is only known
by running it. So nox's own machinery runs it (`load_nox_module`, `discover_manifest`,
`SessionRunner.execute`, in the gate's interpreter, where nox is installed), with no virtual
environment created and every command captured instead of run (`nox.command.run` records its
argument list, its working directory and the variables the session sets). The session chosen
is the first, in the noxfile's order, for this interpreter (`python="3.11"`, else one that
names none) whose commands run tests (`runners.py`); default sessions before the others.

Stdlib only, importing nothing of ours at run time (sent to build hosts and pods with
`environment.py`); where nox is not installed the source is unreadable and the next is tried.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING

# On the gate's machine; on a host these names come from the program's other parts.
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.env_lock import UV_SYNC
    from release_ledger.adapters.executors.runners import command_line, declared, is_test_command

if TYPE_CHECKING:
    from collections.abc import Callable

NOX_FILES = ("noxfile.py",)
NOX_TIMEOUT_S = 120.0
NOX_MARK = "release-ledger-nox "
NOX_POSARGS = "@@release-ledger-posargs@@"  # as `invocation_source.POSARGS_SENTINEL`

# Run by the gate's interpreter in the checkout (confined as a build step): nox loads the
# noxfile and executes every session with its commands recorded, none run.
NOX_READER = r'''
import json, os, sys

def main(noxfile):
    import nox.command, nox.sessions, nox.tasks, nox.virtualenv
    from nox._options import options
    config = options.parse_args(["--noxfile", noxfile, "--no-color", "--non-interactive"])
    config.no_dependencies = True  # read each session alone; `requires` runs nothing here
    module = nox.tasks.load_nox_module(config)
    if isinstance(module, int):
        raise SystemExit("nox could not load " + noxfile)
    nox.tasks.merge_noxfile_options(module, config)
    manifest = nox.tasks.discover_manifest(module, config)
    outer = dict(os.environ)
    recorded = []

    def record(args, env=None, **kwargs):
        own = {k: v for k, v in (env or {}).items() if v is not None and outer.get(k) != v}
        recorded.append({"args": [str(a) for a in args], "cwd": os.getcwd(), "env": own})
        return "" if kwargs.get("silent") else True

    def no_venv(self):
        python = self.func.python if isinstance(self.func.python, str) else None
        backend = getattr(self.func, "venv_backend", None) or "virtualenv"
        backend = backend if backend in ("virtualenv", "venv", "uv") else "virtualenv"
        self.venv = nox.virtualenv.VirtualEnv(self.envdir, interpreter=python,
                                              venv_backend=backend)

    nox.command.run = record
    nox.sessions.SessionRunner._create_venv = no_venv
    found = []
    for runner, _selected in manifest.list_all_sessions():
        # Once with posargs given (where they stand in its commands), then as CI runs it.
        runner.posargs = [POSARGS]
        runner.execute()
        given = list(recorded)
        del recorded[:]
        runner.posargs = []
        result = runner.execute()
        python = runner.func.python
        found.append({
            "name": runner.friendly_name,
            "python": python if isinstance(python, (str, type(None))) else repr(python),
            "default": bool(getattr(runner.func, "default", True)),
            "status": result.status.name.lower(),
            "reason": result.reason or "",
            "commands": list(recorded),
            "with_posargs": given,
        })
        del recorded[:]
    print(MARK + json.dumps(found))

MARK, POSARGS = sys.argv[2], sys.argv[3]
main(sys.argv[1])
'''


class DeclarationUnreadable(Exception):
    """A declared configuration its tool could not read: the source is recorded as failed."""


def nox_declared(checkout: str) -> bool:
    """A noxfile at the checkout's root, where `nox` looks for it."""
    return any(os.path.isfile(os.path.join(checkout, name)) for name in NOX_FILES)


def nox_importable(python: str) -> bool:
    """Whether nox is installed for the gate's interpreter (not on every build host)."""
    try:
        done = subprocess.run([python, "-c", "import nox"], capture_output=True, timeout=60,
                              cwd="/", check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def read_sessions(
    checkout: str,
    env: dict[str, str],
    confine: Callable[[list[str], str | None, list[str]], list[str]] | None = None,
) -> list[dict[str, object]]:
    """Every session of the noxfile with the commands it runs, as nox executes it."""
    python = sys.executable
    if not nox_importable(python):
        raise DeclarationUnreadable("nox is not installed on this machine")
    noxfile = os.path.join(checkout, NOX_FILES[0])
    argv = [python, "-c", NOX_READER, noxfile, NOX_MARK, NOX_POSARGS]
    wrapped = confine(argv, checkout, []) if confine is not None else argv
    try:
        done = subprocess.run(
            wrapped, cwd=checkout, env=dict(env, PYTHONDONTWRITEBYTECODE="1"),
            stdin=subprocess.DEVNULL, capture_output=True, timeout=NOX_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DeclarationUnreadable(f"nox could not read the noxfile: {error}") from None
    out = done.stdout.decode("utf-8", "replace")
    for line in reversed(out.splitlines()):
        if line.startswith(NOX_MARK):
            try:
                sessions = json.loads(line[len(NOX_MARK) :])
            except ValueError:
                break
            if isinstance(sessions, list):
                return [s for s in sessions if isinstance(s, dict)]
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    last = said[-1] if said else f"exit {done.returncode}"
    raise DeclarationUnreadable(f"nox could not read the noxfile: {last[-300:]}")


def _nox_python_rank(python: object, version: str) -> int:
    """2 for a session of exactly this interpreter, 1 for one naming none, 0 otherwise."""
    major_minor = ".".join(version.split(".")[:2])
    if python in (None, False, True, ""):
        return 1
    text = str(python)
    return 2 if text in (major_minor, f"python{major_minor}", f"py{major_minor}") else 0


def choose_session(
    sessions: list[dict[str, object]], version: str
) -> tuple[dict[str, object], list[str]] | None:
    """The test session for this interpreter and its test command (the first command that
    runs a test runner), or None when no session for it runs tests."""
    ranked = sorted(
        enumerate(sessions),
        key=lambda item: (
            -_nox_python_rank(item[1].get("python"), version),
            not item[1].get("default", True),
            "test" not in str(item[1].get("name", "")).lower(),
            item[0],
        ),
    )
    for _, session in ranked:
        if not _nox_python_rank(session.get("python"), version):
            continue
        if session.get("status") not in ("success", None):
            continue
        for command in commands_of(session):
            words = _words(command)
            if _install_words(words) is None and is_test_command(words):
                return session, words
    return None


def commands_of(session: dict[str, object]) -> list[dict[str, object]]:
    """The commands a session ran, in order (`args`, `cwd`, `env` each)."""
    found = session.get("commands")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def _words(command: dict[str, object]) -> list[str]:
    args = command.get("args")
    return [str(w) for w in args] if isinstance(args, list) else []


_INSTALL_VALUE_OPTIONS = ("-c", "--constraint", "-i", "--index-url", "--extra-index-url",
                          "-f", "--find-links", "--python", "-p")  # fmt: skip


def _install_words(words: list[str]) -> list[str] | None:
    """The arguments of an install command (`python -m pip install ...`, `uv pip install`,
    `pip install`), None for any other command."""
    names = [os.path.basename(w) for w in words[:4]]
    for prefix in (["python", "-m", "pip", "install"], ["uv", "pip", "install"],
                   ["pip", "install"], ["pip3", "install"]):  # fmt: skip
        head = names[: len(prefix)]
        if head[:1] and re.fullmatch(r"python(\d(\.\d+)?)?", head[0]):
            head = ["python", *head[1:]]
        if head == prefix:
            return words[len(prefix) :]
    return None


def installs(
    commands: list[dict[str, object]], checkout: str
) -> tuple[list[str], list[str], list[str], bool, list[str]]:
    """(requirements, requirements files, extras, whether the project itself is installed,
    dependency groups) of a session's install commands (`session.install`, `uv sync`)."""
    requirements: list[str] = []
    files: list[str] = []
    extras: list[str] = []
    groups: list[str] = []
    project = False
    for command in commands:
        words = _words(command)
        cwd = str(command.get("cwd") or checkout)
        if _is_uv_sync(words):
            project = project or "--no-install-project" not in words
            for flag, value in itertools.pairwise(words):
                if flag == "--extra":
                    extras.append(value)
                elif flag == "--group":
                    groups.append(value)
            continue
        args = _install_words(words)
        if args is None:
            continue
        index = 0
        while index < len(args):
            word = args[index]
            value = args[index + 1] if index + 1 < len(args) else ""
            if word in ("-r", "--requirement") and value:
                files.append(_relative(os.path.join(cwd, value), checkout))
                index += 2
                continue
            if word == "--group" and value:  # pip's and uv's PEP 735 groups
                groups.append(value.rpartition(":")[2])
                index += 2
                continue
            if word in _INSTALL_VALUE_OPTIONS:
                index += 2
                continue
            if word in ("-e", "--editable"):
                index += 1
                continue
            if word.startswith("-"):
                index += 1
                continue
            local = re.fullmatch(r"(\.{1,2}(/[^\[]*)?)(\[([^\]]*)\])?", word)
            if local and os.path.realpath(os.path.join(cwd, local.group(1))) == os.path.realpath(
                checkout
            ):
                project = True
                extras.extend(e.strip() for e in (local.group(4) or "").split(",") if e.strip())
            else:
                requirements.append(word)
            index += 1
    return requirements, files, extras, project, groups


def _is_uv_sync(words: list[str]) -> bool:
    return [os.path.basename(w) for w in words[:2]] == ["uv", "sync"]


_NO_DEFAULT_GROUPS = ("--no-default-groups", "--no-dev", "--only-group", "--only-dev")


def uv_sync_use(commands: list[dict[str, object]]) -> tuple[bool, bool]:
    """(whether the session installs with `uv sync`, which reads `uv.lock`; whether it keeps
    out the groups `uv sync` adds unasked: `--no-default-groups`, `--no-dev`, `--only-*`)."""
    synced, bare = False, False
    for command in commands:
        words = _words(command)
        if _is_uv_sync(words):
            synced = True
            bare = bare or any(w.split("=", 1)[0] in _NO_DEFAULT_GROUPS for w in words)
    return synced, bare


def _posargs_default(session: dict[str, object], index: int, words: list[str]) -> list[str]:
    """The words the session puts where posargs go when none are given (`session.posargs
    or ["tests"]`): its test command read again with posargs given, compared."""
    given = session.get("with_posargs")
    runs = [c for c in given if isinstance(c, dict)] if isinstance(given, list) else []
    if index >= len(runs):
        return []
    again = _words(runs[index])
    if NOX_POSARGS not in again or again[:1] != words[:1]:
        return []
    at = again.index(NOX_POSARGS)
    end = len(words) - (len(again) - at - 1)
    return words[at:end] if end >= at else []


def _relative(path: str, checkout: str) -> str:
    return os.path.relpath(os.path.realpath(path), os.path.realpath(checkout)).replace(os.sep, "/")


# Variables nox sets for its own bookkeeping and the virtual environment it would have made.
_NOX_OWN_ENV = re.compile(r"^(PATH|VIRTUAL_ENV|CONDA_PREFIX|UV_.*|NOX_.*|PIP_.*)$")


def nox_source(
    checkout: str,
    version: str,
    env: dict[str, str],
    confine: Callable[[list[str], str | None, list[str]], list[str]] | None = None,
) -> dict[str, object]:
    """The nox test session for this interpreter as a declared source: what its installs
    name, the variables it sets and its test command as an invocation."""
    sessions = read_sessions(checkout, env, confine)
    chosen = choose_session(sessions, version)
    if chosen is None:
        names = ", ".join(
            str(s.get("name")) + (f" (Python {s['python']})" if s.get("python") else "")
            for s in sessions
        ) or "none"
        raise DeclarationUnreadable(
            f"no nox session for Python {version} runs tests (sessions: {names})"
        )
    session, words = chosen
    commands = commands_of(session)
    run = next(c for c in commands if _words(c) == words)
    workdir = _relative(str(run.get("cwd") or checkout), checkout)
    workdir = "" if workdir == "." else workdir
    invocation = declared(words, workdir)
    if invocation is None:  # pragma: no cover - choose_session kept only test commands
        raise DeclarationUnreadable(f"nox session {session.get('name')}: no test command")
    requirements, files, extras, project, groups = installs(commands, checkout)
    set_env = {
        str(k): str(v)
        for k, v in dict(run.get("env") or {}).items()  # type: ignore[call-overload]
        if not _NOX_OWN_ENV.match(str(k))
    }
    invocation.update(source=f"nox:{session.get('name')}", env=set_env,
                      posargs=_posargs_default(session, commands.index(run), words))  # fmt: skip
    synced, no_default_groups = uv_sync_use(commands)
    return {
        "runner": UV_SYNC if synced else "",
        "no_default_groups": no_default_groups,
        "source": "nox",
        "detail": f"nox session {session.get('name')}",
        "extras": extras,
        "requirements": requirements,
        "groups": groups,
        "files": files,
        "install_project": project,
        "set_env": set_env,
        "command": command_line(words),
        "invocation": invocation,
    }
