"""A declared test command, told apart by its runner, and run by the gate under pytest.

A nox session's `session.run(...)`, a hatch script or a tox command names the runner the
project's CI starts: pytest (`pytest`, `python -m pytest`, `coverage run -m pytest`), unittest
(`python -m unittest discover -s pkg -p "*tests.py"`, `python -m unittest test`), or a test
module run as a script (`python test.py`). pytest runs `unittest.TestCase` classes, so a
unittest suite is run under pytest with its own discovery: the start directory as the target
and the file pattern as `-o python_files=PATTERN`. A command that is none of these (a
`runtests.py` of its own, nose, trial) is not a test command the gate can run under pytest:
`None`, and the caller says so and falls back.

Stdlib only and importing nothing of ours: this module is sent to build hosts and pods with
`environment.py` (see `programs.py`).
"""

from __future__ import annotations

import os
import re
import shlex

# Wrappers that run the command after them (`coverage run -m pytest`, `python -X dev -m ...`).
_PYTHON = re.compile(r"^(python(\d(\.\d+)?)?|pypy3?|\{envpython\}|\{python\})$")
_COVERAGE_VALUE_OPTIONS = ("--rcfile", "--source", "--include", "--omit", "--data-file",
                           "--context", "--concurrency", "--debug")  # fmt: skip
# unittest's own discovery default (`python -m unittest`, `python -m unittest discover`).
UNITTEST_PATTERN = "test*.py"
# unittest options that only change its output or its stopping: no pytest counterpart needed.
_UNITTEST_FLAGS = ("-v", "--verbose", "-q", "--quiet", "-b", "--buffer", "-c", "--catch",
                   "-f", "--failfast", "--locals", "--durations")  # fmt: skip


def runner_words(words: list[str]) -> tuple[str, list[str]] | None:
    """(runner, its arguments) of a command line: `pytest` or `unittest` with the words after
    it, `script` with the script's path first; None for anything else."""
    rest = list(words)
    while rest and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", rest[0]):
        rest = rest[1:]  # `env`-style assignments before the command
    if rest and os.path.basename(rest[0]) == "env":
        return runner_words(rest[1:])
    if not rest:
        return None
    head = os.path.basename(rest[0])
    if head in ("pytest", "py.test"):
        return "pytest", rest[1:]
    if head == "coverage" and len(rest) > 1 and rest[1] == "run":
        return _after_interpreter_options(rest[2:], _COVERAGE_VALUE_OPTIONS)
    if _PYTHON.match(head):
        return _after_interpreter_options(rest[1:], ("-X", "-W", "-c"))
    return None


def _after_interpreter_options(
    rest: list[str], with_value: tuple[str, ...]
) -> tuple[str, list[str]] | None:
    index = 0
    while index < len(rest):
        word = rest[index]
        if word == "-m" and index + 1 < len(rest):
            module, args = rest[index + 1], rest[index + 2 :]
            if module in ("pytest", "py.test"):
                return "pytest", args
            if module == "unittest":
                return "unittest", args
            return None
        if word.startswith("-m") and len(word) > 2:
            return _after_interpreter_options([word[:2], word[2:], *rest[index + 1 :]], with_value)
        if word == "-c":
            return None  # a program given inline: nothing the gate can run under pytest
        if word.startswith("-"):
            index += 2 if word in with_value else 1
            continue
        return "script", rest[index:]
    return None


def is_test_command(words: list[str]) -> bool:
    """Whether a command line runs a test runner the gate can run under pytest."""
    return declared(words, "") is not None


def declared(words: list[str], workdir: str) -> dict[str, object] | None:
    """The declared invocation of a test command run in `workdir` (relative to the checkout):
    `runner` and `words` (its arguments after the runner's name), as
    `invocation_source.resolved` reads them. A test module run as a script (`python test.py`)
    is unittest given that module. None when the command is not one the gate can run under
    pytest."""
    found = runner_words(words)
    if found is None:
        return None
    runner, args = found
    if runner == "script":
        if not re.fullmatch(r"test[^/]*\.py", os.path.basename(args[0])):
            return None  # a script of its own (runtests.py): not a test module pytest collects
        runner, args = "unittest", args[:1]
    return {"runner": runner, "workdir": workdir, "words": list(args)}


def unittest_under_pytest(words: list[str], workdir: str, checkout: str) -> dict[str, object]:
    """A unittest command's arguments as pytest runs the same suite: `options` (its file
    pattern as `-o python_files=PATTERN`), `targets` (the start directory, or the named
    modules, classes and methods as paths and node ids, relative to the checkout),
    `start_directory` and `pattern`. pytest runs `unittest.TestCase` classes itself."""
    args = [a for a in words if a not in _UNITTEST_FLAGS]
    if not args or args[0] == "discover":
        start, pattern, positional = ".", UNITTEST_PATTERN, []
        rest = args[1:]
        index = 0
        while index < len(rest):
            word = rest[index]
            value = rest[index + 1] if index + 1 < len(rest) else None
            if word in ("-s", "--start-directory") and value is not None:
                start, index = value, index + 2
            elif word in ("-p", "--pattern") and value is not None:
                pattern, index = value, index + 2
            elif word in ("-t", "--top-level-directory", "-k") and value is not None:
                index += 2
            else:
                positional += [] if word.startswith("-") else [word]
                index += 1
        start = positional[0] if positional else start
        pattern = positional[1] if len(positional) > 1 else pattern
        target = _in_checkout(start, workdir)
        return {"options": ["-o", f"python_files={pattern}"], "targets": [{"path": target}],
                "start_directory": target, "pattern": pattern}  # fmt: skip
    here = os.path.join(checkout, workdir)
    targets: list[str] = []
    for name in args:
        if name.startswith("-"):
            continue
        if name.endswith(".py") or "/" in name:
            targets.append(_in_checkout(name, workdir))
            continue
        module, inner = _module_path(name, here)
        node = "::" + inner.replace(".", "::") if inner else ""
        targets.append(_in_checkout(module, workdir) + node)
    files = sorted({os.path.basename(t.split("::", 1)[0]) for t in targets if ".py" in t})
    pattern = " ".join(files)
    return {"options": ["-o", f"python_files={pattern}"] if files else [],
            "targets": [{"path": t} for t in targets], "pattern": pattern}  # fmt: skip


def _in_checkout(path: str, workdir: str) -> str:
    return os.path.normpath(os.path.join(workdir, path)).replace(os.sep, "/")


def _module_path(dotted: str, here: str) -> tuple[str, str]:
    """A dotted unittest name as (file or package path, the rest: class and method); the
    longest prefix that names a module file or a package folder in `here` wins."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = "/".join(parts[:cut])
        if os.path.isfile(os.path.join(here, base + ".py")):
            return base + ".py", ".".join(parts[cut:])
        if os.path.isdir(os.path.join(here, base)):
            return base, ".".join(parts[cut:])
    return "/".join(parts) + ".py", ""


def command_line(words: list[str]) -> str:
    """A command as one line, the way `ledger show` and tox's `commands` write it."""
    return shlex.join(words)
