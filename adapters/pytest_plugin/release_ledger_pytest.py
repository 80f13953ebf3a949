"""release-ledger's pytest plugin: an exact, self-checking JUnit XML report.

PYTEST_DONT_REWRITE: a resident worker imports it before pytest's first session (its copies
of fds 1 and 2), so pytest must not ask to rewrite it.

Self-contained on purpose (the standard library and pytest only, nothing of the gate): it is
loaded with `-p release_ledger_pytest` inside other environments, SSH hosts and pods, with this
file's folder on `PYTHONPATH`. Works with pytest 8 and 9.

When loaded together with `--junitxml=PATH`, it replaces pytest's own JUnit writer and writes
PATH itself (atomically: a temporary file renamed into place at session finish):

- one `<testsuite>` per test file, in run order, named and `file`-attributed by the file that
  *collected* the tests (an inherited test method belongs to the file of the class that
  inherits it), paths relative to the directory pytest was started in;
- every `<testcase>` carries the property `release-ledger.nodeid`: the test id the gate uses,
  `FILE::CLASS::NAME[PARAMS]`, which is pytest's node id with the file relative to that
  directory;
- subtests (pytest >= 9's `subtests` fixture and unittest `subTest`, `pytest-subtests` under
  pytest 8) are test cases of their own with the id `PARENT_NODEID [MSG] (K=V, ...)` (pytest's
  own description; `(<subtest>)` when neither message nor parameters are given, ` #2`, ` #3`
  appended to a description repeated under one parent; ` at 0x...` addresses in parameter
  reprs dropped, so the id is stable from run to run) and the property
  `release-ledger.subtest`; the parent keeps its own case with its own outcome, as pytest
  reports it, so the report counts what pytest's summary counts;
- each file's suite carries `release-ledger.file-start` and `release-ledger.file-end`
  properties: resident memory (current and peak, kB, from procfs or `resource`) at the file's
  start and end, its wall seconds, and `collect_kb`, how much resident memory collecting it
  (importing the module) added; the peak is reset at each file's start where Linux allows it
  (`/proc/self/clear_refs`, then `reset=1`), so `peak_kb` at the end is that file's own peak;
  under xdist the root's `release-ledger.workers` says how many workers ran the files (their
  seconds are work done, up to that many times the session's wall time);
  the root's `release-ledger.baseline` is the resident memory at session start (interpreter,
  pytest, plugins, conftests), and its last `release-ledger.finish` how far writing the
  report rose above the tests' memory: the gate's memory model (`domain/memory.py`) is
  built from these figures;
- a file given on the command line that collects no test (and fails no collection) is named
  by a root property `release-ledger.empty`, so a shard report accounts for every file (a
  module, or a `test*.txt` pytest collects for doctests; under xdist, from the workers' ids);
- the root's first property `release-ledger.plugin` (the format version) tells the reader the
  plugin wrote the report, and its last element, written after every suite, is the completion
  marker `release-ledger.complete` (only when the session ran every collected test; a session
  stopped early, by `-x`, `pytest.exit()` or an interrupt, writes `release-ledger.stopped`
  with the reason instead), so a report cut short is recognised even when it is well formed.

pytest's own `junit_*` options (family, suite name, captured output) do not apply to this
report; captured output is not copied into it (failure and error texts are).

Independently of the report, the plugin prints `release-ledger: start FILE` before a file's
first test and `release-ledger: end FILE` after its last teardown, flushed at once, so the log
of a shard killed mid-file names the file that was running.

Time limits: when the gate sets `RELEASE_LEDGER_FILE_LIMITS` (JSON, file -> seconds, from
what each file is known to take), a watchdog thread ends the session as soon as the running
file has run past its limit, after printing `release-ledger: time-limit FILE TEST after S s
(limit L s)` with the test that was running, and exits with code 124; the gate reads that
line in the log (`domain/timing.py`). Under pytest-xdist each worker watches its own run of a
file's tests (a segment, below) against the file's limit, prints the same line on the shard's
log and kills the whole shard (its process group: the controller and every worker), as the
session's end; the gate reads the line the same way.

Under pytest-xdist (`-n N`, e.g. from a project's own `addopts`) the report is written by the
controller, which runs no test: each worker (the plugin is loaded there too, by the same `-p`)
attaches to its reports the test's file (relative to the directory pytest was started in) and,
for each run of consecutive tests of one file on that worker (a *segment*: one per file and
worker with `--dist loadfile`, possibly several with `--dist load`), the worker's memory at the
segment's start and end and its wall seconds. The controller prints `start FILE` when the
file's first segment starts on any worker and `end FILE` once no segment of it is running and
every test of it that the workers collected has finished; the file's `file-start` is its first
segment's start, its `file-end` the last segment's end with the highest peak of all of them,
its seconds the sum over segments (work done, whatever the parallelism). Completion counts the
tests the workers collected; a test whose worker crashed (reported failed by xdist) counts as
finished, as in xdist's own summary.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # annotations only: the plugin imports nothing beyond what it needs
    from collections.abc import Callable

FORMAT_VERSION = "2"  # 2: collect_kb, reset, baseline, empty
PREFIX = "release-ledger"
MARKER = "release-ledger:"
# The checkout a shard's files are named from when it runs elsewhere (its `changedir`).
ROOT_VARIABLE = "RELEASE_LEDGER_FILES_ROOT"
# The link to the environment's site-packages in a run's checkout (the executor's `SITE_LINK`).
SITE_LINK = ".release-ledger-site-packages"
LIMITS_VARIABLE = "RELEASE_LEDGER_FILE_LIMITS"
TIME_LIMIT_EXIT = 124  # as timeout(1) exits
# The session's own stdout, kept before pytest captures fd 1 (`-p` imports the plugin first):
# a test that hangs runs with its output captured, and the time-limit line must reach the log.
_STDOUT = os.dup(1) if os.environ.get(LIMITS_VARIABLE) else 1
# An xdist worker's stdout is xdist's channel to the controller; its stderr is the shard's log.
_STDERR = os.dup(2) if os.environ.get(LIMITS_VARIABLE) else 2
MAX_MESSAGE = 1024
MAX_TEXT = 64 * 1024

# `<object at 0x7f...>` in a subtest parameter's repr differs from run to run: dropped, so a
# subtest's id is the same at base and head (repeats are then numbered).
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: object, limit: int = MAX_TEXT) -> str:
    value = str(text)
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return _ILLEGAL_XML.sub(lambda m: f"#x{ord(m.group()):02X}", value)


def _reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux >= 4.0), so the next reading of the
    peak is the peak since now; False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _memory_kb() -> tuple[int, int]:
    """(current, peak) resident set size of this process in kB; procfs first, else resource."""
    current = peak = 0
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmRSS:"):
                    current = int(line.split()[1])
                elif line.startswith(b"VmHWM:"):
                    peak = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    if not peak:
        try:
            import resource

            peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            if sys.platform == "darwin":
                peak //= 1024  # bytes there, kB elsewhere
        except (ImportError, OSError, ValueError):
            peak = 0
    return current, max(peak, current)


class _Case:
    __slots__ = ("classname", "file", "name", "nodeid", "results", "subtest", "time")

    def __init__(self, file: str, classname: str, name: str, nodeid: str, subtest: str) -> None:
        self.file = file
        self.classname = classname
        self.name = name
        self.nodeid = nodeid
        self.subtest = subtest
        self.time = 0.0
        self.results: list[tuple[str, dict[str, str], str]] = []  # (tag, attrs, text)

    def has(self, tag: str) -> bool:
        return any(result[0] == tag for result in self.results)


class _File:
    __slots__ = (
        "cases",
        "collect_kb",
        "end",
        "name",
        "open",
        "reset",
        "seconds",
        "start",
        "started",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.cases: list[_Case] = []
        self.start: tuple[int, int] = (0, 0)
        self.end: tuple[int, int] | None = None
        self.seconds = 0.0
        self.started = 0.0
        self.collect_kb = 0
        self.reset = False
        self.open = 0  # segments running on xdist workers


# The attributes a worker adds to its test reports (xdist sends them to the controller).
FILE_ATTR = "release_ledger_file"
MARK_ATTR = "release_ledger_mark"


def _named(path: str, root: str) -> str:
    """A file as the report names it: relative to `root`; a module of an installed package
    (outside it, in a site-packages) by its path inside site-packages, the same at every
    revision (`{site-packages}/pkg/mod.py`)."""
    relative = os.path.relpath(path, root).replace(os.sep, "/")
    normal = path.replace(os.sep, "/")
    if relative.startswith(SITE_LINK + "/"):  # the gate's view of the environment's
        return "{site-packages}/" + relative[len(SITE_LINK) + 1 :]
    if relative.startswith("../") and "/site-packages/" in normal:
        return "{site-packages}/" + normal.rsplit("/site-packages/", 1)[1]
    return relative


def _files_root(config: pytest.Config) -> str:
    """What the report's file names are relative to: the checkout, where the gate runs the
    shard in a working directory of the project's (tox's `changedir`) and names it here."""
    return os.environ.get(ROOT_VARIABLE) or str(config.invocation_params.dir)


class WorkerMarks:
    """On an xdist worker: each report names its test's file; the first report of a segment
    (consecutive tests of one file) carries the worker's memory at its start, the last one
    (the teardown before a test of another file, or the last) its memory at its end and the
    segment's wall seconds."""

    def __init__(self, config: pytest.Config) -> None:
        self.root = _files_root(config)
        self.file: str | None = None
        self.following: str | None = None
        self.started = 0.0
        self.pending_start: tuple[int, int] | None = None
        self.running_test = ""
        # This worker's run of one file against the file's limit (never sooner than without
        # xdist: a segment is at most the whole file); its end ends the whole shard.
        _watch_limits(_parse_limits(os.environ.get(LIMITS_VARIABLE)), self._running,
                      out=_STDERR, whole_group=True)  # fmt: skip

    def _running(self) -> tuple[str | None, float, str]:
        return self.file, self.started, self.running_test

    def _file_of(self, item: pytest.Item) -> str:
        path = getattr(item, "path", None)
        if path is None:
            return item.nodeid.split("::", 1)[0]
        return _named(str(path), self.root)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        name = self._file_of(item)
        if name != self.file:
            # the start first: the watchdog never sees the new file with the old one's start
            self.started = time.perf_counter()
            self.file = name
            self.pending_start = _memory_kb()
        self.following = None if nextitem is None else self._file_of(nextitem)
        self.running_test = item.nodeid
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        outcome = yield
        report = outcome.get_result()
        name = self._file_of(item)
        setattr(report, FILE_ATTR, name)
        mark: dict[str, object] = {}
        if self.pending_start is not None:
            mark["start"] = list(self.pending_start)
            self.pending_start = None
        if call.when == "teardown" and self.following != name:
            mark["end"] = list(_memory_kb())
            mark["seconds"] = time.perf_counter() - self.started
            self.file = None
        if mark:
            setattr(report, MARK_ATTR, mark)


def _without_prefix(text: str, prefix: str) -> str:
    """`str.removeprefix`, which Python 3.8 lacks (the plugin runs on every interpreter of a
    matrix)."""
    return text[len(prefix) :] if text.startswith(prefix) else text


def _subtest_description(report: Any) -> str | None:
    """`[msg] (k=v, ...)` for a subtest report (pytest 9 or pytest-subtests), else None."""
    context = getattr(report, "context", None)
    if context is None or not type(report).__name__.lower().startswith("subtest"):
        return None
    msg = getattr(context, "msg", None)
    kwargs = getattr(context, "kwargs", None) or {}
    # pytest 9 stores each value already repr'd (saferepr); pytest-subtests keeps the object.
    already = type(report).__module__.startswith("_pytest")
    parts = []
    if isinstance(msg, str):
        parts.append(f"[{msg}]")
    if kwargs:
        values = ", ".join(f"{k}={v if already else repr(v)}" for k, v in kwargs.items())
        parts.append(f"({values})")
    return _ADDRESS.sub("", " ".join(parts)) or "(<subtest>)"


def _skipped(report: Any) -> tuple[str, dict[str, str], str]:
    """The `<skipped>` result of a skipped test or of a module that skipped itself."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = _without_prefix(str(reason), "Skipped: ")
    return ("skipped", {"type": "pytest.skip", "message": _clean(reason, MAX_MESSAGE)},
            _clean(reason))  # fmt: skip


def _message(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    text = str(report.longrepr)
    return text.splitlines()[0] if text else ""


class ReleaseLedgerReport:
    """Collects every report of the session and writes the JUnit XML at its end."""

    def __init__(self, config: pytest.Config, path: str) -> None:
        self.config = config
        self.path = os.path.abspath(path)
        self.root = _files_root(config)
        self.files: dict[str, _File] = {}
        self.cases: dict[str, _Case] = {}
        self.subtest_names: dict[str, dict[str, int]] = {}
        self.paths: dict[str, object] = {}  # node id -> the path of the module that collected it
        self.current: _File | None = None
        self.collected = 0
        self.finished = 0
        self.started = time.time()
        self.baseline_kb = _memory_kb()[0]
        self.collect_kb: dict[str, int] = {}  # file -> resident memory its collection added
        self.empty: list[str] = []  # files given that collected nothing
        self.items: list[pytest.Item] = []
        self.shared = False  # collection's unattributed memory shared out (at the first test)
        self.finishing: tuple[str | None, float, int] | None = None  # (stopped, seconds, kB)
        # xdist: the ids the workers collected, by the file part of the node id, not finished
        self.pending: dict[str, set[str]] | None = None
        self.running_test = ""  # the node id of the test running now (time limits)
        self.workers: set[str] = set()  # xdist: the workers (files' seconds sum theirs)
        self._limits = _watch_limits(
            _file_limits(config), self._running, out=_STDOUT, whole_group=False
        )

    def _running(self) -> tuple[str | None, float, str]:
        entry = self.current
        if entry is None:
            return None, 0.0, self.running_test
        return entry.name, entry.started, self.running_test

    # -- paths and ids ---------------------------------------------------------------------

    def _file_of(self, path: object, fallback: str) -> str:
        if path is None:
            return fallback.split("::", 1)[0]
        return _named(str(path), self.root)

    def _case(self, nodeid: str, path: object, subtest: str | None = None) -> _Case:
        file = self._file_of(path, nodeid)
        rest = nodeid.split("::", 1)[1] if "::" in nodeid else ""
        module = file[:-3] if file.endswith(".py") else file
        dotted = module.replace("/", ".")
        # A collector's own case (a module that failed to import or skipped itself) gets the
        # id pytest's JUnit writer gives it: FILE::dotted.module.
        test_id = f"{file}::{rest}" if rest else f"{file}::{dotted}"
        description = ""
        if subtest is not None:
            seen = self.subtest_names.setdefault(test_id, {})
            count = seen[subtest] = seen.get(subtest, 0) + 1
            description = subtest if count == 1 else f"{subtest} #{count}"
            test_id = f"{test_id} {description}"
        case = self.cases.get(test_id)
        if case is None:
            parts = rest.split("::") if rest else []
            classname = ".".join([dotted, *parts[:-1]]) if parts else ""
            name = parts[-1] if parts else dotted
            if description:
                name = f"{name} {description}"
            case = _Case(file, classname, name, test_id, description)
            self.cases[test_id] = case
            self._file(file).cases.append(case)
        return case

    def _file(self, name: str) -> _File:
        entry = self.files.get(name)
        if entry is None:
            entry = self.files[name] = _File(name)
            entry.start = _memory_kb()
        return entry

    # -- markers ---------------------------------------------------------------------------

    def _say(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            # A marker starts its own line: `write_line` breaks only a line pytest's per-file
            # progress opened, not xdist's progress dots.
            writer = getattr(reporter, "_tw", None)
            if getattr(writer, "width_of_current_line", 0):
                reporter.write("\n")
            reporter.write_line(line)
            reporter.flush()
        else:
            sys.stdout.write(f"\n{line}\n")
            sys.stdout.flush()

    def start_file(self, name: str) -> None:
        entry = self._file(name)
        if not entry.started:
            entry.start = _memory_kb()
            if not self.shared:
                self.shared = True
                self._share_collection(self.items, entry.start[0])
            entry.reset = _reset_peak()
        entry.started = time.perf_counter()
        self.current = entry
        self._say(f"{MARKER} start {name}")

    def end_file(self) -> None:
        entry = self.current
        if entry is None:
            return
        entry.seconds += time.perf_counter() - entry.started
        entry.end = _memory_kb()
        self.current = None
        self._say(f"{MARKER} end {entry.name}")

    # -- hooks -----------------------------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        self.paths[item.nodeid] = getattr(item, "path", None)
        name = self._file_of(self.paths[item.nodeid], item.nodeid)
        if self.current is None or self.current.name != name:
            self.end_file()
            self.start_file(name)
        # The case exists, in run order; its id names the test if the file's time runs out.
        self.running_test = self._case(item.nodeid, getattr(item, "path", None)).nodeid
        yield
        self.finished += 1
        following = None
        if nextitem is not None:
            following = self._file_of(getattr(nextitem, "path", None), nextitem.nodeid)
        if following != name:
            self.end_file()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = len(session.items)
        self.items = list(session.items)
        with_items = {
            self._file_of(getattr(item, "path", None), item.nodeid) for item in session.items
        }
        self._declare_empty(with_items)

    def _declare_empty(self, with_items: set[str]) -> None:
        """The files given that collected no item. Any file, not only modules: pytest collects
        `test*.txt` as doctest text files, and one that holds no example is as empty as a
        module without tests."""
        self.empty = []
        for arg in self.config.args:
            path = os.path.abspath(os.path.join(self.root, arg))
            if "::" in arg or not os.path.isfile(path):
                continue
            name = self._file_of(path, arg)
            if name not in with_items and name not in self.cases_by_file():
                self.empty.append(name)

    def _share_collection(self, items: list[pytest.Item], now_kb: int) -> None:
        """Collection grows memory outside any one module's import too (test items, classes,
        parametrisation, the run loop's setup): what the files' own collection does not
        account for, up to the first test, is shared out by their number of items, so the
        files' `collect_kb` add up to the whole."""
        counts: dict[str, int] = {}
        for item in items:
            name = self._file_of(getattr(item, "path", None), item.nodeid)
            counts[name] = counts.get(name, 0) + 1
        # A collector of a file that holds no item (a helper module a config collects) is
        # part of the whole, not a file's own.
        self.collect_kb = {name: kb for name, kb in self.collect_kb.items() if name in counts}
        grown = max(0, now_kb - self.baseline_kb - sum(self.collect_kb.values()))
        total = sum(counts.values())
        for name, count in counts.items():
            self.collect_kb[name] = self.collect_kb.get(name, 0) + grown * count // total

    def cases_by_file(self) -> set[str]:
        """Files that already have a case (a collection error or a module-level skip)."""
        return {case.file for case in self.cases.values()}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        path = getattr(collector, "path", None)
        if path is None or not str(path).endswith(".py") or not os.path.isfile(str(path)):
            yield  # the session, a directory or a package: no one file's cost
            return
        before = _memory_kb()[0]
        yield
        grown = max(0, _memory_kb()[0] - before)
        name = self._file_of(getattr(collector, "path", None), collector.nodeid)
        self.collect_kb[name] = self.collect_kb.get(name, 0) + grown

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.workers.add(str(getattr(getattr(node, "gateway", None), "id", None) or id(node)))
        if self.pending is not None:  # every worker collects the same ids
            return
        self.pending = {}
        for nodeid in ids:
            self.pending.setdefault(nodeid.split("::", 1)[0], set()).add(nodeid)
        self.collected = len(ids)
        rootdir = str(self.config.rootpath)  # node ids are relative to it
        self._declare_empty(
            {self._file_of(os.path.join(rootdir, key), key) for key in self.pending}
        )

    def _remote(self, report: Any, name: str, description: str | None) -> None:
        """A worker's report (xdist): its segment marks, and the file's end once done; or
        xdist's own report of a test whose worker crashed (the segment ends with it)."""
        entry = self._file(name)
        if report.when == "???":
            entry.open = max(0, entry.open - 1)
        mark = getattr(report, MARK_ATTR, None) or {}
        start = mark.get("start")
        if start:
            if not entry.open and entry.end is None and not entry.seconds:
                entry.start = (int(start[0]), int(start[1]))
                self._say(f"{MARKER} start {name}")
            entry.open += 1
        if "end" in mark:
            entry.open = max(0, entry.open - 1)
            entry.seconds += float(mark.get("seconds") or 0.0)
            rss, peak = (int(v) for v in mark["end"])
            if entry.end is not None:
                peak = max(peak, entry.end[1])
            entry.end = (rss, peak)
        if description is not None or report.when not in ("teardown", "???"):
            return
        key = str(report.nodeid).split("::", 1)[0]
        pending = (self.pending or {}).get(key)
        if pending is not None and report.nodeid in pending:
            pending.discard(report.nodeid)
            self.finished += 1
        if not entry.open and not pending:
            self._say(f"{MARKER} end {name}")

    @pytest.hookimpl(trylast=True)  # after pytest 9 marked a parent with failed subtests failed
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = self._item_path(report)
        description = _subtest_description(report)
        if hasattr(report, FILE_ATTR):  # from an xdist worker (its subtests' reports follow)
            path = self.paths[report.nodeid] = os.path.join(self.root, getattr(report, FILE_ATTR))
            self._remote(report, self._file_of(path, report.nodeid), description)
        elif self.pending is not None and report.when == "???":  # xdist: the worker crashed
            self._remote(report, self._file_of(path, report.nodeid), description)
        case = self._case(report.nodeid, path, description)
        case.time += float(getattr(report, "duration", 0.0) or 0.0)
        when = report.when
        outcome = report.outcome
        if outcome == "rerun":  # pytest-rerunfailures: a failed attempt, then run again
            case.results.append(
                ("rerunFailure", {"message": _clean(_message(report), MAX_MESSAGE)},
                 _clean(report.longreprtext))
            )  # fmt: skip
            return
        if report.passed:
            return
        if report.skipped:
            if hasattr(report, "wasxfail"):
                reason = _without_prefix(str(report.wasxfail), "reason: ")
                attrs = {"type": "pytest.xfail", "message": _clean(reason, MAX_MESSAGE)}
                case.results.append(("skipped", attrs, ""))
            else:
                case.results.append(_skipped(report))
            return
        if when in ("call", "???"):  # "???": xdist's report of a test whose worker crashed,
            attrs = {"message": _clean(_message(report), MAX_MESSAGE)}  # "failed" in its summary
            case.results.append(("failure", attrs, _clean(report.longreprtext)))
        else:
            attrs = {"message": _clean(f"failed on {when}: {_message(report)}", MAX_MESSAGE)}
            case.results.append(("error", attrs, _clean(report.longreprtext)))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.passed:
            return
        path = self._collector_path(report)
        case = self._case(report.nodeid, path)
        if report.failed:
            case.results.append(
                ("error", {"message": "collection failure"}, _clean(report.longreprtext))
            )
        else:
            case.results.append(_skipped(report))

    def _item_path(self, report: Any) -> object:
        return self.paths.get(report.nodeid)

    def _collector_path(self, report: Any) -> object:
        nodeid = str(report.nodeid).split("::", 1)[0]
        return os.path.join(str(self.config.rootpath), nodeid) if nodeid else None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.started = time.time()
        self.baseline_kb = _memory_kb()[0]  # before any test module is imported

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.end_file()
        stopped = None
        if session.shouldfail:
            stopped = f"stopped early: {session.shouldfail}"
        elif session.shouldstop:
            stopped = f"stopped early: {session.shouldstop}"
        elif int(exitstatus) not in (0, 1, 5):
            stopped = f"pytest exit status {int(exitstatus)}"
        elif self.finished < self.collected:
            stopped = f"ran {self.finished} of {self.collected} collected tests"
        # Written at unconfigure, the session's very end, so the report's figure for what
        # finishing took (summaries, this report) covers all of it.
        self.finishing = (stopped, time.time() - self.started, _memory_kb()[0])
        _reset_peak()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._limits.set()
        if self.finishing is not None:
            stopped, seconds, before = self.finishing
            self.finishing = None
            self.write(stopped, seconds, before)

    # -- the report ------------------------------------------------------------------------

    def write(self, stopped: str | None, seconds: float, before_kb: int | None = None) -> None:
        root = ET.Element("testsuites", name="pytest")
        head = ET.SubElement(root, "properties")
        ET.SubElement(head, "property", name=f"{PREFIX}.plugin", value=FORMAT_VERSION)
        ET.SubElement(head, "property", name=f"{PREFIX}.pytest", value=pytest.__version__)
        ET.SubElement(
            head, "property", name=f"{PREFIX}.baseline", value=f"rss_kb={self.baseline_kb}"
        )
        if len(self.workers) > 1:  # files' seconds are work done by this many at once
            count = str(len(self.workers))
            ET.SubElement(head, "property", name=f"{PREFIX}.workers", value=count)
        with_cases = self.cases_by_file()  # a collection error reported after the ids
        for name in (name for name in self.empty if name not in with_cases):
            ET.SubElement(head, "property", name=f"{PREFIX}.empty", value=_clean(name))
        totals = [0, 0, 0, 0]
        for entry in self.files.values():
            counts = [
                len(entry.cases),
                sum(case.has("failure") for case in entry.cases),
                sum(case.has("error") for case in entry.cases),
                sum(case.has("skipped") for case in entry.cases),
            ]
            totals = [total + counts[i] for i, total in enumerate(totals)]  # no zip(strict=) on 3.8
            suite = ET.SubElement(
                root,
                "testsuite",
                name=_clean(entry.name),
                file=_clean(entry.name),
                tests=str(counts[0]),
                failures=str(counts[1]),
                errors=str(counts[2]),
                skipped=str(counts[3]),
                time=f"{entry.seconds:.3f}",
            )
            properties = ET.SubElement(suite, "properties")
            start_rss, start_peak = entry.start
            ET.SubElement(
                properties, "property", name=f"{PREFIX}.file-start",
                value=f"rss_kb={start_rss} peak_kb={start_peak} "
                f"collect_kb={self.collect_kb.get(entry.name, 0)} reset={int(entry.reset)}",
            )  # fmt: skip
            if entry.end is not None:
                end_rss, end_peak = entry.end
                ET.SubElement(
                    properties, "property", name=f"{PREFIX}.file-end",
                    value=f"seconds={entry.seconds:.3f} rss_kb={end_rss} peak_kb={end_peak}",
                )  # fmt: skip
            for case in entry.cases:
                element = ET.SubElement(
                    suite,
                    "testcase",
                    classname=_clean(case.classname),
                    name=_clean(case.name),
                    file=_clean(case.file),
                    time=f"{case.time:.3f}",
                )
                case_properties = ET.SubElement(element, "properties")
                ET.SubElement(
                    case_properties, "property", name=f"{PREFIX}.nodeid", value=_clean(case.nodeid)
                )
                if case.subtest:
                    ET.SubElement(
                        case_properties, "property", name=f"{PREFIX}.subtest",
                        value=_clean(case.subtest),
                    )  # fmt: skip
                for tag, attrs, text in case.results:
                    result = ET.SubElement(element, tag, attrs)
                    if text:
                        result.text = text
        root.set("tests", str(totals[0]))
        root.set("failures", str(totals[1]))
        root.set("errors", str(totals[2]))
        root.set("skipped", str(totals[3]))
        root.set("time", f"{seconds:.3f}")
        tail = ET.SubElement(root, "properties")
        if stopped is None:
            ET.SubElement(tail, "property", name=f"{PREFIX}.complete", value=str(totals[0]))
        else:
            ET.SubElement(tail, "property", name=f"{PREFIX}.stopped", value=_clean(stopped))
        data = b'<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="utf-8")
        # What finishing took above the tests' own memory (summaries, this report: it grows
        # with the cases), the peak having been reset when the session finished: added
        # last, inside the closing properties, so the whole stays one document.
        if before_kb is not None:
            closing = b"</properties></testsuites>"
            spike = max(0, _memory_kb()[1] - before_kb)
            marker = (
                ET.tostring(
                    ET.Element("property", name=f"{PREFIX}.finish", value=f"kb={spike}"),
                    encoding="utf-8",
                )
                .split(b"?>", 1)[-1]
                .strip()
            )
            if data.endswith(closing):
                data = data[: -len(closing)] + marker + closing
        folder = os.path.dirname(self.path) or "."
        os.makedirs(folder, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".junit-", suffix=".xml", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


def _take_over_junitxml(config: pytest.Config) -> str | None:
    """Unregister pytest's own JUnit writer; return the path it would have written."""
    path = getattr(config.option, "xmlpath", None)
    if not path:
        return None
    if hasattr(config, "workerinput"):  # an xdist worker: marks on its reports, no report
        config.pluginmanager.register(WorkerMarks(config), "release-ledger-worker")
        return None
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - pytest < 7
        return None
    logxml = config.stash.get(xml_key, None)
    if logxml is not None:
        config.pluginmanager.unregister(logxml)
        del config.stash[xml_key]
    return str(path)


def _file_limits(config: pytest.Config) -> dict[str, float]:
    """The gate's time limit per file, or none: without the variable, under xdist (a
    worker, or a controller of several), or when it does not parse."""
    raw = os.environ.get(LIMITS_VARIABLE)
    if not raw or hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None):
        return {}
    return _parse_limits(raw)


def _watch_limits(
    limits: dict[str, float],
    running: Callable[[], tuple[str | None, float, str]],
    *,
    out: int,
    whole_group: bool,
) -> threading.Event:
    """With limits, a watchdog thread: once the running file (`running`: file, its start,
    the test) has run past its limit, print the time-limit line on `out` and end the
    process, with its whole process group when `whole_group` (an xdist worker ends the
    controller and the other workers too). Setting the event returned stops it (the session
    ended: a resident worker runs the next shard's session in the same process)."""
    stop = threading.Event()
    if not limits:
        return stop

    def watch() -> None:
        while not stop.wait(0.1):
            file, started, _ = running()
            limit = limits.get(file) if file is not None else None
            if limit is None or not started:
                continue
            ran = time.perf_counter() - started
            now, _, test = running()
            if ran <= limit or now != file:
                continue
            line = (f"\n{MARKER} time-limit {file} {test or '-'} after {ran:.1f} s "
                    f"(limit {limit:g} s)\n")  # fmt: skip
            os.write(out, line.encode("utf-8", "replace"))
            if whole_group:
                with contextlib.suppress(OSError):
                    os.killpg(0, signal.SIGKILL)
            os._exit(TIME_LIMIT_EXIT)

    threading.Thread(target=watch, name="release-ledger-limits", daemon=True).start()
    return stop


def _parse_limits(raw: str | None) -> dict[str, float]:
    if not raw:
        return {}
    try:
        given = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(given, dict):
        return {}
    # (int, float): the plugin runs on every interpreter of a matrix, 3.8 and 3.9 included
    return {str(f): float(s) for f, s in given.items() if isinstance(s, (int, float)) and s > 0}


@pytest.hookimpl(trylast=True)  # after junitxml's own pytest_configure made its writer
def pytest_configure(config: pytest.Config) -> None:
    path = _take_over_junitxml(config)
    if path is not None:
        config.pluginmanager.register(ReleaseLedgerReport(config, path), "release-ledger-report")
