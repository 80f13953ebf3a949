"""Content keys: what makes an earlier observation of a test file valid for this gate.

A file's measurement (seconds, memory) or result is reused only when what produced it is the
same: the file's own bytes (its git blob hash), the environment it ran in, and the command.
A path alone is not enough (the file may have changed), so every key here is built from
content. Pure: callers pass git's blob hashes in.

The environment key is known before anything is built: it is a digest of the `--env`
setting, the interpreter's version and the blobs of every file the per-revision environment
reads its dependencies from (`adapters/executors/environment.py`), so two commits whose
dependency declarations are equal share it, and a changed `pyproject.toml` changes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

# The project files and test requirement files the environment adapter reads (kept equal to
# its constants by tests/test_content_keys.py).
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
REQUIREMENT_FILES = (
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
REQUIREMENT_GLOBS = (("requirements", "test"), (".", "requirements-test"))
LOCK_FILES = ("uv.lock",)
KEY_FORMAT = 1  # bump when a key's inputs change: earlier keys then never match


def declares_environment(path: str) -> bool:
    """Whether a repository file is one the per-revision environment reads its dependencies
    from (so its content belongs in the environment key)."""
    if path in PROJECT_FILES or path in REQUIREMENT_FILES or path in LOCK_FILES:
        return True
    folder, _, name = path.rpartition("/")
    for glob_folder, prefix in REQUIREMENT_GLOBS:
        if (folder or ".") == glob_folder and name.startswith(prefix) and name.endswith(".txt"):
            return True
    return False


def _digest(parts: object) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def environment_key(setting: str, python_version: str, blobs: Mapping[str, str]) -> str:
    """The environment a revision's tests run in, as far as results can tell: the `--env`
    setting, the interpreter version and the dependency declarations among `blobs` (all of a
    commit's files mapped to their blob hashes; the others are ignored)."""
    declared = {path: blob for path, blob in blobs.items() if declares_environment(path)}
    if setting == "none":
        declared = {}  # the gate's own interpreter: the project's declarations are not read
    return _digest(
        {"format": KEY_FORMAT, "env": setting, "python": python_version, "declared": declared}
    )


def sourced_environment(environment: str, skipped: Sequence[str]) -> str:
    """The key results are made in: `environment` and the declared sources the run passed by
    (rejected earlier: the executor made the environment from the next one). Two sources of one
    commit share `environment` but not their invocation (tox's `changedir` and options, a nox
    session's, a hatch script's, the group fallback's plain pytest), so one source's results
    never answer for another's. Every result key goes through it: an entry recorded before
    (keyed by `environment` alone, whatever source made it) never matches again."""
    return _digest({"format": KEY_FORMAT, "env": environment, "skipped": sorted(set(skipped))})


def command_key(command: Sequence[str]) -> str:
    """The test command as recorded (placeholders unexpanded)."""
    return _digest({"format": KEY_FORMAT, "command": list(command)})


def measurement_key(blob: str, environment: str, command: str) -> str:
    """What a file's measurement (seconds, memory) is reused by: its bytes, its environment
    and the command (a changed file, dependency or command is measured again)."""
    return _digest({"format": KEY_FORMAT, "blob": blob, "env": environment, "cmd": command})


def result_key(commit: str, blob: str, environment: str, command: str, reader: str) -> str:
    """What a file's test results at a commit are reused by: the commit (so every import of
    the file is the same code), its bytes, environment, command and the reader's version
    (a reader change that could read the same report differently invalidates the cache)."""
    return _digest(
        {
            "format": KEY_FORMAT,
            "commit": commit,
            "blob": blob,
            "env": environment,
            "cmd": command,
            "reader": reader,
        }
    )
