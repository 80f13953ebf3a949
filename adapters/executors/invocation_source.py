"""The test invocation a declaration names, read by the tools that own it.

Stdlib-only and importing nothing of ours, like `environment.py` (sent with it to SSH hosts
and pods, concatenated before it). Three steps, each by the owner's own machinery:

- which tox environment: the one of `env_list` whose Python factor tox reads as this
  interpreter (its `base_python`) and whose commands run the tests, else one of `env_list`
  without a Python factor that runs them, else tox's ad-hoc `py311`; its factor conditions
  (`extras = tests: tests`) and `{posargs:DEFAULT}` defaults are applied by tox (`tox config`);
- which words of its test command are options and which are targets: pytest's own argument
  parser, with the revision's plugins and conftests loaded, in the revision's environment
  (`PROBE`), never whether a word names an existing path;
- what those words name: a path in the checkout (relative to it), or one inside the tox
  environment's site-packages (the installed package: `{site-packages}/pkg`).

The result is a JSON-able dict with the fields of `domain/invocation.TestInvocation`.
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
    from release_ledger.adapters.executors.runners import declared, unittest_under_pytest

if TYPE_CHECKING:  # the module also runs on build hosts' older interpreters: no run-time alias
    from collections.abc import Callable, Sequence

    Confine = Callable[[list[str], str | None, list[str]], list[str]]

INSTALLED_PREFIX = "{site-packages}/"  # as `domain/invocation.INSTALLED_PREFIX`
POSARGS_SENTINEL = "@@release-ledger-posargs@@"
PROBE_TIMEOUT_S = 180.0
_PYTHON_SPEC = re.compile(r"^(?:py|python|cpython)?(\d)\.?(\d+)$")
_RUNNER_WORDS = ("pytest", "py.test")


class InvocationUnreadable(Exception):
    """The declaration's command could not be read; the message is one line for the ledger."""


def spec_version(spec: str) -> str | None:
    """`3.11` for a Python spec tox derived from a factor (`py311`, `3.11`, `cpython3.11`);
    None for an interpreter path (an environment without a Python factor)."""
    match = _PYTHON_SPEC.match(spec.strip())
    return f"{match.group(1)}.{match.group(2)}" if match else None


def runs_tests(commands: Sequence[str]) -> bool:
    """Whether a tox environment's commands run a test runner."""
    return any(command_runner(line) is not None for line in commands)


def command_runner(line: str) -> tuple[str, list[str]] | None:
    """(runner, its arguments) of one command line: `pytest ...`, `python -m pytest ...`,
    `coverage run [...] -m pytest ...`, `python -m unittest ...`; None for anything else."""
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    for index, word in enumerate(words):
        if os.path.basename(word) in _RUNNER_WORDS:
            return "pytest", words[index + 1 :]
        if word == "-m" and index + 1 < len(words):
            module = words[index + 1]
            if module in _RUNNER_WORDS:
                return "pytest", words[index + 2 :]
            if module == "unittest":
                return "unittest", words[index + 2 :]
    found = declared(words, "")  # a test module run as a script: `python test.py`
    return (str(found["runner"]), [str(w) for w in found["words"]]) if found else None  # type: ignore[attr-defined]


def choose_tox_env(found: dict[str, dict[str, object]], version: str) -> str | None:
    """Of `env_list` (tox's `config` answer, in its order), the environment for `version`:
    its Python factor is this interpreter and its commands run the tests; else one without a
    Python factor that runs them. None: ask tox for its ad-hoc environment."""
    wanted = ".".join(version.split(".")[:2])
    factorless = None
    for name, values in found.items():
        commands = values.get("commands")
        if not isinstance(commands, list) or not runs_tests([str(c) for c in commands]):
            continue
        specs = values.get("base_python")
        versions = [spec_version(str(s)) for s in specs] if isinstance(specs, list) else []
        if wanted in versions:
            return name
        if factorless is None and not any(versions):
            factorless = name
    return factorless


def tox_candidates(found: dict[str, dict[str, object]], version: str) -> list[str]:
    """Of `env_list` (names and `base_python` as tox read them), those this interpreter can
    be: its Python factor's first, then those without a Python factor, each in tox's order."""
    wanted = ".".join(version.split(".")[:2])
    matching, factorless = [], []
    for name, values in found.items():
        specs = values.get("base_python")
        versions = [spec_version(str(s)) for s in specs] if isinstance(specs, list) else []
        if wanted in versions:
            matching.append(name)
        elif not any(versions):
            factorless.append(name)
    return [*matching, *factorless]


def posargs_default(with_defaults: list[str], with_sentinel: list[str]) -> list[str]:
    """The words tox put for `{posargs:DEFAULT}`: where the sentinel stands in the same
    command read with posargs given."""
    if POSARGS_SENTINEL not in with_sentinel:
        return []
    at = with_sentinel.index(POSARGS_SENTINEL)
    after = len(with_sentinel) - at - 1
    end = len(with_defaults) - after
    return with_defaults[at:end] if end >= at else []


def relative_word(word: str, checkout: str, site_dir: str, workdir: str) -> str:
    """A word of the command as the invocation records it: a path in the tox environment's
    site-packages as `{site-packages}/...`, an absolute path in the checkout relative to it
    (where it follows an option's `=` or a `KIND:` prefix too: the recorded invocation names
    no folder of the build's clone), anything else as written."""
    real_checkout = os.path.realpath(checkout)
    for value in (word, word.split("=", 1)[-1]):
        if not os.path.isabs(value):
            continue
        if site_dir and (value == site_dir or value.startswith(site_dir.rstrip("/") + "/")):
            inner = os.path.relpath(value, site_dir)
            return word.replace(value, INSTALLED_PREFIX + inner.replace(os.sep, "/"))
        real = os.path.realpath(value)
        if real == real_checkout or real.startswith(real_checkout + os.sep):
            rel = os.path.relpath(real, os.path.join(real_checkout, workdir))
            return word.replace(value, rel.replace(os.sep, "/"))
    # a path in the checkout after a prefix (pytest-cov's `html:/checkout/.tox/htmlcov`)
    for root in dict.fromkeys((checkout.rstrip(os.sep), real_checkout)):
        at = word.find(root + os.sep)
        if at > 0 and word[at - 1] in ":=,":
            real = os.path.realpath(word[at:])
            if real.startswith(real_checkout + os.sep):
                rel = os.path.relpath(real, os.path.join(real_checkout, workdir))
                return word[:at] + rel.replace(os.sep, "/")
    return word


def tox_invocation(
    checkout: str, name: str, commands: list[str], sentinel_commands: list[str],
    change_dir: str, site_dir: str, set_env: dict[str, str],
) -> dict[str, object]:  # fmt: skip
    """The invocation tox environment `name` declares (its options and targets not yet told
    apart: `words`); raises `InvocationUnreadable` when none of its commands runs a runner."""
    for index, line in enumerate(commands):
        found = command_runner(line)
        if found is None:
            continue
        runner, words = found
        sentinel_words: list[str] = []
        if index < len(sentinel_commands):
            again = command_runner(sentinel_commands[index])
            sentinel_words = again[1] if again else []
        real_checkout = os.path.realpath(checkout)
        real_change = os.path.realpath(change_dir) if change_dir else real_checkout
        workdir = ""
        if real_change != real_checkout and real_change.startswith(real_checkout + os.sep):
            workdir = os.path.relpath(real_change, real_checkout).replace(os.sep, "/")
        words = [relative_word(w, checkout, site_dir, workdir) for w in words]
        invocation: dict[str, object] = {
            "runner": runner,
            "source": f"tox:{name}",
            "workdir": workdir,
            "words": words,
            "env": dict(set_env),
            "posargs": posargs_default(words, sentinel_words),
        }
        if runner == "unittest":
            invocation.update(unittest_discovery(words))
        return invocation
    raise InvocationUnreadable(f"no command of tox env {name} runs pytest or unittest")


def unittest_discovery(words: list[str]) -> dict[str, object]:
    """`discover`'s start directory and pattern (`-s`, `-p`, or the positional forms)."""
    found: dict[str, object] = {"start_directory": "", "pattern": ""}
    if not words or words[0] != "discover":
        return found
    rest = words[1:]
    positional: list[str] = []
    index = 0
    while index < len(rest):
        word = rest[index]
        if word in ("-s", "--start-directory", "-p", "--pattern", "-t", "--top-level-directory"):
            value = rest[index + 1] if index + 1 < len(rest) else ""
            if word in ("-s", "--start-directory"):
                found["start_directory"] = value
            elif word in ("-p", "--pattern"):
                found["pattern"] = value
            index += 2
            continue
        if not word.startswith("-"):
            positional.append(word)
        index += 1
    if positional and not found["start_directory"]:
        found["start_directory"] = positional[0]
    if len(positional) > 1 and not found["pattern"]:
        found["pattern"] = positional[1]
    return found


# Run with the revision's interpreter, in the invocation's working directory: pytest's own
# parser, with the plugins the environment installs and the conftests its targets load,
# tells which words are targets (a word replaced by a probe that comes back among pytest's
# positional arguments) and which are options or their values.
PROBE = r"""
import json, sys
words = json.loads(sys.argv[1])
out = {"positional": [], "error": ""}
try:
    import pytest
    from _pytest.config import _prepareconfig
    config = _prepareconfig(list(words))
except BaseException as error:
    out["error"] = "pytest cannot parse the declared arguments: %s" % (
        str(error).strip().splitlines() or [type(error).__name__])[-1]
    print(json.dumps(out)); sys.exit(0)
probe = "release-ledger-probe-9f3c"  # no "@": pytest reads @file arguments
for index, word in enumerate(words):
    if word.startswith("-") and word != "-":
        continue
    trial = list(words); trial[index] = probe
    try:
        namespace = config._parser.parse_known_args(trial)
    except BaseException:
        continue
    if probe in [str(p) for p in getattr(namespace, "file_or_dir", None) or []]:
        out["positional"].append(index)
plugins = sorted({str(getattr(d, "project_name", "") or getattr(d, "metadata", {}).get("name", ""))
                  for _, d in config.pluginmanager.list_plugin_distinfo()} - {""})
out["parsed_by"] = "pytest %s" % pytest.__version__ + (
    " with " + ", ".join(plugins) if plugins else "")
try:
    config._ensure_unconfigure()
except BaseException:
    pass
print(json.dumps(out))
"""


def split_by_pytest(
    python: str, words: list[str], cwd: str, env: dict[str, str], confine: Confine | None = None
) -> tuple[list[str], list[str], str]:
    """(options, targets, parsed_by) of `words` as the environment's pytest parses them;
    raises `InvocationUnreadable` when it cannot."""
    argv = [python, "-c", PROBE, json.dumps(words)]
    if confine is not None:
        argv = confine(argv, cwd, [])
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
            timeout=PROBE_TIMEOUT_S, check=False,
        )  # fmt: skip
        answer = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as error:
        raise InvocationUnreadable(f"pytest's parser could not be run: {error}") from None
    if answer.get("error"):
        raise InvocationUnreadable(str(answer["error"])[:300])
    chosen = {int(i) for i in answer.get("positional", [])}
    options = [w for i, w in enumerate(words) if i not in chosen]
    targets = [w for i, w in enumerate(words) if i in chosen]
    return options, targets, str(answer.get("parsed_by", ""))


def resolved(
    invocation: dict[str, object], python: str, checkout: str, env: dict[str, str],
    confine: Confine | None = None,
) -> dict[str, object]:  # fmt: skip
    """`invocation` (from `tox_invocation`) with its words told apart by pytest's parser in
    the revision's environment: `options` and `targets` (`{"path", "installed"}` each)."""
    found = {k: v for k, v in invocation.items() if k != "words"}
    words = [str(w) for w in invocation.get("words", [])]  # type: ignore[attr-defined]
    if invocation.get("runner") == "unittest":  # run under pytest (`runners.py`)
        found.update(unittest_under_pytest(words, str(invocation.get("workdir") or ""), checkout))
        return found
    if invocation.get("runner") != "pytest":
        found.update(options=words, targets=[])
        return found
    cwd = os.path.join(checkout, str(invocation.get("workdir") or ""))
    os.makedirs(cwd, exist_ok=True)  # tox makes `changedir` (`.tox`) before running in it
    options, targets, parsed_by = split_by_pytest(python, words, cwd, env, confine)
    found.update(options=options, parsed_by=parsed_by, targets=[
        target_of(t, str(invocation.get("workdir") or "")) for t in targets
    ])  # fmt: skip
    return found


def target_of(word: str, workdir: str) -> dict[str, object]:
    """One target as the invocation records it: relative to the checkout, or installed."""
    if word.startswith(INSTALLED_PREFIX):
        return {"path": word[len(INSTALLED_PREFIX) :].strip("/") or ".", "installed": True}
    path, sep, rest = word.partition("::")
    joined = os.path.normpath(os.path.join(workdir, path)).replace(os.sep, "/")
    return {"path": joined + sep + rest, "installed": False}


def tox_env_python_path(python: str, env: dict[str, str]) -> dict[str, str]:
    """`env` with the interpreter's folder first on PATH, so tox finds it for its factor."""
    if not os.path.isabs(python):
        return env
    folder = os.path.dirname(python)
    return dict(env, PATH=os.pathsep.join([folder, env.get("PATH", "")]))
