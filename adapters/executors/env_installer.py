"""How a revision's environment is installed: uv (or pip) driven step by step, each
step confined where the executor can sandbox builds, with a bounded log; the interpreter's
facts and a built wheel's metadata. Stdlib-only, like `environment.py` (sent with it)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the module also runs on build hosts' older interpreters: no run-time alias
    from collections.abc import Callable

# Runs one build step's command confined: (argv, cwd, folders it may write besides the
# checkout and the installers' caches) -> argv to run. An executor that can sandbox builds
# gives one to `prepare` (the local one: bubblewrap); without, steps run as given.
if TYPE_CHECKING:
    Confine = Callable[[list[str], str | None, list[str]], list[str]]

STEP_TIMEOUT_S = 1800.0
LOG_TAIL_BYTES = 16 * 1024


class SetupFailed(Exception):
    """A step of the setup failed; the message says which, the log holds the output."""


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
        os.chmod(folder, 0o755)  # published as it is: read by shards run as other users
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

    def step(
        self, argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None
    ) -> tuple[int | None, str, str]:
        """Run one step with its command, stderr and stdout in the log; never raises:
        (exit code or None when it could not run or timed out, stdout, error). `env`
        replaces the installer's own for this step."""
        with open(self.log, "ab") as log:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            try:
                done = subprocess.run(
                    _confined(self.confine, argv, cwd, self.writable), cwd=cwd,
                    env=self.env if env is None else env, stdin=subprocess.DEVNULL,
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


def find_tool(name: str) -> str | None:
    """A command-line tool of the gate's (uv, tox, hatch): beside this interpreter (the
    gate's own environment, whatever PATH says) or on PATH."""
    for candidate in (os.path.join(os.path.dirname(sys.executable), name), shutil.which(name)):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_uv(explicit: str | None = None) -> str | None:
    """The uv binary: given, beside this interpreter, on PATH, or from the `uv` package."""
    if explicit and os.path.isfile(explicit) and os.access(explicit, os.X_OK):
        return explicit
    on_machine = find_tool("uv")
    if on_machine is not None:
        return on_machine
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


def _interpreter(python: str, installer: Installer) -> dict[str, str]:
    code = (
        "import json, platform, sys; print(json.dumps({'version': platform.python_version(),"
        " 'implementation': sys.implementation.name, 'platform': sys.platform,"
        " 'machine': platform.machine(), 'executable': sys.executable}))"
    )
    out = installer.run([python, "-c", code], what=f"inspecting {python}")
    found: dict[str, str] = json.loads(out.strip().splitlines()[-1])
    return found
