"""A project's hatch test environment, read by hatch itself: its dependencies and test script.

`hatch env show --json` gives every environment as hatch resolves it: templates inherited,
matrices expanded (`test.py3.11`, `hatch-test.py3.11`), scripts expanded into their command
lines (a script naming another is replaced by its commands, `{args}` defaults applied). The
environment chosen is the first for this interpreter (its `python` is this version, or it
names none) with a script whose command runs tests (`runners.py`), the project's own
environments before `hatch test`'s (`hatch-test`, used only where the project configures it:
hatch defines it for every project, so its presence declares nothing); in an environment, the
scripts named test/tests/run/unit first.

A project whose hatch needs environment plugins (`[tool.hatch.env] requires`: hatch would
install them into the gate's own interpreter) is read from its tables as written instead
(`environments_as_written`: templates and scripts, a matrix's interpreters; the plugins' types
and collectors and the matrix overrides left out), and the source says so.

Stdlib only, importing nothing of ours at run time (sent to build hosts and pods with
`environment.py`); where hatch is not installed the source is unreadable and the next is tried.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
from typing import TYPE_CHECKING

# On the gate's machine; on a host these names come from the program's other parts.
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.env_installer import find_tool
    from release_ledger.adapters.executors.invocation_source import (
        POSARGS_SENTINEL,
        posargs_default,
    )
    from release_ledger.adapters.executors.nox_reader import DeclarationUnreadable
    from release_ledger.adapters.executors.runners import command_line, declared, is_test_command

if TYPE_CHECKING:
    from collections.abc import Callable

HATCH_TIMEOUT_S = 120.0
HATCH_TEST_ENV = "hatch-test"
_SCRIPT_ORDER = ("test", "tests", "run", "unit", "test-all", "cov", "run-cov")


def _tables(checkout: str) -> dict[str, object]:
    """`tool.hatch` of pyproject.toml merged under hatch.toml (hatch's own two places)."""
    try:
        import tomllib
    except ImportError:  # pragma: no cover - older interpreters on build hosts
        return {}
    found: dict[str, object] = {}
    for name in ("pyproject.toml", "hatch.toml"):
        try:
            with open(os.path.join(checkout, name), "rb") as handle:
                data = tomllib.load(handle)
        except (OSError, ValueError):
            continue
        if name == "pyproject.toml":
            tool = data.get("tool")
            data = tool.get("hatch", {}) if isinstance(tool, dict) else {}
        if isinstance(data, dict):
            found.update(data)
    return found


def hatch_declared(checkout: str) -> bool:
    """Whether the project configures hatch environments (`[tool.hatch.envs.*]` or `envs` in
    hatch.toml): only their presence is looked at; hatch reads what they say."""
    envs = _tables(checkout).get("envs")
    return isinstance(envs, dict) and bool(envs)


def _configured_envs(checkout: str) -> set[str]:
    envs = _tables(checkout).get("envs")
    return {str(name) for name in envs} if isinstance(envs, dict) else set()


def read_environments(
    checkout: str,
    env: dict[str, str],
    confine: Callable[[list[str], str | None, list[str]], list[str]] | None = None,
) -> dict[str, dict[str, object]]:
    """Every environment hatch resolves for the project (`hatch env show --json`)."""
    hatch = find_tool("hatch")
    if hatch is None:
        raise DeclarationUnreadable("hatch is not installed on this machine")
    argv = [hatch, "--no-interactive", "--no-color", "env", "show", "--json"]
    wrapped = confine(argv, checkout, []) if confine is not None else argv
    # hatch's data and cache folders: a private /tmp one (a confined step writes nothing else).
    scratch = os.path.join(env.get("TMPDIR") or "/tmp", "release-ledger-hatch")
    quiet = dict(env, HATCH_DATA_DIR=scratch + "/data", HATCH_CACHE_DIR=scratch + "/cache")
    try:
        done = subprocess.run(
            wrapped, cwd=checkout, env=quiet, stdin=subprocess.DEVNULL, capture_output=True,
            timeout=HATCH_TIMEOUT_S, check=False,
        )  # fmt: skip
        found = json.loads(done.stdout.decode("utf-8", "replace"))
    except (OSError, subprocess.TimeoutExpired, ValueError) as error:
        said = locals().get("done")
        # hatch prints its error (a traceback's last line) on stdout or stderr
        text = (said.stderr + said.stdout).decode("utf-8", "replace") if said else str(error)
        lines = [line.strip() for line in text.splitlines() if line.strip()] or [str(error)]
        raise DeclarationUnreadable(
            f"hatch could not read its configuration: {lines[-1][-300:]}"
        ) from None
    if not isinstance(found, dict):
        raise DeclarationUnreadable("hatch could not read its configuration: not a table")
    return {str(k): v for k, v in found.items() if isinstance(v, dict)}


def plugins_required(checkout: str) -> str:
    """Why hatch cannot be run on the project ('' when it can): it needs environment plugins
    (`[tool.hatch.env] requires`), which hatch would install into the interpreter it runs in,
    the gate's own."""
    plugins = _tables(checkout).get("env")
    required = plugins.get("requires") if isinstance(plugins, dict) else None
    if not required:
        return ""
    named = ", ".join(str(r) for r in required) if isinstance(required, list) else required
    return f"hatch needs environment plugins the gate does not install ({named})"


_AS_WRITTEN_KEYS = ("features", "dependencies", "extra-dependencies", "dependency-groups",
                    "env-vars", "skip-install", "python", "type")  # fmt: skip


def environments_as_written(checkout: str) -> dict[str, dict[str, object]]:
    """The project's environments from its tables as written, where hatch cannot be run:
    each table over its template chain (`template`, else `default`: the nearer wins, scripts
    merged as `_raw_scripts` does), a matrix's `python` values as `name.pyX.Y`. Environments
    of a plugin's type are left out, as are collectors and a matrix's overrides (the
    plugins' and overrides' work); a virtual environment's own settings are what CI gets.
    A `detached` table inherits nothing and skips the install, and so do those templated on
    it unless they say otherwise (hatch's `_populate_default_env_values`)."""
    envs = _tables(checkout).get("envs")
    found: dict[str, dict[str, object]] = {}
    for name, table in envs.items() if isinstance(envs, dict) else ():
        if not isinstance(table, dict):
            continue
        merged: dict[str, object] = {}
        for layer in reversed(_template_chain(checkout, str(name))):
            merged.update({k: v for k, v in layer.items() if k in _AS_WRITTEN_KEYS})
            if layer.get("detached"):  # hatch: no template, and the project not installed
                merged["skip-install"] = True
        if str(merged.get("type", "virtual")) != "virtual":
            continue
        merged["scripts"] = _raw_scripts(checkout, str(name))
        pythons = [
            str(value) for entry in _matrix(table) for value in _strings(entry.get("python"))
        ]
        for python in dict.fromkeys(pythons):
            found[f"{name}.py{python}"] = dict(merged, python=python)
        if not pythons:
            found[str(name)] = merged
    return found


def _matrix(table: dict[str, object]) -> list[dict[str, object]]:
    entries = table.get("matrix")
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


# hatch's `{args}` context field in a script, with its default (`{args:tests}`).
_ARGS_FIELD = re.compile(r"\{args(?::([^{}]*))?\}")


def without_args(line: str) -> str:
    """A script line as `hatch run` runs it given no arguments: `{args:X}` is X, `{args}`
    nothing (`hatch env show` applies this itself; a line it left unformatted is read so)."""
    return _ARGS_FIELD.sub(lambda field: field.group(1) or "", line).strip()


def _command_words(line: str) -> list[str] | None:
    """A script line's words, less hatch's `- ` prefix (run on, whatever the exit)."""
    line = line.strip()
    try:
        return shlex.split(line[2:] if line.startswith("- ") else line)
    except ValueError:
        return None


def _template_chain(checkout: str, env_name: str) -> list[dict[str, object]]:
    """An environment's table as written, then its template's (`template`, else `default`),
    and so on: the nearest first. A `detached` table is its own template, as hatch makes it."""
    envs = _tables(checkout).get("envs")
    chain: list[dict[str, object]] = []
    name: object = env_name.split(".", 1)[0]  # a matrix environment's own table
    while isinstance(envs, dict) and isinstance(envs.get(name), dict) and len(chain) < 16:
        table = envs[name]
        chain.append(table)
        following = table.get("template", "default" if name != "default" else None)
        if table.get("detached"):
            following = None
        name = None if following == name else following
    return chain


def _raw_scripts(checkout: str, env_name: str) -> dict[str, list[str]]:
    """An environment's scripts as the project wrote them (`{args}` fields kept): those of
    its template chain (`_template_chain`), each overlaid by the next."""
    scripts: dict[str, list[str]] = {}
    for table in reversed(_template_chain(checkout, env_name)):
        own = table.get("scripts")
        for script, lines in (own.items() if isinstance(own, dict) else ()):
            scripts[str(script)] = [str(x) for x in (lines if isinstance(lines, list) else [lines])]
    return scripts


def _script_lines(
    scripts: dict[str, list[str]], script: str, seen: tuple[str, ...] = ()
) -> list[str]:
    """A script's lines with the scripts it names replaced by theirs, the naming line's
    arguments appended to each (as hatch expands them)."""
    found: list[str] = []
    for line in scripts.get(script, []):
        first, _, rest = line.strip().partition(" ")
        if first in scripts and first not in (*seen, script):
            inner = _script_lines(scripts, first, (*seen, script))
            found += [f"{sub} {rest}".strip() for sub in inner]
        else:
            found.append(line)
    return found


def args_default(checkout: str, env_name: str, script: str, words: list[str]) -> list[str]:
    """The words hatch put for the `{args:DEFAULT}` of the script line it ran as `words`
    (`posargs` of the invocation, as tox's `{posargs:DEFAULT}`); none when the line has no
    default, or when the line as written cannot be matched to hatch's (an override)."""
    for line in _script_lines(_raw_scripts(checkout, env_name), script):
        if _command_words(without_args(line)) == words:
            marked = _command_words(_ARGS_FIELD.sub(POSARGS_SENTINEL, line))
            return posargs_default(words, marked or [])
    return []


def _hatch_python_rank(python: object, version: str) -> int:
    """2 for an environment of exactly this interpreter, 1 for one naming none, else 0."""
    if python in (None, ""):
        return 1
    return 2 if str(python) == ".".join(version.split(".")[:2]) else 0


def choose_environment(
    environments: dict[str, dict[str, object]], version: str, configured: set[str]
) -> tuple[str, str, list[str]] | None:
    """(environment, script, test command) for this interpreter, or None."""

    def base(name: str) -> str:
        return name.split(".", 1)[0]

    names = [
        n for n in environments
        if base(n) in configured and (not base(n).startswith("hatch-") or base(n) == HATCH_TEST_ENV)
    ]  # fmt: skip
    ranked = sorted(
        enumerate(names),
        key=lambda item: (
            -_hatch_python_rank(environments[item[1]].get("python"), version),
            base(item[1]) == HATCH_TEST_ENV,
            "test" not in base(item[1]),
            item[0],
        ),
    )
    for _, name in ranked:
        config = environments[name]
        if not _hatch_python_rank(config.get("python"), version):
            continue
        scripts = config.get("scripts")
        if not isinstance(scripts, dict):
            continue
        order = sorted(scripts, key=lambda s: (s not in _SCRIPT_ORDER, _SCRIPT_ORDER.index(s)
                                                if s in _SCRIPT_ORDER else 0))  # fmt: skip
        for script in order:
            lines = scripts[script]
            for line in lines if isinstance(lines, list) else [lines]:
                words = _command_words(without_args(str(line)))
                if words and is_test_command(words):
                    return name, str(script), words
    return None


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def hatch_source(
    checkout: str,
    version: str,
    env: dict[str, str],
    confine: Callable[[list[str], str | None, list[str]], list[str]] | None = None,
) -> dict[str, object]:
    """The hatch test environment for this interpreter as a declared source: its
    dependencies, features (extras), variables, and its test script as an invocation."""
    as_written = plugins_required(checkout)
    if as_written:
        environments = environments_as_written(checkout)
    else:
        environments = read_environments(checkout, env, confine)
    chosen = choose_environment(environments, version, _configured_envs(checkout))
    if chosen is None:
        why = f"no hatch environment for Python {version} has a script that runs tests"
        raise DeclarationUnreadable(f"{as_written}; as written, {why}" if as_written else why)
    name, script, words = chosen
    config = environments[name]
    invocation = declared(words, "")
    if invocation is None:  # pragma: no cover - choose_environment kept only test commands
        raise DeclarationUnreadable(f"hatch env {name}: no test command")
    env_vars = config.get("env-vars")
    set_env = {str(k): str(v) for k, v in env_vars.items()} if isinstance(env_vars, dict) else {}
    set_env = {k: v for k, v in set_env.items() if not k.startswith("HATCH_")}
    invocation.update(source=f"hatch:{name}:{script}", env=set_env)
    posargs = args_default(checkout, name, script, words)
    if posargs:
        invocation["posargs"] = posargs
    groups = _strings(config.get("dependency-groups"))
    return {
        "source": "hatch",
        "detail": f"hatch env {name}, script {script}"
        + (f" (read from its tables as written: {as_written})" if as_written else ""),
        "extras": _strings(config.get("features")),
        "requirements": [
            *_strings(config.get("dependencies")), *_strings(config.get("extra-dependencies"))
        ],
        "groups": groups,
        "files": [],
        "install_project": not bool(config.get("skip-install")),
        "set_env": set_env,
        "command": command_line(words),
        "invocation": invocation,
    }
