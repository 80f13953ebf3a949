"""Per-revision test environments: each revision's tests import that revision's own code.

Here: how one is prepared (`prepare`), built from its parts by concept, each its own module
sent before this one: the declared sources (`env_sources.py`), the installer, uv or pip,
confined (`env_installer.py`), the cache (`env_cache.py`), and what a shard or a build sees
of the gate's environment (`env_variables.py`).

Stdlib-only and importing nothing of ours but those parts and `env_lock` (sent before it),
because the same code prepares environments on this machine (imported), on SSH build hosts
and in Kubernetes pods (its source is sent as part of the program those run).
`prepare(...)` returns one JSON-able dict that the executor turns into the
`EnvironmentPrepared` event.

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
   cached environment is reused without trying the ones before it again where they failed
   to build when it was built (its `failed_before`); one that was not tried then (it could not
   be read, or was rejected) is tried first.
4. The revision's top-level packages are resolved with the environment's interpreter, and a
   package that resolves outside the environment or the checkout is a warning.

The cache is bounded: past `max_bytes`, the least recently used entries are removed.
`--env COMMAND` runs the user's own setup command (`{python}`, `{venv}` placeholders, an
argument list, no shell) in a fresh virtual environment per revision; `--env none` uses the
interpreter given, as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING

# On this machine; on a host the module is concatenated after these, already defined.
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.invocation_source import (
        InvocationUnreadable,
        resolved,
    )

if TYPE_CHECKING:  # the module also runs on build hosts' older interpreters: no run-time alias
    from collections.abc import Callable

# On the gate's machine; on hosts and in pods the program's earlier part defines them.
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.env_lock import LOCK_FILE, lock_use
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.bytecode import (
        COMPILE_PROJECT,
        IMPORT_LIMIT_S,
        project_name,
    )

# The parts (`env_*.py`, sent before this one): on the gate's machine imported here.
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.env_cache import (
        DEFAULT_MAX_BYTES,
        _key,
        _locked,
        _publish,
        _ready,
        prune,
        record_failed_before,
    )
    from release_ledger.adapters.executors.env_installer import (
        LOG_TAIL_BYTES,
        Installer,
        SetupFailed,
        _confined,
        _interpreter,
        _sha256_file,
        _wheel_metadata,
        find_uv,
    )
    from release_ledger.adapters.executors.env_sources import (
        _REQUIREMENT_FILES,  # noqa: F401 (re-exported)
        _REQUIREMENT_GLOBS,  # noqa: F401 (re-exported)
        PRECEDENCE,  # noqa: F401 (re-exported)
        _checkout_text,
        _default_groups,  # noqa: F401 (re-exported)
        _normal,
        _pyproject,
        declared_sources,
        dependency_group,  # noqa: F401 (re-exported)
        in_checkout,
        requirement_files,  # noqa: F401 (re-exported)
        requirements_file_for,  # noqa: F401 (re-exported)
        sanitized_requirements,
    )
    from release_ledger.adapters.executors.env_variables import (
        apply_runtime,
        build_env,
        shard_env,  # noqa: F401 (re-exported)
    )


FORMAT = 4  # bump when the layout or the key's inputs change (4: venvs built in place)
# Read through the build (their dependency declarations reach the key as the wheel's metadata).
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
def installable(checkout: str) -> bool:
    """A Python project a build backend can turn into a wheel."""
    if os.path.isfile(os.path.join(checkout, "setup.py")):
        return True
    if os.path.isfile(os.path.join(checkout, "setup.cfg")):
        return True
    text = _checkout_text(checkout, "pyproject.toml")
    return bool(re.search(r"^\s*\[(project|build-system)\]", text, re.MULTILINE))
# Runs one build step's command confined: (argv, cwd, folders it may write besides the
# checkout and the installers' caches) -> argv to run. An executor that can sandbox builds
# gives one to `prepare` (the local one: bubblewrap); without, steps run as given.
if TYPE_CHECKING:
    Confine = Callable[[list[str], str | None, list[str]], list[str]]
def _clean_checkout(checkout: str, installer: Installer) -> None:
    """Build leftovers (build/, *.egg-info) out of the checkout the tests will run in."""
    if os.path.exists(os.path.join(checkout, ".git")):
        with contextlib.suppress(SetupFailed):
            installer.run(["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
                           "-C", checkout, "clean", "-ffdxq"], what="git clean")  # fmt: skip
def interpreter_tag(interp: dict[str, str]) -> str:
    """What a built wheel and an environment are cached for: the interpreter's kind."""
    return _key({"i": interp["implementation"], "v": interp["version"],
                 "p": interp["platform"], "m": interp["machine"]})[:12]  # fmt: skip
def kept_apart(own_caches: bool) -> dict[str, object]:
    """What keys a build with installers' caches of its own (the candidate's) apart from one
    with the shared caches, in the environments' and the wheels' keys alike: neither ever
    reuses what the other made."""
    return {"own_caches": True} if own_caches else {}
def project_tag(interp: dict[str, str], apart: dict[str, object] | None) -> str:
    """The name a revision's built wheel is cached under beside its commit: the interpreter,
    and apart where the build has installers' caches of its own. Read by the environment
    build and by base's release build (`distributions.build(wheel_only=True)`), so a
    revision's wheel from its tree is built once, by whichever asks first."""
    tag = interpreter_tag(interp)
    return _key({"tag": tag, **apart})[:12] if apart else tag
def project_entry(cache: str, commit: str, tag: str) -> str:
    """Where the commit's wheel built for `tag` (`project_tag`) is cached."""
    return os.path.join(cache, "projects", f"{commit}-{tag}")
def _build_project(
    checkout: str | Callable[[], str], commit: str, cache: str, installer: Installer, tag: str
) -> tuple[str, dict[str, object], bool]:
    """The revision's built wheel (cached per commit), its metadata, and whether reused.
    `checkout` is the tree, or what makes it: called only where the wheel is built here,
    under the entry's lock, so a caller that finds the wheel built makes no clone, and one
    whose entry was pruned meanwhile still builds from a real tree (keyed by `commit`, which
    a tree made on demand must have: a tree given without one is keyed by its path)."""
    if not commit and not isinstance(checkout, str):
        raise TypeError("a checkout made on demand needs the commit its wheel is cached for")
    entry = project_entry(cache, commit or _key({"path": checkout}), tag)
    found = _ready(entry) if commit else None
    if found is not None:
        return os.path.join(entry, "wheel", str(found.get("wheel"))), found, True
    with _locked(cache, os.path.basename(entry)):
        found = _ready(entry) if commit else None
        if found is not None:
            return os.path.join(entry, "wheel", str(found.get("wheel"))), found, True
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        tree = checkout if isinstance(checkout, str) else checkout()
        staging = installer.staging(entry)
        try:
            wheel = installer.wheel(tree, os.path.join(staging, "wheel"))
            _clean_checkout(tree, installer)
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
            _clean_checkout(tree, installer)
            raise
    return os.path.join(entry, "wheel", str(meta["wheel"])), meta, False
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
    apart: dict[str, object] | None = None,
) -> None:  # fmt: skip
    interp = _interpreter(installer.python, installer)
    tag = interpreter_tag(interp)
    # The wheel and the venvs of a build with caches of its own are its alone; the dependency
    # layer (`deps_key`, recorded) is named alike for both.
    built_as = project_tag(interp, apart)
    result["python_version"] = interp["version"]
    wheel, meta, project_reused = _build_project(checkout, commit, cache, installer, built_as)
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
        key = _key({"deps": deps_key, "wheel": meta.get("wheel_sha256", commit), **(apart or {})})
        planned.append((source, digests, deps_key, key))
        if pins:
            break  # one source gives the settings; the package set is the pins
    # A source whose environment is ready is reused with the record of the sources before it
    # that failed when it was built; they are not tried again (`_reusable`).
    reusable = _reusable(planned, cache)
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
                                   str(source["lock"]), tried[len(unreadable):])  # fmt: skip
                        found, built = _ready(entry), True
            if found is None:
                raise SetupFailed("the environment was built but is not readable")
        except SetupFailed as error:
            tried.append({**entry_of, "outcome": "failed", "error": str(error),
                          "log_tail": installer.take_log_tail()})  # fmt: skip
            continue
        installer.take_log_tail()
        if not built and reusable is not None:  # what failed when it was built, and now
            before = found.get("failed_before")
            if isinstance(before, list):
                named = {t.get("source") for t in before if isinstance(t, dict)}
                tried = [t for t in unreadable if t["source"] not in named]
                tried += [dict(t) for t in before if isinstance(t, dict)]
        elif not built:  # the sources before it were tried again now, and failed again
            record_failed_before(entry, key, cache, tried[len(unreadable):])
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
    if _installs_pytest_cov(str(result["packages"])) and "--no-cov" not in pytest_args:
        pytest_args = [*pytest_args, "--no-cov"]  # coverage on by addopts or config: off too
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
    values (`--maxfail 3`, `--maxfail=3`, `-x`), with `--no-cov` where they ask for coverage."""
    kept: list[str] = []
    dropping = False
    for word in options:
        if word.startswith("-"):
            name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
            dropping = name in STOPPING_OPTIONS
        if not dropping:
            kept.append(word)
    # coverage measures the whole run: off in a shard (`domain/invocation.with_coverage_off`)
    asked = any(w == "--cov" or w.startswith(("--cov=", "--cov-")) for w in kept)
    return [*kept, "--no-cov"] if asked and "--no-cov" not in kept else kept
def _installs_pytest_cov(frozen: str) -> bool:
    """Whether the environment has pytest-cov, whose `--cov` a project may turn on in its
    pytest configuration (`addopts`) and whose `fail_under` its coverage configuration may
    set: a shard, a share of the run, then runs with `--no-cov`, as `shard_options` does
    for a declared `--cov`."""
    return any(_package_name(line) == "pytest-cov" for line in frozen.splitlines())


# Asks an interpreter whether pytest-cov is installed for it: exit 0 when it is.
_HAS_PYTEST_COV = (
    "import importlib.metadata as m\n"
    "try:\n    m.distribution('pytest-cov')\n"
    "except m.PackageNotFoundError:\n    raise SystemExit(3)\n"
)


def _coverage_off_where_importable(
    installer: Installer, result: dict[str, object], pythonpath: str
) -> None:
    """`--no-cov` for the shards of an environment the gate did not build (`--env none`,
    `--env COMMAND`, the gate's interpreter) where pytest-cov is installed, as `_auto` does
    for its own: the interpreter the shards run is asked, with the path they get (the
    gate's PYTHONPATH where no venv is theirs, `shard_env`). One that cannot answer keeps
    the project's options as they are."""
    folders = result["runtime"]
    assert isinstance(folders, dict)
    env = dict(installer.env)
    if not folders.get("VIRTUAL_ENV") and pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = [str(result["python"]), "-c", _HAS_PYTEST_COV]
    if installer.step(argv, env=env)[0] == 0:
        assigned = [s for s in folders.get("SET", []) if not s.startswith("PYTEST_ADDOPTS=")]
        folders["SET"] = sorted([*assigned, "PYTEST_ADDOPTS=--no-cov"])


def _package_name(line: str) -> str:
    """The normalised name of a frozen list's line (`name==1.0`, `name @ file:///...`)."""
    return _normal(re.split(r"\s*(==|@)", line.strip(), maxsplit=1)[0])


def _dependencies_only(frozen: str, meta: dict[str, object]) -> str:
    """The frozen list less the project itself (installed from its wheel, by path): the
    package set its tests ran in, comparable between revisions."""
    own = _normal(str(meta.get("name") or ""))
    kept = [
        line for line in frozen.splitlines()
        if _package_name(line) != own
    ]  # fmt: skip
    return "\n".join(kept) + ("\n" if kept else "")
def _reusable(
    planned: list[tuple[dict[str, object], dict[str, str], str, str]], cache: str
) -> tuple[dict[str, object], dict[str, str], str, str] | None:
    """The first planned source whose environment is ready, where every source before it
    failed to build when that environment was built (`failed_before`, by source and detail);
    None where one of them was not tried then (it could not be read, or was rejected, and can
    be now): the sources are then tried in order."""
    for index, (_source, _digests, _deps_key, key) in enumerate(planned):
        found = _ready(os.path.join(cache, "envs", key))
        if found is None:
            continue
        before = found.get("failed_before")
        failed = {
            (t.get("source"), t.get("detail"))
            for t in (before if isinstance(before, list) else [])
            if isinstance(t, dict) and t.get("outcome") == "failed"
        }
        earlier = [(s["source"], s["detail"]) for s, *_ in planned[:index]]
        return planned[index] if all(pair in failed for pair in earlier) else None
    return None


def _build_env(
    checkout: str, wheel: str, entry: str, installer: Installer, source: dict[str, object],
    lock_digest: str, failed_before: list[dict[str, object]],
) -> None:  # fmt: skip
    """A fresh venv with the revision's wheel really installed (so every process the suite
    starts imports it) and the source's dependencies; uv's cache shares the downloads. Its
    `ready.json` keeps the sources before it that failed to build (`failed_before`)."""
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
            # `-I`: the installed pytest, imported with bytecode on, so its bytecode (and
            # that of what it imports) is written here once, not compiled again by the
            # collection and every worker that imports it
            installer.run([python, "-I", "-c", "import pytest"], what="checking for pytest")
        except SetupFailed:
            installer.install(python, ["pytest"], "installing pytest")
        if source["install_project"]:
            # `-I`: the installed project, never a copy in the folder the step runs in
            program = [python, "-I", "-c", COMPILE_PROJECT, project_name(wheel),
                       str(IMPORT_LIMIT_S)]  # fmt: skip
            installer.step(program)  # bytecode of the project and what it imports
        packages = installer.freeze(python)
        _publish(staging, entry, {"packages": packages, "how": installer.how,
                                  "failed_before": failed_before})  # fmt: skip
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
def _command(
    checkout: str, commit: str, cache: str, installer: Installer, command: list[str],
    result: dict[str, object], apart: dict[str, object] | None = None,
) -> None:  # fmt: skip
    interp = _interpreter(installer.python, installer)
    result["python_version"] = interp["version"]
    key = _key({"format": FORMAT, "interpreter": interp, "setup": command, "commit": commit,
                **(apart or {})})  # fmt: skip
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
    own_caches: bool = False,
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

    `own_caches`: the build is the candidate's, with installers' caches of its own (in
    `base_env`, `build_sandbox.own_caches`): its wheel and environments are keyed apart, so a
    build with the shared caches (base's) never reuses what it made, nor the reverse.

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
    apart = kept_apart(own_caches)
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
                  pinned_requirements(pinned), dict(skip_sources or {}), apart)  # fmt: skip
        else:
            result["how"] = "command"
            _command(checkout, commit, cache, installer, list(command or []), result, apart)
        if result["how"] in ("none", "gate-interpreter", "command"):
            given = base_env if base_env is not None else os.environ
            _coverage_off_where_importable(installer, result, given.get("PYTHONPATH", ""))
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
