"""The sources a project declares its test environment in, read in `PRECEDENCE` order: tox's
test environment (read by tox's own loader), nox's and hatch's, a PEP 735 group, a test extra,
one test requirements file, pytest alone. Each is a plain dict (`declared_sources`); the first
that installs is used. Stdlib-only, like `environment.py` (sent with it)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the module also runs on build hosts' older interpreters: no run-time alias
    from collections.abc import Callable

# Runs one build step's command confined: (argv, cwd, folders it may write besides the
# checkout and the installers' caches) -> argv to run. An executor that can sandbox builds
# gives one to `prepare` (the local one: bubblewrap); without, steps run as given.
if TYPE_CHECKING:
    Confine = Callable[[list[str], str | None, list[str]], list[str]]

# On the gate's machine; on hosts and in pods the program's earlier part defines them.
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.env_installer import SetupFailed, _confined, find_tool
    from release_ledger.adapters.executors.env_lock import LOCK_RUNNER, UV_SYNC
    from release_ledger.adapters.executors.hatch_reader import hatch_declared, hatch_source
    from release_ledger.adapters.executors.invocation_source import (
        POSARGS_SENTINEL,
        InvocationUnreadable,
        choose_tox_env,
        tox_candidates,
        tox_invocation,
    )
    from release_ledger.adapters.executors.nox_reader import (
        DeclarationUnreadable,
        nox_declared,
        nox_source,
    )
    from release_ledger.adapters.executors.runners import unittest_under_pytest

TEST_EXTRAS = ("test", "tests", "testing", "dev")
_REQUIREMENT_FILES = (
    "requirements-test.txt",
    "requirements-tests.txt",
    "requirements-testing.txt",
    "requirements_test.txt",
    "requirements-dev.txt",
    "requirements_dev.txt",
    "test-requirements.txt",
    "test_requirements.txt",
    "tests/requirements.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
    "requirements/testing.txt",
    "requirements/dev.txt",
)
_REQUIREMENT_GLOBS = (("requirements", "test"), (".", "requirements-test"))
_LOCAL_PATH_LINE = re.compile(r"^(-e\s+|--editable\s+)?\.{1,2}(/[^\s\[;]*)?(\[[^\]]*\])?\s*(#.*)?$")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def in_checkout(checkout: str, rel: str) -> str | None:
    """The path of `rel` in the checkout when it is a file there, its links followed only as
    far as they stay inside: the gate reads the candidate's files, and a link out
    (`/proc/self/environ`, `/dev/zero`, `~/.netrc`) must neither be read nor quoted."""
    root = os.path.realpath(checkout)
    path = os.path.join(checkout, rel)
    real = os.path.realpath(path)
    if not real.startswith(root.rstrip(os.sep) + os.sep) or not os.path.isfile(real):
        return None
    return path


def _checkout_text(checkout: str, rel: str) -> str:
    """A file of the checkout as text ("" when absent, unreadable or a link out of it)."""
    path = in_checkout(checkout, rel)
    return _utf8_text(path) if path else ""


def _utf8_text(path: str) -> str:
    """The file as UTF-8 text, "" where it cannot be read so (its name differs from the
    supervisor's `_read_text`: both are joined into one program on hosts)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return ""


def _pyproject(checkout: str) -> dict[str, object]:
    text = _checkout_text(checkout, "pyproject.toml")
    if not text:
        return {}
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # pragma: no cover - older interpreters on build hosts
        try:
            import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
        except ImportError:
            return {}
    try:
        return tomllib.loads(text)
    except ValueError:
        return {}


def dependency_group(checkout: str) -> tuple[str | None, list[str]]:
    """The first PEP 735 group named test/tests/testing/dev, with include-group resolved."""
    groups = _pyproject(checkout).get("dependency-groups")
    if not isinstance(groups, dict):
        return None, []
    by_name = {_normal(str(k)): v for k, v in groups.items()}

    def resolve(name: str, seen: tuple[str, ...]) -> list[str]:
        entries = by_name.get(_normal(name))
        if not isinstance(entries, list) or name in seen:
            return []
        found: list[str] = []
        for entry in entries:
            if isinstance(entry, str):
                found.append(entry)
            elif isinstance(entry, dict) and isinstance(entry.get("include-group"), str):
                found.extend(resolve(entry["include-group"], (*seen, name)))
        return found

    for name in TEST_EXTRAS:
        if name in by_name:
            return name, resolve(name, ())
    return None, []


def requirement_files(checkout: str) -> list[str]:
    """Test requirements files the checkout holds, as paths relative to it (sorted)."""
    found = {rel for rel in _REQUIREMENT_FILES if in_checkout(checkout, rel)}
    for folder, prefix in _REQUIREMENT_GLOBS:
        directory = os.path.join(checkout, folder)
        with contextlib.suppress(OSError):
            for name in os.listdir(directory):
                rel = os.path.normpath(os.path.join(folder, name))
                if name.startswith(prefix) and name.endswith(".txt") and in_checkout(checkout, rel):
                    found.add(rel)
    return sorted(found)


def sanitized_requirements(checkout: str, rel: str, out_dir: str) -> str:
    """A copy of a requirements file without lines installing the project itself (`-e .`),
    with `-r`/`-c` references made absolute; returns the copy's path."""
    source = os.path.join(checkout, rel)
    base = os.path.dirname(source)
    lines = []
    for line in _checkout_text(checkout, rel).splitlines():
        stripped = line.strip()
        if _LOCAL_PATH_LINE.match(stripped):
            continue  # the project itself comes from the overlay, never the shared env
        match = re.match(r"^(-r|-c|--requirement|--constraint)\s*=?\s*(\S+)(.*)$", stripped)
        if match and not os.path.isabs(match.group(2)):
            line = f"{match.group(1)} {os.path.join(base, match.group(2))}{match.group(3)}"
        lines.append(line)
    target = os.path.join(out_dir, rel.replace(os.sep, "__"))
    with open(target, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return target


def _choose_extra(extras: list[str]) -> str | None:
    by_normal = {_normal(e): e for e in extras}
    return next((by_normal[name] for name in TEST_EXTRAS if name in by_normal), None)
PRECEDENCE = ("tox", "nox", "hatch", "dependency-group", "extras", "requirements-file", "pytest")
TOX_FILES = ("tox.ini", "tox.toml")
TOX_TIMEOUT_S = 120.0


# Variables tox sets for its own bookkeeping: never part of what the project declares.
_TOX_OWN_ENV = re.compile(r"^(TOX_|VIRTUAL_ENV$|PIP_|PYTHONHASHSEED$|PYTHONIOENCODING$)")


# pytest options that would stop the gate's measurement early or write a report of their own.
_STOPPING_ARGS = re.compile(
    r"^(-x|--exitfirst|--maxfail(=.*)?|--junit-?xml(=.*)?|--sw|--stepwise|--basetemp=.*)$"
)


# ... and those of them whose value is the next word. `--basetemp` names a folder of tox's
# that pytest empties at start: shards running side by side must each keep their own.
_DROPPED_WITH_VALUE = ("--maxfail", "--junitxml", "--junit-xml", "--basetemp")


def tox_declared(checkout: str) -> bool:
    """tox configuration in any of the places tox itself reads it from."""
    if any(os.path.isfile(os.path.join(checkout, name)) for name in TOX_FILES):
        return True
    if "[tox:tox]" in _checkout_text(checkout, "setup.cfg"):
        return True
    tool = _pyproject(checkout).get("tool")
    return isinstance(tool, dict) and "tox" in tool


def _tox_config(
    checkout: str, argv: list[str], env: dict[str, str], confine: Confine | None
) -> dict[str, dict[str, object]]:
    """One `tox config --format json` answer: its environments by name."""
    try:
        done = subprocess.run(
            _confined(confine, argv, checkout), cwd=checkout, env=env,
            stdin=subprocess.DEVNULL, capture_output=True, timeout=TOX_TIMEOUT_S, check=False,
        )  # fmt: skip
        found: dict[str, dict[str, object]] = json.loads(done.stdout.decode("utf-8", "replace"))[
            "env"
        ]
        if not isinstance(found, dict):
            raise TypeError("no environments")
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError) as error:
        tail = locals().get("done")
        said = tail.stderr.decode("utf-8", "replace").strip()[-300:] if tail else str(error)
        lines = [_ANSI.sub("", line).strip() for line in (said or str(error)).splitlines()]
        said = next((line for line in reversed(lines) if line), "")
        raise SetupFailed(f"tox could not read its configuration: {said}") from None
    return found


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _commands(value: object) -> list[str]:
    return [str(c) for c in value] if isinstance(value, list) else []


def tox_source(
    checkout: str, version: str, env: dict[str, str], confine: Confine | None = None
) -> dict[str, object]:
    """tox's test environment for this interpreter, chosen and read by tox's own loader
    (`tox config`): the one of `env_list` whose Python factor is this interpreter and whose
    commands run the tests (`py311-tests`), else tox's ad-hoc `py311`
    (`invocation_source.choose_tox_env`); its deps, extras, dependency groups, set_env, with
    its factor conditions evaluated by tox, and its test command (`invocation`)."""
    tox = find_tool("tox")
    if tox is None:
        raise SetupFailed("tox is not installed on this machine")
    config = [tox, "config", "-qq", "--format", "json", "--no-provision"]  # -qq: JSON alone
    # Commands only of the environments this interpreter can be (tox-uv makes a venv to read
    # them, and fails on an interpreter this machine lacks): its factor's, and factorless ones.
    specs = _tox_config(checkout, [*config, "-k", "base_python"], env, confine)
    listed: dict[str, dict[str, object]] = {}
    for candidate in tox_candidates(specs, version):
        with contextlib.suppress(SetupFailed):
            argv = [*config, "-e", candidate, "-k", "base_python", "commands"]
            listed.update(_tox_config(checkout, argv, env, confine))
    chosen = choose_tox_env(listed, version)
    name = chosen or "py" + "".join(version.split(".")[:2])
    keys = ["deps", "extras", "dependency_groups", "set_env", "commands", "skip_install",
            "runner", "no_default_groups", "change_dir", "env_site_packages_dir"]  # fmt: skip
    argv = [*config, "-e", name, "-k", *keys, "--", POSARGS_SENTINEL]
    found = _tox_config(checkout, argv, env, confine).get(name)
    if not isinstance(found, dict):
        raise SetupFailed(f"tox could not read its configuration: no environment {name}")
    if chosen is None:
        defaults = _tox_config(checkout, [*config, "-e", name, "-k", "commands"], env, confine)
        commands = _commands(defaults.get(name, {}).get("commands"))
    else:
        commands = _commands(listed[name].get("commands"))
    requirements: list[str] = []
    files: list[str] = []
    for dep in found.get("deps") or []:  # type: ignore[attr-defined]
        match = re.match(r"^(-r|--requirement)\s*=?\s*(\S+)$", str(dep).strip())
        if match:
            path = match.group(2)
            files.append(os.path.relpath(path, checkout) if os.path.isabs(path) else path)
        elif str(dep).strip():
            requirements.append(str(dep).strip())
    groups = [str(group) for group in found.get("dependency_groups") or []]  # type: ignore[attr-defined]
    if found.get("runner") == LOCK_RUNNER and not groups and not found.get("no_default_groups"):
        groups = _default_groups(checkout)  # what `uv sync` adds when no group is named
    for group in groups:
        requirements.extend(_resolve_group(checkout, group))
    set_env = {
        str(k): str(v)
        for k, v in (found.get("set_env") or {}).items()  # type: ignore[attr-defined]
        if not _TOX_OWN_ENV.match(k)
    }
    source: dict[str, object] = {
        "source": "tox",
        "detail": f"tox env {name}",
        "extras": [str(e) for e in found.get("extras") or []],  # type: ignore[attr-defined]
        "requirements": requirements,
        "files": files,
        "install_project": not bool(found.get("skip_install")),
        "set_env": set_env,
        "pytest_args": pytest_arguments(commands, checkout),
        "runner": str(found.get("runner") or ""),
    }
    site = found.get("env_site_packages_dir")
    try:
        source["invocation"] = tox_invocation(
            checkout, name, commands, _commands(found.get("commands")),
            str(found.get("change_dir") or checkout), site if isinstance(site, str) else "",
            set_env,
        )  # fmt: skip
    except InvocationUnreadable as error:
        source["invocation_error"] = str(error)
    return source


def _default_groups(checkout: str) -> list[str]:
    """The groups `uv sync` installs unasked: `[tool.uv] default-groups`, else `dev`."""
    document = _pyproject(checkout)
    groups = document.get("dependency-groups")
    names = [str(name) for name in groups] if isinstance(groups, dict) else []
    tool = document.get("tool")
    uv = tool.get("uv") if isinstance(tool, dict) else None
    default = uv.get("default-groups") if isinstance(uv, dict) else None
    if default == "all":
        return names
    if isinstance(default, list):
        return [str(name) for name in default]
    return [name for name in names if _normal(name) == "dev"]


def pytest_arguments(commands: list[str], checkout: str) -> list[str]:
    """The options a tox `commands` line gives pytest (for `PYTEST_ADDOPTS`): not its paths
    (the gate passes each shard's files), nor options that would stop a shard early."""
    import shlex

    for line in commands:
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        for index, word in enumerate(words):
            if os.path.basename(word) in ("pytest", "py.test"):
                rest = words[index + 1 :]
                break
        else:
            continue
        kept: list[str] = []
        skip_next = False
        for word in rest:
            if skip_next:
                skip_next = False
                continue
            if word in _DROPPED_WITH_VALUE:
                skip_next = True
                continue
            bare = word.split("::", 1)[0]
            is_path = not word.startswith("-") and (
                os.path.exists(bare) or os.path.exists(os.path.join(checkout, bare))
            )
            if is_path or _STOPPING_ARGS.match(word) or word == "{posargs}":
                continue
            kept.append(word)
        return kept
    return []


def _resolve_group(checkout: str, name: str) -> list[str]:
    groups = _pyproject(checkout).get("dependency-groups")
    if not isinstance(groups, dict):
        return []
    by_name = {_normal(str(k)): v for k, v in groups.items()}

    def resolve(group: str, seen: tuple[str, ...]) -> list[str]:
        entries = by_name.get(_normal(group))
        if not isinstance(entries, list) or _normal(group) in seen:
            return []
        found: list[str] = []
        for entry in entries:
            if isinstance(entry, str):
                found.append(entry)
            elif isinstance(entry, dict) and isinstance(entry.get("include-group"), str):
                found.extend(resolve(entry["include-group"], (*seen, _normal(group))))
        return found

    return resolve(name, ())


def requirements_file_for(checkout: str, version: str) -> str | None:
    """The one test requirements file for this interpreter: the first test file found, or its
    per-interpreter variant (`tests311.txt`, `tests-py3.11.txt`, ...) when one exists; a `dev`
    file only where there is no test file. Never a union of files."""
    found = requirement_files(checkout)
    tests = [f for f in found if not re.search(r"(^|[/_-])dev\b", f) and not _variant(f)]
    chosen = tests[0] if tests else next((f for f in found if not _variant(f)), None)
    if chosen is None:
        return None
    stem, ext = os.path.splitext(chosen)
    major, minor = version.split(".")[:2]
    for suffix in (f"{major}{minor}", f"-py{major}{minor}", f"{major}.{minor}", f"-{major}.{minor}",
                   f"-py{major}.{minor}", f"_py{major}{minor}"):  # fmt: skip
        if os.path.isfile(os.path.join(checkout, stem + suffix + ext)):
            return stem + suffix + ext
    return chosen


def _variant(rel: str) -> bool:
    """A per-interpreter variant of another requirements file (`tests37.txt`)."""
    return bool(re.search(r"(py)?\d\.?\d+\.txt$", os.path.basename(rel)))


def declared_sources(
    checkout: str,
    version: str,
    provided: list[str],
    env: dict[str, str],
    confine: Confine | None = None,
) -> list[dict[str, object]]:
    """The project's declared test environments, in `PRECEDENCE` order (a source that cannot
    even be read is kept as a failed entry, so the ledger says it was tried)."""
    sources: list[dict[str, object]] = []
    if tox_declared(checkout):
        try:
            sources.append(tox_source(checkout, version, env, confine))
        except SetupFailed as error:
            sources.append({"source": "tox", "detail": "tox", "unreadable": str(error)})
    sources.extend(runner_sources(checkout, version, env, confine))
    group, group_requires = dependency_group(checkout)
    if group:
        sources.append({"source": "dependency-group", "detail": f"group {group}",
                        "requirements": group_requires})  # fmt: skip
    extra = _choose_extra(provided)
    if extra:
        sources.append({"source": "extras", "detail": f"extra [{extra}]", "extras": [extra]})
    rel = requirements_file_for(checkout, version)
    if rel:
        sources.append({"source": "requirements-file", "detail": rel, "files": [rel]})
    sources.append({"source": "pytest", "detail": "pytest alone", "requirements": ["pytest"]})
    for source in sources:
        source.setdefault("extras", [])
        source.setdefault("requirements", [])
        source.setdefault("files", [])
        source.setdefault("install_project", True)
        source.setdefault("set_env", {})
        source.setdefault("pytest_args", [])
    return sources


def runner_sources(
    checkout: str, version: str, env: dict[str, str], confine: Confine | None = None
) -> list[dict[str, object]]:
    """nox's test session, then hatch's test environment, where the project declares them
    (`nox_reader.py`, `hatch_reader.py`): each read by its own tool, its groups resolved and
    its test command as pytest options; one that cannot be read is a failed entry."""
    found: list[dict[str, object]] = []
    import shlex

    for kind, is_declared, read in (("nox", nox_declared, nox_source),
                                    ("hatch", hatch_declared, hatch_source)):  # fmt: skip
        if not is_declared(checkout):
            continue
        try:
            source = read(checkout, version, env, confine)
        except DeclarationUnreadable as error:
            found.append({"source": kind, "detail": kind, "unreadable": str(error)})
            continue
        groups = [str(g) for g in source.pop("groups", [])]  # type: ignore[attr-defined]
        if source.get("runner") == UV_SYNC and not source.get("no_default_groups"):
            groups += [g for g in _default_groups(checkout) if g not in groups]  # uv sync's own
        for group in groups:
            source["requirements"] = [*source["requirements"], *_resolve_group(checkout, group)]  # type: ignore[misc]
        invocation = dict(source["invocation"])  # type: ignore[call-overload]
        words = [str(w) for w in invocation["words"]]
        # The options kept where pytest's parser cannot tell them (the old rule, by name).
        source["pytest_args"] = (
            pytest_arguments([shlex.join(["pytest", *words])], checkout)
            if invocation["runner"] == "pytest"
            else unittest_under_pytest(words, str(invocation["workdir"]), checkout)["options"]
        )
        found.append(source)
    return found
