"""Build a revision's release files and try the upgrade a user would make: I/O at gate time.

`build(...)`: from a clean `--shared` clone of the commit (never the user's working tree),
`uv build` makes the sdist and then the wheel *from the sdist*, with the project's own PEP 517
backend in an isolated build environment (`python -m build`, which does the same, from a tools
environment when there is no uv). Each file's metadata is read (name, version, README), its
sha256 taken, and `twine check` — the README rendering PyPI does, through `readme-renderer` —
is run over both, from a tools environment made once per machine beside the per-revision
environments. Builds are cached per commit and interpreter. Base's build for the upgrade is
its wheel alone, the one base's environment installs (`wheel_only`): built once for both.

`upgrade(...)`: a fresh virtual environment (`uv venv`, or `python -m venv` + pip), base's wheel
installed, then head's over it, `pip check`, and each of head's top-level packages imported
from an empty folder, with the installed version read by `importlib.metadata` after each step.

Both return the fields of their event (`DistributionsBuilt`, `UpgradeChecked`) and the
artifacts those reference. They never raise for a bad project: a failure is a fact, recorded
with the end of its log.
"""

from __future__ import annotations

import contextlib
import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from release_ledger.adapters import git
from release_ledger.adapters.executors import build_sandbox, environment
from release_ledger.adapters.executors.env_cache import _key, _locked, _publish, _ready
from release_ledger.adapters.executors.env_installer import (
    LOG_TAIL_BYTES,
    Installer,
    SetupFailed,
    _interpreter,
    _wheel_metadata,
    find_uv,
)
from release_ledger.adapters.executors.env_variables import build_env
from release_ledger.adapters.executors.supervisor import TAG_VARIABLE
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.errors import BadInput

FORMAT = 1  # bump when a cached build's layout or meaning changes
# What checks a README as PyPI renders it (`[md]`: Markdown READMEs need cmarkgfm).
TOOLS = ("twine>=5", "readme-renderer[md]>=41", "build>=1")
KEEP_BUILDS = 64  # cached builds kept (least recently used removed first)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CHECKED = re.compile(r"^Checking (.+?): (PASSED with warnings|PASSED|FAILED)\s*$")


@dataclass
class Built:
    """The fields of a `DistributionsBuilt` event, its artifacts, and where the wheel is."""

    fields: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)
    wheel: str | None = None  # path of the built wheel in the cache (for the upgrade)


@dataclass
class Upgraded:
    fields: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)


def packaged(repo: Path, commit: str) -> bool:
    """Does the commit hold a Python project a PEP 517 backend builds (read from git)?"""
    files = git.files_at_commit(repo, commit)
    if "setup.py" in files or "setup.cfg" in files:
        return True
    data = git.read_file_at_commit(repo, commit, "pyproject.toml")
    text = data.decode("utf-8", "replace") if data else ""
    return bool(re.search(r"^\s*\[(project|build-system)\]", text, re.MULTILINE))


def _log_tail(log: str) -> bytes:
    with open(log, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
        return handle.read()


def _kept(artifacts: dict[str, bytes], data: bytes) -> str | None:
    if not data:
        return None
    digest = sha256_hex(data)
    artifacts[digest] = data
    return digest


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- metadata of the built files ----------------------------------------------------------------


def _metadata_text(path: str) -> str:
    """The core metadata of a wheel (`*.dist-info/METADATA`) or an sdist (`*/PKG-INFO`)."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1]
            meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
            return archive.read(meta).decode("utf-8", "replace")
    with tarfile.open(path) as archive:
        member = next(
            m
            for m in archive.getmembers()
            if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")
        )
        handle = archive.extractfile(member)
        assert handle is not None
        return handle.read().decode("utf-8", "replace")


def describe_file(path: str) -> dict[str, Any]:
    """One `DistributionFile`'s fields (readme left for `twine check`)."""
    kind = "wheel" if path.endswith(".whl") else "sdist"
    found: dict[str, Any] = {
        "type": kind,
        "filename": os.path.basename(path),
        "sha256": _sha256_file(path),
        "size": os.path.getsize(path),
    }
    try:
        message = email.parser.Parser().parsestr(_metadata_text(path))
    except (OSError, StopIteration, zipfile.BadZipFile, tarfile.TarError, ValueError):
        return found  # no metadata: name and version stay empty, which the check names
    description = message.get_payload()
    if not isinstance(description, str) or not description.strip():
        description = message.get("Description", "") or ""
    found.update(
        name=(message.get("Name") or "").strip(),
        version=(message.get("Version") or "").strip(),
        metadata_version=(message.get("Metadata-Version") or "").strip(),
        description_content_type=(message.get("Description-Content-Type") or "").strip(),
        description=bool(str(description).strip()) and str(description).strip() != "UNKNOWN",
    )
    return found


# --- the tools environment (twine, readme-renderer, build) ----------------------------------------


def _tools(cache: str, installer: Installer, interp: dict[str, str]) -> str:
    """The tools environment's interpreter, made once per machine and interpreter."""
    key = _key({"format": FORMAT, "tools": TOOLS, "python": interp["version"],
                "implementation": interp["implementation"], "how": installer.how})  # fmt: skip
    entry = os.path.join(cache, "tools", key)
    python = os.path.join(entry, "venv", "bin", "python")
    if _ready(entry) is not None and os.path.exists(python):
        return python
    with _locked(cache, f"tools-{key}"):
        if _ready(entry) is not None and os.path.exists(python):
            return python
        # A venv records its own absolute path: it is made where it stays, ready.json last.
        shutil.rmtree(entry, ignore_errors=True)
        os.makedirs(entry)
        installer.writable.append(entry)
        try:
            made = installer.venv(os.path.join(entry, "venv"))
            installer.install(made, list(TOOLS), "installing twine and build")
            with open(os.path.join(entry, "ready.json"), "w", encoding="utf-8") as handle:
                json.dump({"tools": list(TOOLS), "bytes": 0}, handle)
        except BaseException:
            shutil.rmtree(entry, ignore_errors=True)
            raise
    return python


def _twine_check(tools: str, paths: list[str], env: dict[str, str]) -> tuple[dict[str, str], bytes]:
    """`twine check` over the files (run beside them, named bare): each file's word (passed,
    warned, failed) and the output."""
    names = [os.path.basename(p) for p in paths]
    done = subprocess.run(
        [tools, "-m", "twine", "check", *names],
        cwd=os.path.dirname(paths[0]),
        env=dict(env, NO_COLOR="1", TERM="dumb", COLUMNS="400"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=600,
        check=False,
    )
    text = _ANSI.sub("", (done.stdout + done.stderr).decode("utf-8", "replace"))
    words = {"PASSED": "passed", "PASSED with warnings": "warned", "FAILED": "failed"}
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _CHECKED.match(line.strip())
        if match:
            found[os.path.basename(match.group(1))] = words[match.group(2)]
    return found, text.encode()


# --- building ------------------------------------------------------------------------------------


def _prune(folder: str, keep: int) -> None:
    with contextlib.suppress(OSError):
        entries = []
        for name in os.listdir(folder):
            stamp = os.path.join(folder, name, "ready.json")
            if os.path.isfile(stamp):
                entries.append((os.path.getmtime(stamp), os.path.join(folder, name)))
        for _, path in sorted(entries)[: max(0, len(entries) - keep)]:
            shutil.rmtree(path, ignore_errors=True)


def _confined_installer(
    python: str,
    uv: str | None,
    log: str,
    work: str,
    cache: str,
    repo: Path | None,
    hidden: Sequence[str],
    tag: str = "",
    own: str = "",
) -> Installer:
    """An installer whose steps (head's build backend, its import after the upgrade) see the
    build environment's allow-list and run in bubblewrap where it can: writable only the
    work folder (the clone, the dists, the venv) and what each step builds in the cache;
    `hidden` (the ledger's folder) out of sight. Every step carries `tag` (where given), so
    whoever started the build ends all it runs (`supervisor.kill_tagged`). `own` (head's
    commit): its steps use installers' caches of that commit's own, never the shared ones."""
    caches = build_sandbox.own_caches(cache, own) if own else None
    confine, _ = build_sandbox.confinement(
        python=python, repo=repo, checkout=Path(work), envs_dir=Path(cache), hidden=list(hidden),
        caches=caches,
    )  # fmt: skip
    env = build_env({**os.environ, **(caches or {})})
    if tag:
        env[TAG_VARIABLE] = tag
    return Installer(python, uv, log, env, confine)


def _build_files(
    repo: Path, commit: str, work: str, installer: Installer, tools: str | None
) -> tuple[list[str], str]:
    """Build sdist and wheel from a clean clone; the two paths and how."""
    source = git.isolated_copy(repo, commit, Path(work) / "source")
    out = os.path.join(work, "dist")
    if installer.uv:
        how = "uv build"
        argv = [installer.uv, "build", "--python", installer.python, "-o", out, str(source)]
    else:
        if tools is None:
            raise SetupFailed("no uv and no tools environment to run `python -m build` from")
        how = "python -m build"
        argv = [tools, "-m", "build", "--sdist", "--wheel", "--outdir", out, str(source)]
    installer.run(argv, what=how)
    made = sorted(os.listdir(out)) if os.path.isdir(out) else []
    sdists = [n for n in made if n.endswith((".tar.gz", ".zip"))]
    wheels = [n for n in made if n.endswith(".whl")]
    if len(sdists) != 1 or len(wheels) != 1:
        raise SetupFailed(
            f"{how} made {len(sdists)} sdists and {len(wheels)} wheels, not one of each"
        )
    return [os.path.join(out, sdists[0]), os.path.join(out, wheels[0])], how


def build(
    repo: Path,
    commit: str,
    revision: str,
    cache: str,
    *,
    python: str = sys.executable,
    check_readme: bool = True,
    installer_name: str = "auto",
    hidden: Sequence[str] = (),
    tag: str = "",
    wheel_only: bool = False,
) -> Built:
    """The commit's sdist and wheel (built or from the cache), described; never raises for a
    project that does not build.

    `wheel_only` (base's build, which only the upgrade reads: its sdist is not the release's)
    describes the wheel the revision's environment installs, built from its tree, once for
    both (`_tree_wheel`); its README is not checked."""
    started = time.monotonic()
    fields: dict[str, Any] = {"revision": revision, "commit": commit, "status": "built"}
    result = Built(fields)
    try:
        is_packaged = packaged(repo, commit)
    except (git.GitError, BadInput, OSError) as error:
        fields.update(status="failed", error=f"the commit could not be read: {error}")
        return result
    if not is_packaged:
        fields.update(
            status="not-packaged",
            error="no pyproject.toml [project]/[build-system], setup.py or setup.cfg",
        )
        return result
    os.makedirs(cache, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ledger-dists-")  # the clone, the build, its log
    log = os.path.join(work, "build.log")
    open(log, "wb").close()
    uv = None if installer_name == "pip" else find_uv()
    # the candidate (and, under `sandbox: uid`, every build): caches of its own
    own = commit if build_sandbox.own_caches_needed(revision != "head") else ""
    installer = _confined_installer(python, uv, log, work, cache, repo, hidden, tag, own)
    try:
        interp = _interpreter(python, installer)
        fields["python_version"] = interp["version"]
        apart = environment.kept_apart(bool(own))  # never reused as base's, nor the reverse
        if wheel_only:
            wheel, how, tops, fields["reused"] = _tree_wheel(repo, commit, work, cache, installer,
                                                            interp, apart)  # fmt: skip
            fields.update(how=how, top_level=tops, files=[describe_file(wheel)])
            result.wheel = wheel
            fields["seconds"] = round(time.monotonic() - started, 3)  # this time (cached or not)
            return result
        built_for = _key(
            {
                "i": interp["implementation"],
                "v": interp["version"],
                "p": interp["platform"],
                "m": interp["machine"],
                "how": installer.how,
                **apart,
            }
        )[:12]
        entry = os.path.join(cache, "dists", f"{commit}-{built_for}")
        tools: str | None = None
        tools_error = ""
        if check_readme or not installer.uv:
            try:
                # made with the shared caches, never head's: `twine check` runs unconfined
                # (under `sandbox: uid`, caches of the tools' own: none of a revision's)
                tools_own = "tools" if build_sandbox.own_caches_needed(True) else ""
                shared = _confined_installer(
                    python, uv, log, work, cache, repo, hidden, tag, tools_own
                )
                tools = _tools(cache, shared, interp)
            except SetupFailed as error:
                tools_error = f"the tools environment could not be made: {error}"
        meta = _ready(entry)
        if meta is None:
            with _locked(cache, os.path.basename(entry)):
                meta = _ready(entry)
                if meta is None:
                    paths, how = _build_files(repo, commit, work, installer, tools)
                    staging = tempfile.mkdtemp(prefix=".build-", dir=cache)
                    for path in paths:
                        shutil.move(path, os.path.join(staging, os.path.basename(path)))
                    wheel = os.path.join(staging, os.path.basename(paths[1]))
                    meta = {
                        "how": how,
                        "files": [os.path.basename(p) for p in paths],
                        "top_level": _wheel_metadata(wheel)[3],
                    }
                    os.makedirs(os.path.dirname(entry), exist_ok=True)
                    _publish(staging, entry, meta)
                    meta = _ready(entry)
                    fields["reused"] = False
                else:
                    fields["reused"] = True
        else:
            fields["reused"] = True
        assert meta is not None
        info: dict[str, Any] = dict(meta)
        paths = [os.path.join(entry, str(name)) for name in info["files"]]
        fields.update(how=info["how"], top_level=list(info.get("top_level", [])))
        files = [describe_file(p) for p in paths]
        if check_readme:
            _readme(entry, paths, files, tools, tools_error, installer, fields, result)
        fields["files"] = files
        result.wheel = next(p for p in paths if p.endswith(".whl"))
        fields["seconds"] = round(time.monotonic() - started, 3)  # this time (cached or not)
        _prune(os.path.join(cache, "dists"), KEEP_BUILDS)
    except (SetupFailed, git.GitError, OSError, ValueError, StopIteration) as error:
        fields.update(status="failed", error=str(error) or type(error).__name__)
        fields["log_tail_hash"] = _kept(result.artifacts, _log_tail(log))
        fields["seconds"] = round(time.monotonic() - started, 3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _tree_wheel(
    repo: Path, commit: str, work: str, cache: str, installer: Installer,
    interp: dict[str, str], apart: dict[str, object],
) -> tuple[str, str, list[str], bool]:  # fmt: skip
    """The commit's wheel from its tree, cached where its environment's build caches it
    (`environment.project_tag`, the same installers' caches): whichever of the two asks
    first builds it, the other waits on its lock and reuses it. (path, how, top-level
    packages, whether reused.)"""
    project = environment.project_tag(interp, apart)
    how = "uv build --wheel" if installer.uv else "pip wheel"
    how += ", from the tree: the wheel its environment installs"

    def clone() -> str:  # only where the wheel is built here (a build under way is waited for)
        return str(git.isolated_copy(repo, commit, Path(work) / "source"))

    wheel, meta, reused = environment._build_project(clone, commit, cache, installer, project)
    tops = meta.get("top_level", [])
    return wheel, how, [str(t) for t in tops] if isinstance(tops, list) else [], reused


def _readme(
    entry: str, paths: list[str], files: list[dict[str, Any]], tools: str | None,
    tools_error: str, installer: Installer, fields: dict[str, Any], result: Built,
) -> None:  # fmt: skip
    """`twine check` over the files (cached beside them), each file's word in its `readme`."""
    cached = os.path.join(entry, "readme.json")
    found: dict[str, Any] | None = None
    with contextlib.suppress(OSError, ValueError), open(cached, encoding="utf-8") as handle:
        found = json.load(handle)
    if found is None:
        if tools is None:
            fields["readme_error"] = tools_error or "no tools environment"
            return
        try:
            words, output = _twine_check(tools, paths, installer.env)
        except (OSError, subprocess.TimeoutExpired) as error:
            fields["readme_error"] = f"twine check did not run: {error}"
            return
        found = {"words": words, "output": output.decode("utf-8", "replace")}
        if set(words) >= {os.path.basename(p) for p in paths}:  # else tried again next time
            with contextlib.suppress(OSError), open(cached, "w", encoding="utf-8") as handle:
                json.dump(found, handle, sort_keys=True)
    fields["readme_check"] = "twine check"
    fields["check_output_hash"] = _kept(result.artifacts, str(found["output"]).encode())
    for described in files:
        described["readme"] = found["words"].get(described["filename"], "")


# --- the upgrade ----------------------------------------------------------------------------------

_PROBE = (
    "import importlib, importlib.metadata as m, json, os, sys\n"
    "name, prefix, tops = sys.argv[1], os.path.realpath(sys.prefix), sys.argv[2:]\n"
    "found = {'version': None, 'imports': {}}\n"
    "try:\n"
    "    found['version'] = m.version(name)\n"
    "except Exception as error:\n"
    "    found['error'] = '%s: %s' % (type(error).__name__, error)\n"
    "for top in tops:\n"
    "    try:\n"
    "        module = importlib.import_module(top)\n"
    "    except BaseException as error:\n"
    "        found['imports'][top] = '%s: %s' % (type(error).__name__, error)\n"
    "        continue\n"
    "    where = getattr(module, '__file__', None) or ''\n"
    "    real = os.path.realpath(where) if where else ''\n"
    "    inside = not real or real.startswith(prefix + os.sep)\n"
    "    found['imports'][top] = 'ok' if inside else 'imported from %s, not the installed "
    "package' % real\n"
    "print(json.dumps(found))\n"
)


def _run(installer: Installer, argv: list[str], cwd: str) -> tuple[int | None, str, str]:
    """Run one step, logged; (exit code, stdout, error) — never raises."""
    return installer.step(argv, cwd)


def _probe(
    installer: Installer, python: str, name: str, tops: list[str], cwd: str
) -> dict[str, Any]:
    _, out, error = _run(installer, [python, "-c", _PROBE, name, *tops], cwd)
    try:
        found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"version": None, "imports": {}, "error": error or "the probe printed nothing"}
    return found


def upgrade(
    base_wheel: str,
    head_wheel: str,
    base_commit: str,
    head_commit: str,
    cache: str,
    *,
    python: str = sys.executable,
    installer_name: str = "auto",
    hidden: Sequence[str] = (),
    tag: str = "",
) -> Upgraded:
    """Install base's wheel, then head's over it, in a fresh environment (cached by both
    wheels' hashes and the interpreter)."""
    started = time.monotonic()
    os.makedirs(cache, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ledger-upgrade-")  # the venv and its log
    log = os.path.join(work, "upgrade.log")
    open(log, "wb").close()
    uv = None if installer_name == "pip" else find_uv()
    installer = _confined_installer(python, uv, log, work, cache, None, hidden, tag, head_commit)
    fields: dict[str, Any] = {
        "base_commit": base_commit, "head_commit": head_commit,
        "base_wheel": os.path.basename(base_wheel), "base_wheel_sha256": _sha256_file(base_wheel),
        "head_wheel": os.path.basename(head_wheel), "head_wheel_sha256": _sha256_file(head_wheel),
        "how": installer.how,
    }  # fmt: skip
    result = Upgraded(fields)
    try:
        name, _, _, tops = _wheel_metadata(head_wheel)
    except (OSError, StopIteration, zipfile.BadZipFile, ValueError) as error:
        fields["skipped"] = f"head's wheel has no readable metadata: {error!r}"
        shutil.rmtree(work, ignore_errors=True)
        return result
    fields["project"] = name
    try:
        interp = _interpreter(python, installer)
        fields["python_version"] = interp["version"]
        key = _key({"format": FORMAT, "base": fields["base_wheel_sha256"],
                    "head": fields["head_wheel_sha256"], "interpreter": interp,
                    "how": installer.how})  # fmt: skip
        cached = os.path.join(cache, "upgrades", f"{key}.json")
        with contextlib.suppress(OSError, ValueError):
            with open(cached, encoding="utf-8") as handle:
                stored = json.load(handle)
            fields.update(stored["fields"], reused=True)
            result.artifacts = {k: v.encode() for k, v in stored["artifacts"].items()}
            return result
        broken = _attempt(installer, python, name, tops, base_wheel, head_wheel, work, fields,
                          result)  # fmt: skip
        fields["seconds"] = round(time.monotonic() - started, 3)
        if not broken:  # a failure is tried again next time (it may be the network's)
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            stored = {"fields": fields,
                      "artifacts": {k: v.decode("utf-8", "replace")
                                    for k, v in result.artifacts.items()}}  # fmt: skip
            with open(cached + ".tmp", "w", encoding="utf-8") as handle:
                json.dump(stored, handle, sort_keys=True)
            os.replace(cached + ".tmp", cached)
    except SetupFailed as error:
        fields["skipped"] = f"the environment could not be made: {error}"
        fields["log_tail_hash"] = _kept(result.artifacts, _log_tail(log))
        fields["seconds"] = round(time.monotonic() - started, 3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _attempt(
    installer: Installer, python: str, name: str, tops: list[str], base_wheel: str,
    head_wheel: str, work: str, fields: dict[str, Any], result: Upgraded,
) -> bool:  # fmt: skip
    venv_python = installer.venv(os.path.join(work, "venv"))
    empty = os.path.join(work, "empty")  # probes run here: no checkout on sys.path
    os.makedirs(empty)
    steps: list[dict[str, Any]] = []
    fields["steps"] = steps

    def install(what: str, args: list[str]) -> bool:
        if installer.uv:
            argv = [installer.uv, "pip", "install", "--python", venv_python, *args]
        else:
            argv = [venv_python, "-m", "pip", "install", "--upgrade", *args]
        code, _, error = _run(installer, argv, empty)
        steps.append({"step": what, "exit_code": code, "error": error})
        return code == 0

    failed = not install("install base", [base_wheel])
    if not failed:
        fields["version_before"] = _probe(installer, venv_python, name, [], empty).get("version")
        # The same version built again must still replace base's files.
        again = ["--reinstall-package", name] if installer.uv else []
        failed = not install("upgrade to head", [*again, head_wheel])
    if not failed:
        probe = _probe(installer, venv_python, name, tops, empty)
        fields["version_after"] = probe.get("version")
        fields["imports"] = {str(k): str(v) for k, v in probe.get("imports", {}).items()}
        if installer.uv:
            check = [installer.uv, "pip", "check", "--python", venv_python]
        else:
            check = [venv_python, "-m", "pip", "check"]
        code, _, error = _run(installer, check, empty)
        steps.append({"step": "pip check", "exit_code": code, "error": error})
        freeze = [installer.uv, "pip", "freeze", "--python", venv_python] if installer.uv else [
            venv_python, "-m", "pip", "freeze", "--all"]  # fmt: skip
        code, out, _ = _run(installer, freeze, empty)
        if code == 0:
            fields["packages_hash"] = _kept(result.artifacts, out.encode())
    broken = any(s["exit_code"] != 0 for s in steps)
    broken = broken or any(v != "ok" for v in fields.get("imports", {}).values())
    if broken:
        fields["log_tail_hash"] = _kept(result.artifacts, _log_tail(installer.log))
    return broken
