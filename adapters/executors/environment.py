"""Per-revision test environments: each revision's tests import that revision's own code.

Stdlib-only and importing nothing of ours but `env_lock` (sent before it), because the same
code prepares environments on this machine (imported), on SSH build hosts and in Kubernetes
pods (its source is sent as part of the program those run). `prepare(...)` returns one
JSON-able dict that the executor turns into the `EnvironmentPrepared` event.

How an installable revision (`--env auto`) is prepared, the way its own CI would:

1. Its project is built into a wheel (`uv build`, or `pip wheel`), cached per commit; the
   checkout is cleaned afterwards (`git clean`), so build leftovers never reach the tests.
2. Its test environment comes from the first *declared source* that installs, in this order
   (`PRECEDENCE`): tox's test environment for this interpreter (`py311`), read by tox's own
   loader (`tox config`: deps, extras, dependency_groups, set_env and the pytest options of
   its commands); nox's test session, run by nox with its commands captured
   (`nox_reader.py`); hatch's test environment and script, read by hatch
   (`hatch_reader.py`); the first PEP 735 group named test/tests/testing/dev (include-group
   resolved); the first test extra; one test requirements file (the variant for this
   interpreter when one exists, such as `requirements/tests311.txt`; a dev file only where
   there is no test file); pytest alone. Never a union of unrelated files. A `uv.lock`
   constrains a source to its pins only where the tool that installs it reads the lock
   (`env_lock`: tox-uv's lock runner, `uv sync` in a project uv manages), recorded either way.
   Extras the project needs (`extras`) are installed with the project whatever the source.
3. Each (revision, source) gets its own virtual environment, built where it stays (so its
   console scripts run from there), with the revision's wheel really installed, so every
   process the suite starts (a server fixture, a CLI test with an environment of its own)
   imports the revision's code as after `pip install`. uv's cache
   and hard links make that venv cheap; `deps_key` names the dependency layer, shared by
   revisions whose declarations did not change. A source that does not install is recorded
   (`tried`, with its log's end) and the next one is tried; the first source with a ready
   cached environment is reused without trying the ones before it again.
4. The revision's top-level packages are resolved with the environment's interpreter, and a
   package that resolves outside the environment or the checkout is a warning.

The cache is bounded: past `max_bytes`, the least recently used entries are removed.
`--env COMMAND` runs the user's own setup command (`{python}`, `{venv}` placeholders, an
argument list, no shell) in a fresh virtual environment per revision; `--env none` uses the
interpreter given, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import TYPE_CHECKING

# On this machine; on a host the module is concatenated after these, already defined.
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.invocation_source import (
        POSARGS_SENTINEL,
        InvocationUnreadable,
        choose_tox_env,
        resolved,
        tox_candidates,
        tox_invocation,
    )

if TYPE_CHECKING:  # the module also runs on build hosts' older interpreters: no run-time alias
    from collections.abc import Callable

# On the gate's machine; on hosts and in pods the program's earlier part defines them.
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.env_lock import LOCK_FILE, LOCK_RUNNER, lock_use
    from release_ledger.adapters.executors.hatch_reader import hatch_declared, hatch_source
    from release_ledger.adapters.executors.nox_reader import (
        DeclarationUnreadable,
        nox_declared,
        nox_source,
    )
    from release_ledger.adapters.executors.runners import unittest_under_pytest

FORMAT = 4  # bump when the layout or the key's inputs change (4: venvs built in place)
TEST_EXTRAS = ("test", "tests", "testing", "dev")
# Read through the build (their dependency declarations reach the key as the wheel's metadata).
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
STEP_TIMEOUT_S = 1800.0
LOG_TAIL_BYTES = 16 * 1024
DEFAULT_MAX_BYTES = 8 * 1024**3
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


class SetupFailed(Exception):
    """A step of the setup failed; the message says which, the log holds the output."""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installable(checkout: str) -> bool:
    """A Python project a build backend can turn into a wheel."""
    if os.path.isfile(os.path.join(checkout, "setup.py")):
        return True
    if os.path.isfile(os.path.join(checkout, "setup.cfg")):
        return True
    text = _checkout_text(checkout, "pyproject.toml")
    return bool(re.search(r"^\s*\[(project|build-system)\]", text, re.MULTILINE))


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
    return _read_text(path) if path else ""


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return ""


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


# Runs one build step's command confined: (argv, cwd, folders it may write besides the
# checkout and the installers' caches) -> argv to run. An executor that can sandbox builds
# gives one to `prepare` (the local one: bubblewrap); without, steps run as given.
if TYPE_CHECKING:
    Confine = Callable[[list[str], str | None, list[str]], list[str]]


def _confined(
    confine: Confine | None, argv: list[str], cwd: str | None, writable: list[str] | None = None
) -> list[str]:
    return confine(argv, cwd, list(writable or ())) if confine is not None else argv


class Installer:
    """uv where it can be found (an order of magnitude faster, one shared cache), else pip.
    Every step is the project's code or runs it (a build backend, tox's loader, a setup
    command): it sees the build environment (`build_env`) and runs `confine`d."""

    def __init__(
        self,
        python: str,
        uv: str | None,
        log: str,
        env: dict[str, str],
        confine: Confine | None = None,
    ) -> None:
        self.python = python
        self.uv = uv
        self.log = log
        self.confine = confine
        # The staging folders being built (a venv, a wheel): the only part of the environments
        # cache a confined step may write, so no build reaches another revision's environment.
        self.writable: list[str] = []
        self.env = dict(env, UV_PYTHON_DOWNLOADS="never", PIP_DISABLE_PIP_VERSION_CHECK="1")
        self.env.pop("VIRTUAL_ENV", None)
        self.env.pop("PYTHONPATH", None)

    def staging(self, entry: str) -> str:
        """A fresh folder beside `entry` to build it in (published by renaming), which the
        confined steps may write. For files only: a venv is built `in_place`."""
        folder = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(entry))
        self.writable.append(folder)
        return folder

    def in_place(self, entry: str) -> str:
        """`entry` itself, emptied, to build a virtual environment in (the caller holds its
        lock): a venv bakes its own path into what it holds (console scripts' shebangs,
        `activate`, `pyvenv.cfg`, whatever a setup command writes), so it is made where it
        stays, and `_publish` then writes `ready.json` last instead of renaming the folder."""
        shutil.rmtree(entry, ignore_errors=True)  # a build that died before `ready.json`
        os.makedirs(entry)
        self.writable.append(entry)
        return entry

    def take_log_tail(self) -> str:
        """The log's end since the last call (one source's install), then a fresh log."""
        try:
            with open(self.log, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
                tail = handle.read().decode("utf-8", "replace")
            with open(self.log, "wb"):
                pass
        except OSError:
            return ""
        return tail

    @property
    def how(self) -> str:
        return "uv" if self.uv else "pip"

    def step(self, argv: list[str], cwd: str | None = None) -> tuple[int | None, str, str]:
        """Run one step with its command, stderr and stdout in the log; never raises:
        (exit code or None when it could not run or timed out, stdout, error)."""
        with open(self.log, "ab") as log:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            try:
                done = subprocess.run(
                    _confined(self.confine, argv, cwd, self.writable), cwd=cwd, env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=log, timeout=STEP_TIMEOUT_S, check=False,
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as error:
                log.write(f"{error}\n".encode())
                return None, "", str(error)
            log.write(done.stdout)
        out = done.stdout.decode("utf-8", "replace")
        return done.returncode, out, "" if done.returncode == 0 else f"exit {done.returncode}"

    def run(self, argv: list[str], *, cwd: str | None = None, what: str = "") -> str:
        code, out, error = self.step(argv, cwd)
        if code is None:
            raise SetupFailed(f"{what or argv[0]}: {error}")
        if code != 0:
            raise SetupFailed(f"{what or argv[0]} failed (exit {code})")
        return out

    def venv(self, path: str) -> str:
        if self.uv:
            self.run([self.uv, "venv", "-q", "--python", self.python, path], what="uv venv")
        else:
            self.run([self.python, "-m", "venv", path], what="python -m venv")
        return os.path.join(path, "bin", "python")

    def wheel(self, checkout: str, out_dir: str) -> str:
        if self.uv:
            argv = [self.uv, "build", "-q", "--wheel", "--python", self.python, "-o", out_dir]
            self.run([*argv, checkout], what="building the project")
        else:
            argv = [self.python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out_dir]
            self.run([*argv, checkout], what="building the project")
        wheels = [name for name in os.listdir(out_dir) if name.endswith(".whl")]
        if len(wheels) != 1:
            raise SetupFailed(f"building the project gave {len(wheels)} wheels, not one")
        return os.path.join(out_dir, wheels[0])

    exclude_newer = ""  # resolve as the index stood then (uv's --exclude-newer)

    def install(self, python: str, args: list[str], what: str, pinned: bool = False) -> None:
        """Install `args`; unless a lock `pinned` them, as the index stood at `exclude_newer`."""
        if self.uv:
            snapshot = ["--exclude-newer", self.exclude_newer] if self.exclude_newer else []
            argv = [self.uv, "pip", "install", "-q", "--python", python]
            self.run([*argv, *([] if pinned else snapshot), *args], what=what)
        else:
            self.run([python, "-m", "pip", "install", "-q", *args], what=what)

    def uninstall(self, python: str, name: str) -> None:
        if self.uv:
            self.run([self.uv, "pip", "uninstall", "-q", "--python", python, name], what="uv")
        else:
            self.run([python, "-m", "pip", "uninstall", "-q", "-y", name], what="pip")

    def freeze(self, python: str) -> str:
        if self.uv:
            return self.run([self.uv, "pip", "freeze", "--python", python], what="uv pip freeze")
        return self.run([python, "-m", "pip", "freeze", "--all"], what="pip freeze")

    def export_lock(self, checkout: str) -> str | None:
        """`uv.lock` as pinned requirements, every extra and group (None without uv or when
        it does not export): constraints, so each source installs only what it names."""
        if not self.uv:
            return None
        argv = [self.uv, "export", "--frozen", "--no-emit-project", "--no-hashes",
                "--format", "requirements-txt", "--all-extras", "--all-groups"]  # fmt: skip
        try:
            return self.run(argv, cwd=checkout, what="uv export")
        except SetupFailed:
            return None


def find_uv(explicit: str | None = None) -> str | None:
    """The uv binary: given, beside this interpreter, on PATH, or from the `uv` package."""
    candidates = [explicit, os.path.join(os.path.dirname(sys.executable), "uv"), shutil.which("uv")]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    with contextlib.suppress(Exception):
        import uv  # type: ignore[import-not-found,unused-ignore]

        found = str(uv.find_uv_bin())
        return found if os.path.isfile(found) else None
    return None


def _wheel_metadata(wheel: str) -> tuple[str, list[str], list[str], list[str]]:
    """(name, Requires-Dist, Provides-Extra, top-level packages) read from a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta_name).decode("utf-8", "replace")
        top_name = meta_name.replace("METADATA", "top_level.txt")
        tops = set()
        if top_name in names:
            tops = {t.strip() for t in archive.read(top_name).decode().splitlines() if t.strip()}
        else:
            for member in names:
                first = member.split("/", 1)[0]
                if first.endswith((".dist-info", ".data")):
                    continue
                if "/" in member or member.endswith(".py"):
                    tops.add(first[:-3] if first.endswith(".py") else first)
    headers = text.split("\n\n", 1)[0]
    name = re.search(r"^Name:\s*(.+)$", headers, re.MULTILINE)
    requires = re.findall(r"^Requires-Dist:\s*(.+)$", headers, re.MULTILINE)
    extras = re.findall(r"^Provides-Extra:\s*(.+)$", headers, re.MULTILINE)
    tops = {t for t in tops if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t)}
    return (
        name.group(1).strip() if name else "",
        sorted(r.strip() for r in requires),
        [e.strip() for e in extras],
        sorted(tops),
    )


def _key(parts: dict[str, object]) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _interpreter(python: str, installer: Installer) -> dict[str, str]:
    code = (
        "import json, platform, sys; print(json.dumps({'version': platform.python_version(),"
        " 'implementation': sys.implementation.name, 'platform': sys.platform,"
        " 'machine': platform.machine(), 'executable': sys.executable}))"
    )
    out = installer.run([python, "-c", code], what=f"inspecting {python}")
    found: dict[str, str] = json.loads(out.strip().splitlines()[-1])
    return found


def _size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@contextlib.contextmanager
def _locked(cache: str, name: str):  # type: ignore[no-untyped-def]
    """One builder per cache entry across processes; others wait, then reuse its result."""
    os.makedirs(os.path.join(cache, "locks"), exist_ok=True)
    with open(os.path.join(cache, "locks", name), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ready(entry: str) -> dict[str, object] | None:
    try:
        with open(os.path.join(entry, "ready.json"), encoding="utf-8") as handle:
            found: dict[str, object] = json.load(handle)
    except (OSError, ValueError):
        return None
    with contextlib.suppress(OSError):
        os.utime(os.path.join(entry, "ready.json"))  # least recently *used*
    return found


def _publish(staging: str, entry: str, meta: dict[str, object]) -> None:
    """Make a built entry ready: `ready.json` written whole (renamed into place), then the
    staging folder renamed to `entry`, unless it was built `in_place`."""
    meta["bytes"] = _size(staging)
    stamp = os.path.join(staging, "ready.json")
    with open(stamp + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(meta, handle, sort_keys=True)
    os.replace(stamp + ".tmp", stamp)
    if os.path.abspath(staging) != os.path.abspath(entry):
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(staging, entry)


def prune(cache: str, max_bytes: int, keep: tuple[str, ...] = ()) -> list[str]:
    """Remove least recently used entries until the cache holds at most `max_bytes`."""
    entries = []
    for kind in ("envs", "projects"):
        folder = os.path.join(cache, kind)
        with contextlib.suppress(OSError):
            for name in os.listdir(folder):
                path = os.path.join(folder, name)
                stamp = os.path.join(path, "ready.json")
                with contextlib.suppress(OSError, ValueError):
                    with open(stamp, encoding="utf-8") as handle:
                        size = int(json.load(handle).get("bytes", 0))
                    entries.append((os.path.getmtime(stamp), path, size))
    total = sum(size for _, _, size in entries)
    removed = []
    for _, path, size in sorted(entries):
        if total <= max_bytes:
            break
        if path in keep:
            continue
        shutil.rmtree(path, ignore_errors=True)
        total -= size
        removed.append(path)
    return removed


def _clean_checkout(checkout: str, installer: Installer) -> None:
    """Build leftovers (build/, *.egg-info) out of the checkout the tests will run in."""
    if os.path.exists(os.path.join(checkout, ".git")):
        with contextlib.suppress(SetupFailed):
            installer.run(["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
                           "-C", checkout, "clean", "-ffdxq"], what="git clean")  # fmt: skip


def _build_project(
    checkout: str, commit: str, cache: str, installer: Installer, tag: str
) -> tuple[str, dict[str, object], bool]:
    """The revision's built wheel (cached per commit), its metadata, and whether reused."""
    entry = os.path.join(cache, "projects", f"{commit or _key({'path': checkout})}-{tag}")
    found = _ready(entry) if commit else None
    if found is not None:
        return os.path.join(entry, "wheel", str(found.get("wheel"))), found, True
    with _locked(cache, os.path.basename(entry)):
        found = _ready(entry) if commit else None
        if found is not None:
            return os.path.join(entry, "wheel", str(found.get("wheel"))), found, True
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        staging = installer.staging(entry)
        try:
            wheel = installer.wheel(checkout, os.path.join(staging, "wheel"))
            _clean_checkout(checkout, installer)
            name, requires, extras, tops = _wheel_metadata(wheel)
            meta: dict[str, object] = {
                "name": name,
                "requires": requires,
                "extras": extras,
                "top_level": tops,
                "wheel": os.path.basename(wheel),
                "wheel_sha256": _sha256_file(wheel),
            }
            _publish(staging, entry, meta)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            _clean_checkout(checkout, installer)
            raise
    return os.path.join(entry, "wheel", str(meta["wheel"])), meta, False


def _choose_extra(extras: list[str]) -> str | None:
    by_normal = {_normal(e): e for e in extras}
    return next((by_normal[name] for name in TEST_EXTRAS if name in by_normal), None)


def _import_check(
    python: str,
    tops: list[str],
    overlay: str,
    checkout: str,
    env: dict[str, str],
    confine: Confine | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Where each top-level package resolves for the tests; warnings for any outside."""
    if not tops:
        return {}, []
    code = (
        "import importlib.util, json, sys\n"
        "found = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        spec = importlib.util.find_spec(name)\n"
        "    except Exception as error:\n"
        "        found[name] = 'error: %s' % error; continue\n"
        "    if spec is None: found[name] = ''; continue\n"
        "    locs = list(spec.submodule_search_locations or [])\n"
        "    found[name] = spec.origin if spec.origin not in (None, 'namespace') else "
        "(locs[0] if locs else '')\n"
        "print(json.dumps(found))\n"
    )
    try:
        done = subprocess.run(
            _confined(confine, [python, "-c", code, *tops], checkout), cwd=checkout, env=env,
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        paths: dict[str, str] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as error:
        return {}, [f"could not check where the project's packages import from: {error}"]
    warnings = []
    roots = [os.path.realpath(overlay), os.path.realpath(checkout)]
    for name, path in sorted(paths.items()):
        real = os.path.realpath(path) if path and not path.startswith("error") else path
        if not real or not any(real == r or real.startswith(r + os.sep) for r in roots):
            shown = real or "nowhere"
            warnings.append(
                f"package {name!r} imports from {shown}, not from this revision's build"
            )
    return paths, warnings


def runtime(
    site: str | None,
    venv: str | None,
    set_env: dict[str, str] | None = None,
    pytest_args: list[str] | None = None,
) -> dict[str, list[str]]:
    """What a shard's environment gains: folders before PATH and PYTHONPATH, and under `SET`
    the variables the declaration sets (`NAME=value`; tox's pytest options as
    `PYTEST_ADDOPTS`)."""
    import shlex

    path: list[str] = []
    pythonpath: list[str] = []
    if venv:
        path.append(os.path.join(venv, "bin"))
    if site:
        pythonpath.append(site)
        path.append(os.path.join(site, "bin"))
    assigned = dict(set_env or {})
    if pytest_args:
        assigned["PYTEST_ADDOPTS"] = shlex.join(pytest_args)
    found = {"PATH": path, "PYTHONPATH": pythonpath, "VIRTUAL_ENV": [venv] if venv else []}
    if assigned:
        found["SET"] = [f"{name}={value}" for name, value in sorted(assigned.items())]
    return found


def with_plugin(
    runtime: dict[str, list[str]], folder: str, module: str, source: str
) -> dict[str, list[str]]:
    """`runtime` with the gate's pytest plugin written to `folder`, first on `PYTHONPATH`
    (on hosts and in pods, where the gate's own package is not installed)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{module}.py"), "w", encoding="utf-8") as handle:
        handle.write(source)
    merged = {name: list(folders) for name, folders in runtime.items()}
    merged["PYTHONPATH"] = [folder, *merged.get("PYTHONPATH", [])]
    return merged


# What a shard sees of the environment it is started in: the suite is untrusted code, so
# never the gate's whole environment (its ledger URL, database passwords, tokens), only these
# names (patterns end in `*`) and those the user names in `[tool.release-ledger] pass-env`.
# The locale, the terminal, the time zone and where certificates are: tox's defaults without
# its proxies and build flags.
SHARD_ENV_ALLOWED = (
    "PATH", "HOME", "TMPDIR", "LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "NO_COLOR",
    "FORCE_COLOR", "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE", "SOURCE_DATE_EPOCH",
)  # fmt: skip
# The gate's own settings never reach a suite, whatever `pass-env` says.
SHARD_ENV_NEVER = ("LEDGER_*",)
# What an environment build may see besides `SHARD_ENV_ALLOWED` and `pass-env`: where packages
# come from and how to reach them (uv's and pip's settings, proxies, its caches and config),
# and how native code is compiled. Its steps are the project's code, as its tests are: the
# gate's tokens, passwords and ledger URL never reach them.
BUILD_ENV_ALLOWED = (
    "UV_*", "PIP_*", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "HTTP_PROXY",
    "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "all_proxy", "USER", "LOGNAME", "CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS",
    "PKG_CONFIG_PATH", "CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH", "MAKEFLAGS",
)  # fmt: skip
PASS_ENV_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def build_env(env: dict[str, str], pass_env: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    """The environment a build step runs with: of `env` only the allowed names and
    `pass_env`, never the gate's own settings."""
    return _allowed(env, (*SHARD_ENV_ALLOWED, *BUILD_ENV_ALLOWED, *pass_env))


def _allowed(env: dict[str, str], allowed: tuple[str, ...]) -> dict[str, str]:
    """Of `env`, the names `allowed` lists and never `SHARD_ENV_NEVER`."""
    return {
        k: v
        for k, v in env.items()
        if env_name_matches(k, allowed) and not env_name_matches(k, SHARD_ENV_NEVER)
    }


def env_name_matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether `name` is one of `patterns` (exact names, or prefixes ending in `*`)."""
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


# The gate's pytest plugin reads each file's time limit from this variable (its own copy of
# the name: the plugin is self-contained).
FILE_LIMITS_VARIABLE = "RELEASE_LEDGER_FILE_LIMITS"


def shard_env(
    env: dict[str, str],
    extra: dict[str, list[str]],
    *,
    pass_env: tuple[str, ...] | list[str] = (),
    home: str | None = None,
    tmp: str | None = None,
    file_limits: dict[str, float] | None = None,
) -> dict[str, str]:
    """The environment a shard's command runs with, built from an allow-list: of `env` only
    `SHARD_ENV_ALLOWED` and `pass_env`, never `SHARD_ENV_NEVER`; the prepared folders in
    front; `home` and `tmp` (the attempt's own, so nothing the suite leaves in its home or
    temporary folder reaches anything else) as HOME and TMPDIR; no bytecode written; the
    files' time limits for the gate's pytest plugin (`FILE_LIMITS_VARIABLE`)."""
    kept = _allowed(env, (*SHARD_ENV_ALLOWED, *pass_env))
    if not extra.get("VIRTUAL_ENV") and env.get("PYTHONPATH"):
        # `--env none`: the gate's interpreter and path are the suite's. With a venv the
        # revision is installed in it, and the gate's PYTHONPATH is never part of the
        # environment the project's CI would give its tests.
        kept["PYTHONPATH"] = env["PYTHONPATH"]
    if home:
        kept["HOME"] = home
    if tmp:
        kept["TMPDIR"] = tmp
    merged = apply_runtime(kept, extra)
    merged["PYTHONDONTWRITEBYTECODE"] = "1"
    if file_limits:
        merged[FILE_LIMITS_VARIABLE] = json.dumps(file_limits, sort_keys=True)
    return merged


def apply_runtime(env: dict[str, str], extra: dict[str, list[str]]) -> dict[str, str]:
    """`env` with the prepared environment's folders in front."""
    merged = dict(env)
    for name, folders in extra.items():
        if not folders:
            continue
        if name == "VIRTUAL_ENV":
            merged[name] = folders[0]
            continue
        if name == "SET":
            for item in folders:
                name_, _, value = item.partition("=")
                merged[name_] = value
            continue
        current = [p for p in merged.get(name, "").split(os.pathsep) if p]
        merged[name] = os.pathsep.join([*folders, *current])
    return merged


# --- declared sources -----------------------------------------------------------------------
#
# Each source is a plain dict: `source` (its kind), `detail` (what it names, for the ledger),
# `extras`, `requirements`, `files` (requirements files, relative to the checkout),
# `install_project`, `set_env` and `pytest_args`. The first that installs is used; every one
# tried is recorded, in `PRECEDENCE` order.

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


def find_tox() -> str | None:
    """tox beside this interpreter (the gate's own environment) or on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "tox")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which("tox")


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
    tox = find_tox()
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


def pinned_requirements(frozen: str) -> list[str]:
    """The `name==version` lines of a frozen package list (sorted, duplicates dropped); lines
    that pin nothing a resolver can fetch (local paths, editable installs) are left out."""
    pins = {
        line.strip()
        for line in frozen.splitlines()
        if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?==[^\s;@]+", line.strip())
    }
    return sorted(pins)


def _auto(
    checkout: str, commit: str, cache: str, installer: Installer, result: dict[str, object],
    extras: list[str], pins: list[str] | None = None, skip: dict[str, str] | None = None,
) -> None:  # fmt: skip
    interp = _interpreter(installer.python, installer)
    tag = _key({"i": interp["implementation"], "v": interp["version"],
                "p": interp["platform"], "m": interp["machine"]})[:12]  # fmt: skip
    result["python_version"] = interp["version"]
    wheel, meta, project_reused = _build_project(checkout, commit, cache, installer, tag)
    provided = [str(e) for e in meta.get("extras", [])]  # type: ignore[attr-defined]
    unknown = sorted(set(extras) - {_normal(e) for e in provided} - set(provided))
    if unknown:
        raise SetupFailed(
            f"extras {', '.join(unknown)} are not declared by the project"
            f" (it declares: {', '.join(provided) or 'none'})"
        )
    lock = in_checkout(checkout, LOCK_FILE)
    lock_digest = _sha256_file(lock) if lock else ""
    document = _pyproject(checkout)
    result.update(project=meta.get("name"), project_reused=project_reused,
                  requires_dist=meta.get("requires", []), provides_extra=provided)  # fmt: skip
    planned: list[tuple[dict[str, object], dict[str, str], str, str]] = []
    unreadable: list[dict[str, object]] = []
    for source in declared_sources(
        checkout, interp["version"], provided, installer.env, installer.confine
    ):
        if "unreadable" in source or str(source["source"]) in (skip or {}):
            why = source.get("unreadable") or (skip or {})[str(source["source"])]
            unreadable.append({"source": source["source"], "detail": source["detail"],
                               "outcome": "failed", "error": why})  # fmt: skip
            continue
        source["extras"] = sorted({*source["extras"], *extras})  # type: ignore[misc]
        if pins:
            # The declaration's settings (set_env, pytest arguments, extras) with another
            # package set: the pins replace what the declaration would resolve to.
            source.update(requirements=[], files=[], pins=list(pins),
                          detail=f"{source['detail']}, with the pinned package set")  # fmt: skip
        digests = {
            rel: _sha256_file(str(in_checkout(checkout, rel)))
            for rel in source["files"]  # type: ignore[attr-defined]
            if in_checkout(checkout, rel)
        }
        spec = {k: source[k] for k in ("source", "extras", "requirements", "files",
                                        "install_project", "set_env", "pytest_args")}  # fmt: skip
        if pins:
            spec["pins"] = pins
        applied, source["lock_note"] = lock_use(source, document, lock_digest)
        source["lock"] = lock_digest if applied else ""
        deps_key = _key({
            "format": FORMAT, "interpreter": tag, "requires": meta.get("requires", []),
            "spec": spec, "files": digests, "lock": source["lock"], "installer": installer.how,
            "exclude_newer": installer.exclude_newer,
        })  # fmt: skip
        key = _key({"deps": deps_key, "wheel": meta.get("wheel_sha256", commit)})
        planned.append((source, digests, deps_key, key))
        if pins:
            break  # one source gives the settings; the package set is the pins
    # A source whose environment is ready is reused with the record of the sources before it
    # that failed when it was built; they are not tried again.
    reusable = next((p for p in planned if _ready(os.path.join(cache, "envs", p[3]))), None)
    tried: list[dict[str, object]] = list(unreadable)
    for source, digests, deps_key, key in [reusable] if reusable else planned:
        entry_of = {"source": source["source"], "detail": source["detail"]}
        entry = os.path.join(cache, "envs", key)
        try:
            found, built = _ready(entry), False
            if found is None:
                with _locked(cache, key):
                    found = _ready(entry)
                    if found is None:
                        _build_env(checkout, wheel, entry, installer, source,
                                   str(source["lock"]), tried)  # fmt: skip
                        found, built = _ready(entry), True
            if found is None:
                raise SetupFailed("the environment was built but is not readable")
        except SetupFailed as error:
            tried.append({**entry_of, "outcome": "failed", "error": str(error),
                          "log_tail": installer.take_log_tail()})  # fmt: skip
            continue
        installer.take_log_tail()
        if not built:
            before = found.get("tried_before")
            if isinstance(before, list):  # what failed when it was built, and what failed now
                named = {t.get("source") for t in before if isinstance(t, dict)}
                tried = [t for t in unreadable if t["source"] not in named]
                tried += [dict(t) for t in before]
        tried.append({**entry_of, "outcome": "used"})
        result.update(
            key=key, deps_key=deps_key, reused=not built, source=source["source"],
            extra=",".join(source["extras"]) or None,  # type: ignore[arg-type]
            group=str(source["detail"])[6:] if source["source"] == "dependency-group" else None,
            files_read=sorted(
                [r for r in PROJECT_FILES if os.path.isfile(os.path.join(checkout, r))]
                + list(digests) + ([LOCK_FILE] if source["lock"] else [])
            ),
            lock=f"{LOCK_FILE} sha256:{source['lock']}" if source["lock"] else "",
            lock_note=source["lock_note"],
        )  # fmt: skip
        break
    result["tried"] = tried
    if "key" not in result or not result["key"]:
        result["error"] = "no declared test environment installs: tried " + ", ".join(
            f"{t['source']} ({t['error']})" for t in tried
        )
        raise SetupFailed(str(result["error"]))
    venv = os.path.join(entry, "venv")
    result["python"] = os.path.join(venv, "bin", "python")
    result["packages"] = _dependencies_only(str((found or {}).get("packages", "")), meta)
    set_env = {str(k): str(v) for k, v in dict(source["set_env"]).items()}  # type: ignore[call-overload]
    pytest_args = [str(a) for a in source["pytest_args"]]  # type: ignore[attr-defined]
    invocation = _invocation(
        checkout, source, str(result["python"]), apply_runtime(installer.env, runtime(None, venv)),
        installer.confine,
    )  # fmt: skip
    result["invocation"] = invocation
    if invocation.get("runner") in ("pytest", "unittest") and not invocation.get("fallback"):
        options = [str(o) for o in invocation.get("options", [])]  # type: ignore[attr-defined]
        pytest_args = shard_options(options)
    result["runtime"] = runtime(None, venv, set_env, pytest_args)
    result["keep"] = [entry, os.path.dirname(os.path.dirname(wheel))]
    env = apply_runtime(installer.env, result["runtime"])  # type: ignore[arg-type]
    tops = [str(t) for t in meta.get("top_level", [])]  # type: ignore[attr-defined]
    result["imports"], result["warnings"] = _import_check(
        str(result["python"]), tops, venv, checkout, env, installer.confine
    )


def _invocation(
    checkout: str, source: dict[str, object], python: str, env: dict[str, str],
    confine: Confine | None,
) -> dict[str, object]:  # fmt: skip
    """The test invocation the source declares, its options told from its targets by the
    environment's pytest; where it declares none, or pytest cannot parse it, the fallback
    (pytest as the project configures it, the options kept by the old rule), saying why."""
    kept = [str(a) for a in source["pytest_args"]]  # type: ignore[attr-defined]
    declared = source.get("invocation")
    if not isinstance(declared, dict):
        why = source.get("invocation_error") or f"{source['detail']} declares no test command"
        return {"source": "default", "options": kept, "fallback": str(why)}
    try:
        return resolved(declared, python, checkout, env, confine)
    except InvocationUnreadable as error:
        found = {k: v for k, v in declared.items() if k != "words"}
        return {**found, "options": kept, "fallback": f"{error}; options kept by name"}


# Options a shard never passes, with their values: as `domain/invocation.STOPPING_OPTIONS`
# (this module imports nothing of ours; tests/test_tox_invocation.py holds them equal).
STOPPING_OPTIONS = (
    "-x", "--exitfirst", "--maxfail", "--junitxml", "--junit-xml", "--sw", "--stepwise",
    "--basetemp",
)  # fmt: skip


def shard_options(options: list[str]) -> list[str]:
    """`options` (told from targets by pytest's parser) less `STOPPING_OPTIONS` and their
    values (`--maxfail 3`, `--maxfail=3`, `-x`)."""
    kept: list[str] = []
    dropping = False
    for word in options:
        if word.startswith("-"):
            name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
            dropping = name in STOPPING_OPTIONS
        if not dropping:
            kept.append(word)
    return kept


def _dependencies_only(frozen: str, meta: dict[str, object]) -> str:
    """The frozen list less the project itself (installed from its wheel, by path): the
    package set its tests ran in, comparable between revisions."""
    own = _normal(str(meta.get("name") or ""))
    kept = [
        line for line in frozen.splitlines()
        if _normal(re.split(r"\s*(==|@)", line.strip(), maxsplit=1)[0]) != own
    ]  # fmt: skip
    return "\n".join(kept) + ("\n" if kept else "")


def _build_env(
    checkout: str, wheel: str, entry: str, installer: Installer, source: dict[str, object],
    lock_digest: str, tried_before: list[dict[str, object]],
) -> None:  # fmt: skip
    """A fresh venv with the revision's wheel really installed (so every process the suite
    starts imports it) and the source's dependencies; uv's cache shares the downloads."""
    os.makedirs(os.path.dirname(entry), exist_ok=True)
    staging = installer.in_place(entry)
    try:
        python = installer.venv(os.path.join(staging, "venv"))
        if not os.path.isfile(wheel):
            raise SetupFailed(f"the built wheel {wheel} is no longer in the cache")
        extras = [str(e) for e in source["extras"]]  # type: ignore[attr-defined]
        args: list[str] = []
        if source["install_project"]:
            args.append(f"{wheel}[{','.join(extras)}]" if extras else wheel)
        args += [str(r) for r in source["requirements"]]  # type: ignore[attr-defined]
        scratch = os.path.join(staging, "requirements")
        os.makedirs(scratch)
        for rel in source["files"]:  # type: ignore[attr-defined]
            if not in_checkout(checkout, str(rel)):
                raise SetupFailed(f"{rel} is named but not in the checkout")
            args += ["-r", sanitized_requirements(checkout, str(rel), scratch)]
        if source.get("pins"):
            pins_file = os.path.join(scratch, "pins.txt")
            with open(pins_file, "w", encoding="utf-8") as handle:
                handle.write("\n".join(str(p) for p in source["pins"]) + "\n")  # type: ignore[attr-defined]
            args += ["-r", pins_file]
        if lock_digest:
            exported = installer.export_lock(checkout)
            if exported is not None:
                pinned = os.path.join(scratch, "uv.lock.txt")
                with open(pinned, "w", encoding="utf-8") as handle:
                    handle.write(exported)
                args += ["-c", pinned]
        installer.install(python, args, f"installing {source['detail']}", pinned=lock_digest != "")
        try:
            installer.run([python, "-c", "import pytest"], what="checking for pytest")
        except SetupFailed:
            installer.install(python, ["pytest"], "installing pytest")
        packages = installer.freeze(python)
        _publish(staging, entry, {"packages": packages, "how": installer.how})
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _command(
    checkout: str, commit: str, cache: str, installer: Installer, command: list[str],
    result: dict[str, object],
) -> None:  # fmt: skip
    interp = _interpreter(installer.python, installer)
    result["python_version"] = interp["version"]
    key = _key({"format": FORMAT, "interpreter": interp, "setup": command, "commit": commit})
    result["key"] = key
    entry = os.path.join(cache, "envs", key)
    found = _ready(entry) if commit else None
    if found is None:
        with _locked(cache, key):
            found = _ready(entry) if commit else None
            if found is None:
                os.makedirs(os.path.dirname(entry), exist_ok=True)
                staging = installer.in_place(entry)
                try:
                    venv = os.path.join(staging, "venv")
                    python = installer.venv(venv)
                    argv = [a.replace("{python}", python).replace("{venv}", venv) for a in command]
                    installer.run(argv, cwd=checkout, what="the setup command")
                    packages = installer.freeze(python)
                    _publish(staging, entry, {"packages": packages, "how": "command"})
                except BaseException:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
                found = _ready(entry)
                result["built"] = True
    if found is None:
        raise SetupFailed("the environment was built but is not readable")
    result["reused"] = not result.pop("built", False)
    venv = os.path.join(entry, "venv")
    result["python"] = os.path.join(venv, "bin", "python")
    result["packages"] = found.get("packages", "")
    result["runtime"] = runtime(None, venv)
    result["keep"] = [entry]


def prepare(
    checkout: str,
    *,
    mode: str,
    python: str,
    cache: str,
    commit: str = "",
    command: list[str] | None = None,
    uv: str | None = None,
    installer_name: str = "auto",
    max_bytes: int = DEFAULT_MAX_BYTES,
    base_env: dict[str, str] | None = None,
    extras: list[str] | tuple[str, ...] = (),
    exclude_newer: str = "",
    pinned: str = "",
    pass_env: list[str] | tuple[str, ...] = (),
    confine: Confine | None = None,
    skip_sources: dict[str, str] | None = None,
) -> dict[str, object]:
    """Prepare the environment the tests of `checkout` run in; never raises for a bad project.

    Its steps run the project's code (build backends, tox's loader, a setup command): they
    see only `build_env` of the gate's environment (`base_env`, else this process's), and
    run `confine`d when the executor gives a way (the local one: in bubblewrap).

    `skip_sources` (source kind -> why) are declared sources that installed but whose tests
    could not run at this revision: recorded as failed with that reason, and not tried.

    `pinned` (a frozen package list, `name==version` lines) installs the revision with that
    package set instead of the one its declaration resolves to: head's code with base's
    packages, to tell a failure the code introduced from one a dependency did.

    The result: `status` (ready / failed), `how` (uv, pip, command, none, gate-interpreter),
    `python`, `python_version`, `key`, `reused`, `seconds`, `packages` (frozen list),
    `runtime` (folders for PATH / PYTHONPATH / VIRTUAL_ENV), `imports`, `warnings`, and for
    a failure `error` and `log_tail` (the install log's end). `installer_name` "pip" skips
    uv (what a machine without uv gets; "auto" takes uv wherever it is found).
    """
    started = time.monotonic()
    result: dict[str, object] = {
        "status": "ready", "mode": mode if mode in ("auto", "none") else "command",
        "python": python, "key": "", "reused": False, "packages": "", "imports": {},
        "warnings": [], "runtime": runtime(None, None), "python_version": platform.python_version(),
    }  # fmt: skip
    env = build_env(dict(base_env if base_env is not None else os.environ), pass_env)
    if confine is not None:
        env["TMPDIR"] = "/tmp"  # a confined step's own /tmp; the given one may be out of reach
    os.makedirs(cache, exist_ok=True)
    log_fd, log = tempfile.mkstemp(prefix="env-", suffix=".log", dir=cache)
    os.close(log_fd)
    uv_binary = None if installer_name == "pip" else find_uv(uv)
    installer = Installer(python, uv_binary, log, env, confine)
    installer.exclude_newer = exclude_newer if uv_binary else ""
    if exclude_newer:
        result["exclude_newer"] = installer.exclude_newer
    try:
        if mode == "none":
            result["how"] = "none"
        elif mode == "auto" and not installable(checkout):
            result["how"] = "gate-interpreter"
            result["warnings"] = [
                "not an installable Python project: run with the interpreter given"
            ]
        elif mode == "auto":
            result["how"] = installer.how
            _auto(checkout, commit, cache, installer, result, [_normal(e) for e in extras],
                  pinned_requirements(pinned), dict(skip_sources or {}))  # fmt: skip
        else:
            result["how"] = "command"
            _command(checkout, commit, cache, installer, list(command or []), result)
    except SetupFailed as error:
        result["status"] = "failed"
        result["error"] = str(error)
        tried = result.get("tried", [])
        tails = [
            f"== {t['source']}: {t.get('error', '')}\n{t['log_tail']}"
            for t in (tried if isinstance(tried, list) else [])
            if t.get("log_tail")
        ]
        tails.append(installer.take_log_tail())
        result["log_tail"] = "\n".join(t for t in tails if t)[-LOG_TAIL_BYTES:]
    finally:
        with contextlib.suppress(OSError):
            os.unlink(log)
    result["seconds"] = round(time.monotonic() - started, 3)
    kept = result.pop("keep", [])
    keep = tuple(str(k) for k in kept) if isinstance(kept, list) else ()
    with contextlib.suppress(OSError):
        prune(cache, max_bytes, keep)
    return result
