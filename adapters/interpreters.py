"""The interpreters on this machine, and the Python versions a project says it supports.

A matrix gate (`--python 3.11,3.12,3.13` or `auto`) runs each interpreter's own environments
and shards. Interpreters are found where a release engineer's machine keeps them: pyenv's
versions (its shims run only the selected version, so the real binaries are read directly),
`python3.X` on PATH, the gate's own interpreter and uv's managed installs. Each candidate is
asked for its version: a name on PATH is never trusted to be what it says.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PROBE_TIMEOUT_S = 20.0
_LABEL = re.compile(r"^(\d+)\.(\d+)$")
_PROBE = (
    "import json, platform, sys; print(json.dumps({'version': platform.python_version(),"
    " 'implementation': sys.implementation.name}))"
)


@dataclass(frozen=True)
class Interpreter:
    """One interpreter: its label (`3.12`), the executable and its full version."""

    label: str
    path: str
    version: str

    def recorded(self) -> dict[str, str]:
        return {"label": self.label, "path": self.path, "version": self.version}


def label_of(text: str) -> str | None:
    """`3.12` from `3.12`, `py312`, `python3.12`, `3.12.1` or `cp312`; None otherwise."""
    word = text.strip().lower()
    for prefix in ("python", "py", "cp"):
        if word.startswith(prefix):
            word = word[len(prefix) :]
            break
    match = re.fullmatch(r"(\d)\.?(\d+)(\.\d+)?", word)
    if not match:
        return None
    return f"{match.group(1)}.{int(match.group(2))}"


def _probe(path: str) -> tuple[str, str] | None:
    """(full version, implementation) of a working CPython at `path`, or None."""
    try:
        done = subprocess.run(
            [path, "-c", _PROBE], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False,
            stdin=subprocess.DEVNULL, env={k: v for k, v in os.environ.items()
                                           if k not in ("PYTHONPATH", "PYTHONHOME")},
        )  # fmt: skip
        found = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    if done.returncode != 0:
        return None
    return str(found["version"]), str(found["implementation"])


def _pyenv_candidates() -> list[str]:
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found: list[tuple[tuple[int, ...], str]] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    for entry in entries:
        numbers = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", entry.name)
        binary = entry / "bin" / "python3"
        if numbers and binary.is_file():
            found.append((tuple(int(n) for n in numbers.groups()), str(binary)))
    return [path for _, path in sorted(found, reverse=True)]  # newest patch of a minor first


def _path_candidates() -> list[str]:
    found: list[str] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in sorted(names):
            if re.fullmatch(r"python3\.\d+", name):
                found.append(os.path.join(folder, name))
    return found


def _uv_managed(uv: str | None) -> list[str]:
    if not uv:
        return []
    argv = [uv, "python", "list", "--only-installed", "--python-preference", "only-managed",
            "--output-format", "json"]  # fmt: skip
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False,
            env=dict(os.environ, UV_PYTHON_DOWNLOADS="never"),
        )  # fmt: skip
        listed = json.loads(done.stdout.decode() or "[]")
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []
    return [str(item["path"]) for item in listed if isinstance(item, dict) and item.get("path")]


def _guessed_label(path: str) -> str | None:
    """The label a candidate's path names (pyenv's version folder, `python3.12`), if any."""
    for part in reversed(Path(path).parts):
        found = label_of(part)
        if found is not None:
            return found
    return None


def available(uv: str | None = None, wanted: Iterable[str] | None = None) -> dict[str, Interpreter]:
    """Working CPython 3 interpreters, one per `3.X` label (pyenv first, then PATH, the gate's
    own interpreter, uv's managed installs), by label. With `wanted`, only candidates whose
    path names one of those labels (or names none) are asked: each probe costs a process."""
    wanted_set = set(wanted) if wanted is not None else None
    found: dict[str, Interpreter] = {}
    seen: set[str] = set()
    candidates = [*_pyenv_candidates(), *_path_candidates(), sys.executable, *_uv_managed(uv)]
    for path in candidates:
        guess = _guessed_label(path)
        if wanted_set is not None and guess is not None and guess not in wanted_set:
            continue
        if guess is not None and guess in found:
            continue
        real = os.path.realpath(path)
        if real in seen or not os.access(path, os.X_OK):
            continue
        seen.add(real)
        probed = _probe(path)
        if probed is None or probed[1] != "cpython":
            continue
        label = label_of(probed[0])
        if label is not None and label not in found:
            found[label] = Interpreter(label, path, probed[0])
    return dict(sorted(found.items(), key=lambda item: _order(item[0])))


def at(path: str) -> Interpreter | None:
    """The CPython at `path`, or None when it is not one that runs."""
    probed = _probe(path)
    if probed is None or probed[1] != "cpython":
        return None
    label = label_of(probed[0])
    return Interpreter(label, path, probed[0]) if label else None


def _order(label: str) -> tuple[int, int]:
    match = _LABEL.match(label)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def sorted_labels(labels: Iterable[str]) -> list[str]:
    return sorted(set(labels), key=_order)


# --- what a project declares --------------------------------------------------------------


def declared_labels(pyproject: Mapping[str, object], tox_envs: Iterable[str] = ()) -> list[str]:
    """The versions a project names: its classifiers (`Python :: 3.12`) and tox's `py312`
    environments, filtered by `requires-python`; empty when it names none."""
    project = pyproject.get("project")
    project = project if isinstance(project, dict) else {}
    labels: set[str] = set()
    for classifier in project.get("classifiers") or []:
        match = re.fullmatch(r"Programming Language :: Python :: (\d+\.\d+)", str(classifier))
        if match:
            labels.add(match.group(1))
    for env in tox_envs:
        for factor in str(env).split("-"):
            if re.fullmatch(r"py\d{2,3}", factor):
                found = label_of(factor)
                if found:
                    labels.add(found)
    requires = project.get("requires-python")
    return [label for label in sorted_labels(labels) if supports(str(requires or ""), label)]


def supports(requires_python: str, label: str) -> bool:
    """Whether `requires-python` admits the `3.X` line (any of its releases); True when the
    specifier is empty or unreadable (the project then says nothing against it)."""
    if not requires_python.strip():
        return True
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:  # pragma: no cover - packaging comes with pip and pytest
        return True
    try:
        spec = SpecifierSet(requires_python)
    except InvalidSpecifier:
        return True
    return any(spec.contains(f"{label}.{patch}", prereleases=True) for patch in range(0, 40))


def tox_env_list(checkout: str, tox: str | None) -> list[str]:
    """tox's default `env_list`, read by tox's own loader (empty without tox config)."""
    if tox is None:
        return []
    from release_ledger.adapters.executors.env_variables import build_env

    argv = [tox, "config", "--core", "-k", "env_list", "--format", "json", "--no-provision"]
    try:
        done = subprocess.run(
            argv, cwd=checkout, capture_output=True, timeout=120, check=False,
            stdin=subprocess.DEVNULL,
            env=build_env(dict(os.environ)),  # `{env:GITHUB_TOKEN}` in head's tox.ini finds none
        )  # fmt: skip
        core = json.loads(done.stdout.decode("utf-8", "replace")).get("tox", {})
    except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError):
        return []
    envs = core.get("env_list") if isinstance(core, dict) else None
    return [str(e) for e in envs] if isinstance(envs, list) else []
