"""How a revision's declared invocation runs wherever shards run (this machine, a build host, a
pod): where it starts (its working directory, tox's `changedir`, the checkout staying pytest's
rootdir, the environment's site-packages linked in) and the collect-only program whose printed
items say which files it collects. Stdlib only: sent to hosts and pods as a part of their
program (`programs.REMOTE_PARTS`), so each rule has one definition for every executor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

# Where an installed target is named (as `domain/invocation.INSTALLED_PREFIX`: this module
# imports nothing of ours; tests/test_remote_collect.py holds them equal).
INSTALLED = "{site-packages}/"

# Where a run's copy of the checkout shows the environment's site-packages (the gate's pytest
# plugin names a file under it `{site-packages}/...`, as under any site-packages).
SITE_LINK = ".release-ledger-site-packages"

# The plugin's variable naming the checkout where a run starts elsewhere (its `ROOT_VARIABLE`).
FILES_ROOT_VARIABLE = "RELEASE_LEDGER_FILES_ROOT"

# `pytest --collect-only` with the invocation's options (PYTEST_ADDOPTS) and targets, naming
# each item's file by its path (node ids alone cannot say where a file outside the rootdir,
# an installed module, is), and each module that skipped itself whole at import; then each
# module it imported that has no bytecode (`bytecode.UNCOMPILED_MARK`: the gate compiles
# those of the environment it built, where a shard cannot write).
COLLECT_PROGRAM = """
import os, sys, pytest
class Items:
    def pytest_configure(self, config):
        self.root = str(config.rootpath)
    def pytest_collectreport(self, report):
        # a module that skips itself whole at import is a file the run still has to run
        if report.outcome == "skipped" and report.nodeid and "::" not in report.nodeid:
            path = os.path.join(self.root, report.nodeid)
            print("release-ledger-item\\t%s\\t%s" % (path, report.nodeid), flush=True)
    def pytest_collection_finish(self, session):
        for item in session.items:
            print("release-ledger-item\\t%s\\t%s" % (getattr(item, "path", ""), item.nodeid),
                  flush=True)
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[1:]],
                   plugins=[Items()])
import importlib.util
for module in list(sys.modules.values()):
    origin = getattr(getattr(module, "__spec__", None), "origin", None)
    try:
        fresh = isinstance(origin, str) and origin.endswith(".py") and not os.path.exists(
            importlib.util.cache_from_source(origin))
    except (ValueError, NotImplementedError):
        fresh = False
    if fresh:
        print("release-ledger-uncompiled\\t%s" % origin, flush=True)
sys.exit(code)
"""
ITEM_MARK = "release-ledger-item"

# Where a shard's files go in the command a host or pod is sent: named there, from where the
# invocation runs (`start_and_files`), by `with_files`.
FILES_MARK = "@RELEASE_LEDGER_FILES@"


def site_packages_of(python: str, python_version: str) -> str:
    """The site-packages of the environment whose interpreter is `python` (in `venv/bin/`)."""
    version = ".".join(python_version.split(".")[:2])
    venv = os.path.dirname(os.path.dirname(python))
    return os.path.join(venv, "lib", f"python{version}", "site-packages")


def start_and_files(
    checkout: str, workdir: str, site: str, files: Sequence[str]
) -> tuple[str, list[str]]:
    """Where a run starts and the files it names from there: the invocation's working
    directory (`workdir`, relative to the checkout), made as tox makes it, with the checkout as
    pytest's rootdir so node ids stay relative to it. An installed file (`{site-packages}/...`)
    is named through a link to `site` in the checkout: as under tox, whose environment is
    inside the checkout (`.tox/`), pytest finds the project's configuration and root conftest
    above an installed module it is given."""
    named = list(files)
    if any(f.startswith(INSTALLED) for f in files):
        link = os.path.join(checkout, SITE_LINK)
        if not os.path.lexists(link):
            os.symlink(site, link, target_is_directory=True)
        named = [SITE_LINK + "/" + f[len(INSTALLED) :] if f.startswith(INSTALLED) else f
                 for f in files]  # fmt: skip
    if not workdir:
        return checkout, named
    root = os.path.realpath(checkout)
    start = os.path.realpath(os.path.join(checkout, workdir))
    if start != root and not start.startswith(root + os.sep):
        return checkout, named
    os.makedirs(start, exist_ok=True)
    moved = [os.path.relpath(os.path.join(checkout, f), start) for f in named]
    return start, [f"--rootdir={checkout}", *moved]


def with_files(argv: Sequence[str], files: Sequence[str]) -> list[str]:
    """`argv` with `files` where `FILES_MARK` stands, as `expand_command` puts them: one
    argument each for a whole-word mark, joined with spaces inside a longer one."""
    expanded: list[str] = []
    for arg in argv:
        if arg == FILES_MARK:
            expanded.extend(files)
        else:
            expanded.append(arg.replace(FILES_MARK, " ".join(files)))
    return expanded


def collect_targets(invocation: Mapping[str, object] | None) -> tuple[list[str] | None, str]:
    """The targets a collect-only run of the invocation (its plain form, as recorded) names,
    installed ones as `{site-packages}/...`; or None and why it cannot run under pytest."""
    if not invocation:
        return None, "no resolved test invocation"
    runner = str(invocation.get("runner") or "pytest")
    if runner not in ("pytest", "unittest"):  # unittest: run under pytest
        return None, f"the declared runner is {runner}"
    targets: list[str] = []
    for target in invocation.get("targets") or ():  # type: ignore[attr-defined]
        path = str(target["path"])
        targets.append(INSTALLED + path if target.get("installed") else path)
    return targets, ""


def item_paths(output: str, checkout: str) -> list[tuple[str, str]]:
    """The items `COLLECT_PROGRAM` printed, read where it ran: (its file relative to the
    checkout, or the file's absolute real path when elsewhere; the item's name in the file).
    The gate names the files elsewhere (`local.named_items`)."""
    found: list[tuple[str, str]] = []
    root = os.path.realpath(checkout)
    named: dict[str, str] = {}  # each file resolved once, not once per item (64,000 in one)
    for line in output.splitlines():
        mark, _, rest = line.partition("\t")
        path, _, node_id = rest.partition("\t")
        if mark != ITEM_MARK or not path:
            continue
        real = named.get(path)
        if real is None:
            real = os.path.realpath(path)
            if real.startswith(root + os.sep):
                real = os.path.relpath(real, root).replace(os.sep, "/")
            named[path] = real
        found.append((real, node_id.partition("::")[2]))
    return found


def collection_failure(
    exit_code: int | None, signal: int | None, timed_out: bool, oom: bool, output: str
) -> str:
    """Why a collect-only run found nothing to trust (empty when it ran: exit 0, or 5 for no
    tests), with the last line it printed."""
    if timed_out or oom:
        return "collection " + ("timed out" if timed_out else "ran out of memory")
    if exit_code not in (0, 5) or signal is not None:
        tail = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
        return f"collection exited {exit_code}: {tail[0][:200]}"
    return ""
