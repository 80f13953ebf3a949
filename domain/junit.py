"""The strict JUnit evidence reader: report bytes -> `Report` or `Rejection`.

A report counts as a measurement only when it is well formed, self-consistent and attributes
every test case to a file; anything else is a `Rejection` with a reason code and one sentence.
Parsing streams through defusedxml (no DTDs, no entities) and keeps only compact columns per
case, so a million-case report stays fast and small; `Report.cases` materialises on demand.

A report written by the gate's pytest plugin (its root's first property is
`release-ledger.plugin`) is read by node id: each case belongs to the file named by its
`release-ledger.nodeid` property (the file that collected it, so an inherited test method
belongs to the inheriting file) and its test id is that node id; such a report must end with
the plugin's completion marker, or it is rejected as `truncated`. Plain JUnit from any other
runner is read as before, by `file` attributes, suites and classnames.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from hashlib import blake2b, sha256
from typing import Any, Final, Literal, NoReturn
from xml.etree.ElementTree import ParseError
from xml.parsers.expat import XMLParserType

from defusedxml import DefusedXmlException, DTDForbidden, EntitiesForbidden
from defusedxml.ElementTree import DefusedXMLParser

Outcome = Literal["passed", "failed", "error", "skipped", "flaky"]
FAILING: tuple[Outcome, ...] = ("failed", "error")  # the outcomes that are a failure

MAX_TEXT: Final = 4096  # characters kept of each message and text
CHUNK: Final = 1 << 20  # bytes handed to expat at a time

# Outcome codes stored per case (a bytearray), in order of precedence when a case holds several
# results: a failure outranks an error (pytest writes both for a failing test whose teardown
# errors), an error outranks a skip, and a skip outranks a flaky pass.
_PASSED, _FLAKY, _SKIPPED, _ERROR, _FAILED = range(5)
_OUTCOMES: Final[tuple[Outcome, ...]] = ("passed", "flaky", "skipped", "error", "failed")
_RESULT_CODE: Final = {"failure": _FAILED, "error": _ERROR, "skipped": _SKIPPED}
_RERUN_KINDS: Final = frozenset({"flakyFailure", "flakyError", "rerunFailure", "rerunError"})
_SUITE_PARENTS: Final = frozenset({"testsuites", "testsuite"})
# Properties of the gate's pytest plugin (adapters/pytest_plugin/release_ledger_pytest.py).
PLUGIN_PROPERTY: Final = "release-ledger.plugin"
NODEID_PROPERTY: Final = "release-ledger.nodeid"
SUBTEST_PROPERTY: Final = "release-ledger.subtest"
COMPLETE_PROPERTY: Final = "release-ledger.complete"
STOPPED_PROPERTY: Final = "release-ledger.stopped"
BASELINE_PROPERTY: Final = "release-ledger.baseline"
EMPTY_PROPERTY: Final = "release-ledger.empty"
FINISH_PROPERTY: Final = "release-ledger.finish"
WORKERS_PROPERTY: Final = "release-ledger.workers"
FILE_START_PROPERTY: Final = "release-ledger.file-start"
FILE_END_PROPERTY: Final = "release-ledger.file-end"


@dataclass(frozen=True, slots=True)
class FileFigures:
    """What the gate's pytest plugin measured of one file inside a shard run (kB, seconds).

    `collect_kb` is the resident memory importing the module added; `start_*`/`end_*` the
    process's resident memory and peak at the file's first test and after its last teardown;
    with `reset` the peak was reset at the start, so `end_peak_kb` is the file's own peak.
    """

    seconds: float
    collect_kb: int
    start_rss_kb: int
    start_peak_kb: int
    end_rss_kb: int
    end_peak_kb: int
    reset: bool


def _figure_fields(value: str) -> dict[str, str]:
    """`k=v k=v` property values of the plugin (unknown keys kept, malformed parts ignored)."""
    fields: dict[str, str] = {}
    for part in value.split():
        key, sep, number = part.partition("=")
        if sep:
            fields[key] = number
    return fields


def _figures(start: str | None, end: str | None) -> FileFigures | None:
    """A file's figures from its start and end properties (None without both, or malformed)."""
    if start is None or end is None:
        return None
    a, b = _figure_fields(start), _figure_fields(end)
    try:
        seconds = float(b["seconds"])
        kb = [int(x) for x in (a.get("collect_kb", "0"), a["rss_kb"], a["peak_kb"],
                               b["rss_kb"], b["peak_kb"])]  # fmt: skip
    except (KeyError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds < 0 or min(kb) < 0:
        return None
    return FileFigures(seconds, kb[0], kb[1], kb[2], kb[3], kb[4], a.get("reset") == "1")


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a report is not a measurement: a short code and one readable sentence.

    `files` names the expected files the fault points at, when it points at any (a missing
    file, the file that collected a case of another file): the culprits, with no bisection.
    """

    code: str
    message: str
    files: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(frozen=True, slots=True)
class Rerun:
    """A rerun or flaky attempt (Surefire/nextest `flaky*`/`rerun*`), kept as evidence."""

    kind: str
    message: str | None
    text: str | None


@dataclass(frozen=True, slots=True)
class TestCase:
    """One test case as the report states it; `file` is always known for a read case."""

    __test__ = False  # not a pytest test class

    file: str
    classname: str
    name: str
    outcome: Outcome
    message: str | None = None
    text: str | None = None
    time: float | None = None
    reruns: tuple[Rerun, ...] = ()


class Report:
    """A valid report: its test cases in document order and their counts.

    Immutable. Built from compact columns by the reader; the `TestCase` tuple is created on
    first access, so callers that only need counts (`ledger junit`) never pay for it.
    """

    __slots__ = (
        "_build",
        "_cases",
        "_files",
        "baseline_kb",
        "empty_files",
        "errors",
        "failures",
        "figures",
        "finish_kb",
        "flaky",
        "plugin",
        "skipped",
        "subtests",
        "tests",
        "workers",
    )

    _cases: tuple[TestCase, ...] | None
    _build: Callable[[], tuple[TestCase, ...]] | None
    _files: frozenset[str]
    tests: int
    failures: int
    errors: int
    skipped: int
    flaky: int
    subtests: int  # cases that are subtests (gate plugin reports only)
    plugin: bool  # written by the gate's pytest plugin: ids are node ids
    # Plugin reports only: per-file figures, resident memory at session start, and the files
    # given that collected nothing.
    figures: Mapping[str, FileFigures]
    baseline_kb: int | None
    empty_files: frozenset[str]
    finish_kb: int | None  # what writing the report took above the tests' memory
    workers: int  # xdist workers that ran the files (their seconds are work done), else 1

    def __init__(self, cases: Iterable[TestCase]) -> None:
        kept = tuple(cases)
        outcomes = [case.outcome for case in kept]
        counts = [outcomes.count(outcome) for outcome in _OUTCOMES]
        self._init(kept, None, frozenset(case.file for case in kept), counts)

    @classmethod
    def _lazy(
        cls,
        build: Callable[[], tuple[TestCase, ...]],
        files: frozenset[str],
        counts: list[int],
        subtests: int = 0,
        plugin: bool = False,
        figures: Mapping[str, FileFigures] | None = None,
        baseline_kb: int | None = None,
        empty_files: frozenset[str] = frozenset(),
        finish_kb: int | None = None,
        workers: int = 1,
    ) -> Report:
        report = cls.__new__(cls)
        report._init(None, build, files, counts)
        object.__setattr__(report, "subtests", subtests)
        object.__setattr__(report, "plugin", plugin)
        object.__setattr__(report, "figures", dict(figures or {}))
        object.__setattr__(report, "baseline_kb", baseline_kb)
        object.__setattr__(report, "empty_files", empty_files)
        object.__setattr__(report, "finish_kb", finish_kb)
        object.__setattr__(report, "workers", workers)
        return report

    def _init(
        self,
        cases: tuple[TestCase, ...] | None,
        build: Callable[[], tuple[TestCase, ...]] | None,
        files: frozenset[str],
        counts: list[int],
    ) -> None:
        set_ = object.__setattr__
        set_(self, "_cases", cases)
        set_(self, "_build", build)
        set_(self, "_files", files)
        set_(self, "tests", sum(counts))
        set_(self, "failures", counts[_FAILED])
        set_(self, "errors", counts[_ERROR])
        set_(self, "skipped", counts[_SKIPPED])
        set_(self, "flaky", counts[_FLAKY])
        set_(self, "subtests", 0)
        set_(self, "plugin", False)
        set_(self, "figures", {})
        set_(self, "baseline_kb", None)
        set_(self, "empty_files", frozenset())
        set_(self, "finish_kb", None)
        set_(self, "workers", 1)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Report is immutable (cannot set {name})")

    @property
    def cases(self) -> tuple[TestCase, ...]:
        if self._cases is None:
            assert self._build is not None
            object.__setattr__(self, "_cases", self._build())
            object.__setattr__(self, "_build", None)
        assert self._cases is not None
        return self._cases

    @property
    def files(self) -> frozenset[str]:
        """The files the cases belong to (what the gate compares with a shard's files)."""
        return self._files

    @property
    def passed(self) -> int:
        return self.tests - self.failures - self.errors - self.skipped - self.flaky

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Report) and self.cases == other.cases

    def __hash__(self) -> int:
        return hash(self.cases)

    def __repr__(self) -> str:
        return (
            f"Report(tests={self.tests}, failures={self.failures}, errors={self.errors}, "
            f"skipped={self.skipped}, flaky={self.flaky})"
        )


def test_id(case: TestCase) -> str:
    """The id pytest prints: `FILE::NAME`, or `FILE::CLASS::NAME` when a class lies beyond
    the module the file names (nested classes joined with `::`)."""
    classname = case.classname
    if not case.file:  # only in a rejection's sentence: the case that named no file
        return "::".join(part for part in (classname, case.name) if part)
    if not classname or classname == case.file:
        return f"{case.file}::{case.name}"
    if case.file.endswith(".py"):
        stem = case.file[:-3]
        if classname == stem.replace("/", ".") and "." not in stem:
            return f"{case.file}::{case.name}"  # the usual case: the module itself, no class
        module = stem.split("/")
        parts = classname.split(".")
        for start in range(len(module)):
            suffix = module[start:]
            if parts[: len(suffix)] == suffix:
                rest = parts[len(suffix) :]
                return "::".join([case.file, *rest, case.name])
    return f"{case.file}::{classname}::{case.name}"


test_id.__test__ = False  # type: ignore[attr-defined]


# Reports read, by their content and the files expected: a gate reads each stored report in
# its fold, again in the timeline `ledger show` keeps and in the views it catches up (a
# 64,000-case report takes a quarter second each time). The result is immutable and a pure
# function of the key; bounded (FIFO), any entry can be read again.
_READ: dict[tuple[bytes, tuple[str, ...] | None], Report | Rejection] = {}
_READ_MAX: Final = 256
_READ_LOCK = threading.Lock()


def read_report(data: bytes, expected_files: Collection[str] | None = None) -> Report | Rejection:
    """Read one report. `expected_files`, when given, must be exactly the files it covers."""
    files = None if expected_files is None else tuple(expected_files)
    key = (sha256(data).digest(), files)
    found = _READ.get(key)
    if found is None:
        view = memoryview(data)
        found = read_report_chunks((view[i : i + CHUNK] for i in range(0, len(view), CHUNK)), files)
        with _READ_LOCK:
            if len(_READ) >= _READ_MAX:
                del _READ[next(iter(_READ))]
            _READ[key] = found
    return found


def read_report_chunks(
    chunks: Iterable[bytes | memoryview],
    expected_files: Collection[str] | None = None,
    *,
    counts_only: bool = False,
) -> Report | Rejection:
    """As `read_report`, for a report arriving in pieces (a large file read in chunks).

    With `counts_only` (`ledger junit`), the same checks and counts, but no case is kept:
    memory stays flat in the number of cases (duplicates are found by an 8-byte hash of each
    case's identity), and the report's `cases` cannot be asked for."""
    reader = _CountingReader(expected_files) if counts_only else _Reader(expected_files)
    parser = DefusedXMLParser(
        target=reader, forbid_dtd=True, forbid_entities=True, forbid_external=True
    )
    reader.attach(parser.parser)
    size = 0
    try:
        for chunk in chunks:
            if chunk:
                size += len(chunk)
                parser.feed(chunk)
    except ParseError as error:
        return _syntax_rejection(error, reader, final=False)
    except DTDForbidden:
        return Rejection(
            "dtd-forbidden", "the report declares a DTD (<!DOCTYPE>), which is refused"
        )
    except EntitiesForbidden:
        return Rejection("entities-forbidden", "the report declares entities, which are refused")
    except DefusedXmlException as error:
        return Rejection("external-forbidden", f"the report refers to external content ({error})")
    try:
        parser.close()
    except ParseError as error:
        if size == 0:
            return Rejection("empty", "the report is empty (0 bytes)")
        return _syntax_rejection(error, reader, final=True)
    return reader.finish()


def _syntax_rejection(error: ParseError, reader: _Reader, *, final: bool) -> Rejection:
    line, column = error.position
    where = f"line {line}, column {column}"
    what = str(error).rsplit(":", 1)[0]  # drop ": line L, column C"
    if not reader.root_seen:
        if final and error.code == 3:  # "no element found"
            return Rejection("no-root", "the report holds no root element")
        if error.code in (2, 4):  # syntax error / invalid token before any element
            return Rejection("not-xml", f"the report is not XML ({what} at {where})")
    if final:
        return Rejection(
            "truncated", f"the report ends before its root element is closed ({what} at {where})"
        )
    if error.code == 9:  # "junk after document element"
        return Rejection(
            "content-after-root",
            f"the report holds more than whitespace, comments or processing instructions "
            f"after its root element (at {where})",
        )
    return Rejection("malformed", f"the report is not well-formed XML ({what} at {where})")


# When a report breaks several rules, the most fundamental fault is reported (then the first in
# document order): broken structure hides everything else, inconsistent counts are reported even
# when cases also lack files, and so on. Syntax errors (handled above) outrank them all.
_RANK: Final = {
    "not-junit": 1,
    "truncated": 1,
    "content-after-root": 1,
    "misplaced-suites": 1,
    "misplaced-suite": 1,
    "case-under-testsuites": 1,
    "misplaced-case": 1,
    "suite-result": 1,
    "no-count": 2,
    "bad-count": 2,
    "count-mismatch": 2,
    "no-name": 3,
    "duplicate-case": 3,
    "no-file": 4,
    "unexpected-file": 4,
    "file-mismatch": 4,
    "no-tests": 5,
    "missing-file": 6,
}
_STRUCTURAL: Final = 1


class _Broken(Exception):
    """Raised inside a handler when the structure is broken: nothing below can be checked."""


@dataclass(slots=True)
class _Suite:
    label: str
    file: str | None
    tests: int | None
    failures: int | None
    errors: int | None
    at_start: tuple[int, int, int, int, int]  # the reader's tally when the suite opened


def _bounded(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[: MAX_TEXT - 1] + "…"


def _normalize_file(path: str) -> str:
    """Compare paths as pytest prints them: forward slashes, no leading `./`."""
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def _modules(files: Iterable[str]) -> dict[str, str]:
    """Dotted module name -> file, for pytest xunit2 classnames; full paths win, then suffixes
    (a `src/` layout) when unambiguous."""
    full: dict[str, str] = {}
    suffixes: dict[str, str | None] = {}
    for file in files:
        if not file.endswith(".py"):
            continue
        parts = file[:-3].split("/")
        full[".".join(parts)] = file
        for start in range(1, len(parts)):
            dotted = ".".join(parts[start:])
            suffixes[dotted] = file if dotted not in suffixes else None
    modules = {dotted: file for dotted, file in suffixes.items() if file is not None}
    modules.update(full)
    return modules


class _Reader:
    """The parser target: checks every rule as elements stream by and keeps compact columns."""

    def __init__(self, expected_files: Collection[str] | None) -> None:
        self.expected: frozenset[str] | None = (
            None if expected_files is None else frozenset(map(_normalize_file, expected_files))
        )
        self.modules: dict[str, str] | None = None  # made when a case names no file (`_derive`)
        self.expat: XMLParserType | None = None
        self.derived: dict[str, str | None] = {}
        self.normalized: dict[str, str] = {}
        self.fault: Rejection | None = None
        self.fault_rank = 99
        self.root_seen = False
        self.root_closed = False
        # The gate's pytest plugin: its marker, the case's node id and subtest flag, and
        # whether the completion marker came after the last suite.
        self.plugin = False
        self.complete = False
        self.stopped: str | None = None
        self.case_nodeid: str | None = None
        self.case_subtest = False
        self.baseline_kb: int | None = None
        self.finish_kb: int | None = None
        self.workers = 1
        self.declared_empty: set[str] = set()
        self.file_marks: dict[str, dict[str, str]] = {}  # file -> {start, end} property values
        self.case_file = ""
        self.case_classname = ""
        self.subtest_cases = 0
        self.root_totals: tuple[int | None, int | None, int | None] | None = None
        self.stack: list[str] = []
        self.suites: list[_Suite] = []
        self.suite_count = 0
        # Columns, one entry per kept case.
        self.keep = True  # the columns below (False: counts only, see _CountingReader)
        self.names: list[str] = []
        self.groups: list[tuple[str, str]] = []
        self.group_ids: dict[tuple[str, str], int] = {}
        self.case_group = array("I")
        self.times = array("d")
        self.outcomes = bytearray()
        self.details: dict[int, tuple[str | None, str | None]] = {}
        self.reruns: dict[int, tuple[Rerun, ...]] = {}
        self.counts = [0] * len(_OUTCOMES)
        # Producers count failures and errors two ways: test cases holding a <failure> (gtest,
        # vitest, pytest) or <failure> elements (some hand-written fixtures); either matches.
        self.failed_cases = 0
        self.failure_elements = 0
        self.errored_cases = 0
        self.error_elements = 0
        # The case being read.
        self.last_group: tuple[str, str, int] = ("\0", "\0", -1)
        self.case_name = ""
        self.case_group_id = 0
        self.case_time = math.nan
        self.results: list[tuple[str, str | None, list[str]]] = []
        self.capture: list[str] | None = None
        self.captured = 0
        self.capture_depth = 0  # the element whose text is captured: the result or its stackTrace
        self.result_depth = 0

    # -- parser target protocol -------------------------------------------------------------

    def attach(self, expat: XMLParserType) -> None:
        """Take the element events straight from defusedxml's hardened expat parser (its DTD,
        entity and external-reference guards stay installed): the pure-Python ElementTree
        wrapper in between would double the time spent per element. Attributes come as dicts."""
        self.expat = expat
        expat.ordered_attributes = False
        expat.StartElementHandler = self.start
        expat.EndElementHandler = self.end
        expat.ProcessingInstructionHandler = self.processing_instruction

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        stack = self.stack
        parent = stack[-1] if stack else None
        stack.append(tag)
        try:
            if tag == "testcase":
                self._start_case(parent, attrs)
            elif tag == "testsuite":
                self._start_suite(parent, attrs)
            elif parent == "testcase":
                self._start_result(tag, attrs)
            elif parent is None:
                self._start_root(tag, attrs)
            elif tag in _RESULT_CODE and parent == "testsuite":
                self._broken(
                    "suite-result",
                    f"{self.suites[-1].label} holds an <{tag}> outside any test case"
                    if tag == "error"
                    else f"{self.suites[-1].label} holds a <{tag}> outside any test case",
                )
            elif tag == "property" and parent == "properties":
                self._start_property(attrs)
            elif tag == "testsuites":
                self._broken("misplaced-suites", f"a <testsuites> element lies inside <{parent}>")
            elif self.capture is not None and tag == "stackTrace":
                self.capture_depth = len(stack)
        except _Broken:
            self._stop()

    def end(self, tag: str) -> None:
        stack = self.stack
        depth = len(stack)
        stack.pop()
        if tag == "testcase":
            # The hot path (a million times in a large report), kept inline.
            self.capture = None
            if self.plugin:
                self._end_plugin_case()
            self.names.append(self.case_name)
            self.case_group.append(self.case_group_id)
            self.times.append(self.case_time)
            if self.results:
                self._end_results()
            else:
                self.outcomes.append(_PASSED)
        elif self.capture is not None:
            if depth == self.result_depth:
                self.capture = None
            elif depth == self.capture_depth:
                self.capture_depth = self.result_depth
        elif tag == "testsuite":
            self._end_suite()
            self.root_closed = depth == 1
        elif depth == 1:
            self._end_root()
            self.root_closed = True

    def processing_instruction(self, target: str, data: str) -> None:
        if self.root_closed:
            self._note(
                "content-after-root",
                f"the report holds a processing instruction <?{target}?> after its root element",
            )

    def data(self, text: str) -> None:
        capture = self.capture
        if capture is not None and len(self.stack) == self.capture_depth:
            room = MAX_TEXT - self.captured
            if room > 0:
                capture.append(text[:room])
                self.captured += min(len(text), room)

    def close(self) -> None:
        return None

    # -- faults --------------------------------------------------------------------------------

    def _note(self, code: str, message: str, files: tuple[str, ...] = ()) -> None:
        rank = _RANK[code]
        if rank < self.fault_rank:
            self.fault, self.fault_rank = Rejection(code, message, files), rank

    def _broken(self, code: str, message: str) -> NoReturn:
        self._note(code, message)
        raise _Broken

    def _stop(self) -> None:
        """The structure is broken: stop checking rules, but let expat read on, so that a
        syntax error further on (truncation) is reported instead, as the deeper fault."""
        self.capture = None
        if self.expat is not None:
            self.expat.StartElementHandler = self._ignore_start
            self.expat.EndElementHandler = self._ignore_end

    def _start_property(self, attrs: dict[str, str]) -> None:
        stack = self.stack
        owner = stack[-3] if len(stack) >= 3 else None
        name = attrs.get("name", "")
        if not name.startswith("release-ledger."):
            return
        value = attrs.get("value", "")
        if owner == "testcase":
            if self.plugin:
                if name == NODEID_PROPERTY:
                    self.case_nodeid = value
                elif name == SUBTEST_PROPERTY:
                    self.case_subtest = True
        elif owner == "testsuites" and len(stack) == 3:
            if name == PLUGIN_PROPERTY and self.suite_count == 0:
                self.plugin = True
            elif name == COMPLETE_PROPERTY:
                self.complete = True
            elif name == STOPPED_PROPERTY:
                self.stopped = value
            elif name == BASELINE_PROPERTY and self.plugin:
                rss = _figure_fields(value).get("rss_kb", "")
                self.baseline_kb = int(rss) if rss.isdigit() else None
            elif name == EMPTY_PROPERTY and self.plugin:
                self.declared_empty.add(_normalize_file(value))
            elif name == FINISH_PROPERTY and self.plugin:
                kb = _figure_fields(value).get("kb", "")
                self.finish_kb = int(kb) if kb.isdigit() else None
            elif name == WORKERS_PROPERTY and self.plugin and value.isdigit():
                self.workers = max(1, min(int(value), 4096))
        elif owner == "testsuite" and self.plugin and self.suites:
            file = self.suites[-1].file
            if file is not None and name in (FILE_START_PROPERTY, FILE_END_PROPERTY):
                self.file_marks.setdefault(file, {})[name] = value

    def _ignore_start(self, tag: str, attrs: dict[str, str]) -> None:
        self.root_seen = True

    def _ignore_end(self, tag: str) -> None:
        pass

    # -- suites --------------------------------------------------------------------------------

    def _start_root(self, tag: str, attrs: dict[str, str]) -> None:
        self.root_seen = True
        if tag != "testsuites":
            self._broken(
                "not-junit", f"the root element is <{tag}>, not <testsuites> or <testsuite>"
            )
        label = "the root <testsuites>"
        self.root_totals = (
            self._count(label, attrs, "tests", False),
            self._count(label, attrs, "failures", False),
            self._count(label, attrs, "errors", False),
        )

    def _end_root(self) -> None:
        if self.root_totals is None:
            return
        tests, failures, errors = self.root_totals
        label = "the root <testsuites>"
        self._check_counts(label, tests, failures, errors, self._tally())

    def _start_suite(self, parent: str | None, attrs: dict[str, str]) -> None:
        if parent is None:
            self.root_seen = True
        elif parent not in _SUITE_PARENTS:
            self._broken("misplaced-suite", f"a <testsuite> element lies inside <{parent}>")
        self.suite_count += 1
        self.complete = False  # the completion marker must follow the last suite
        name = attrs.get("name")
        label = f'suite "{name}"' if name else f"unnamed suite #{self.suite_count}"
        own_file = attrs.get("file")
        suites = self.suites
        suites.append(
            _Suite(
                label,
                _normalize_file(own_file) if own_file else (suites[-1].file if suites else None),
                self._count(label, attrs, "tests", True),
                self._count(label, attrs, "failures", False),
                self._count(label, attrs, "errors", False),
                self._tally(),
            )
        )

    def _count(self, label: str, attrs: dict[str, str], key: str, required: bool) -> int | None:
        value = attrs.get(key)
        if value is None:
            if required:
                self._note("no-count", f"{label} has no {key} attribute")
            return None
        if not (value.isascii() and value.isdigit()):
            self._note("bad-count", f'{label} declares {key}="{value}", not a non-negative integer')
            return None
        return int(value)

    def _end_suite(self) -> None:
        suite = self.suites.pop()
        now = self._tally()
        since = (
            now[0] - suite.at_start[0],
            now[1] - suite.at_start[1],
            now[2] - suite.at_start[2],
            now[3] - suite.at_start[3],
            now[4] - suite.at_start[4],
        )
        self._check_counts(suite.label, suite.tests, suite.failures, suite.errors, since)

    def _tally(self) -> tuple[int, int, int, int, int]:
        return (
            self._total(),
            self.failed_cases,
            self.failure_elements,
            self.errored_cases,
            self.error_elements,
        )

    def _check_counts(
        self,
        label: str,
        tests: int | None,
        failures: int | None,
        errors: int | None,
        held: tuple[int, int, int, int, int],
    ) -> None:
        cases, failed_cases, failure_elements, errored_cases, error_elements = held
        if tests is not None and tests != cases:
            self._note(
                "count-mismatch", f"{label} declares tests={tests} but holds {cases} test cases"
            )
        for key, declared, by_case, by_element, noun in (
            ("failures", failures, failed_cases, failure_elements, "failed test cases"),
            ("errors", errors, errored_cases, error_elements, "test cases with errors"),
        ):
            if declared is not None and declared not in (by_case, by_element):
                also = "" if by_case == by_element else f" ({by_element} <{key[:-1]}> elements)"
                self._note(
                    "count-mismatch",
                    f"{label} declares {key}={declared} but holds {by_case} {noun}{also}",
                )

    # -- cases ---------------------------------------------------------------------------------

    def _start_case(self, parent: str | None, attrs: dict[str, str]) -> None:
        if parent != "testsuite":
            name = attrs.get("name", "")
            if parent is None:
                self._broken("not-junit", "the root element is <testcase>, not <testsuites>")
            if parent == "testsuites":
                self._broken(
                    "case-under-testsuites",
                    f'test case "{name}" stands directly under <testsuites>, outside any suite',
                )
            self._broken(
                "misplaced-case", f'test case "{name}" lies inside <{parent}>, not a <testsuite>'
            )
        suite = self.suites[-1]
        name = attrs.get("name", "")
        classname = attrs.get("classname", "")
        if not name:
            of_class = f' of class "{classname}"' if classname else ""
            self._note("no-name", f"a test case{of_class} in {suite.label} has no name")
        file = attrs.get("file")
        if self.plugin:  # attributed by node id when the case ends
            self.case_nodeid = None
            self.case_subtest = False
            self.case_file = _normalize_file(file) if file else ""
            self.case_classname = classname
            self.case_name = name
            self._start_time(attrs)
            return
        if file:
            normalized = self.normalized.get(file)
            if normalized is None:
                normalized = self.normalized[file] = _normalize_file(file)
            file = normalized
            if suite.file is not None and file != suite.file:
                self._file_mismatch(name, file, suite)
        else:
            file = suite.file or self._derive(classname)
            if file is None:
                file = ""
                hint = (
                    "and no expected file matches its classname"
                    if self.expected is not None
                    else "(pass the expected files to derive it from the classname)"
                )
                self._note(
                    "no-file",
                    f'test case "{name}" of class "{classname}" in {suite.label} names no '
                    f"file {hint}",
                )
        last_file, last_classname, group = self.last_group
        if file != last_file or classname != last_classname:
            group_key = (file, classname)
            group = self.group_ids.get(group_key, -1)
            if group < 0:
                expected = self.expected
                if file and expected is not None and file not in expected:
                    collected = self._derive(classname)
                    self._note(
                        "unexpected-file",
                        f'test case "{name}" belongs to {file}, which is not an expected file',
                        (collected,) if collected is not None else (),
                    )
                group = self.group_ids[group_key] = len(self.groups)
                self.groups.append(group_key)
            self.last_group = (file, classname, group)
        self.case_name = name
        self.case_group_id = group
        self._start_time(attrs)

    def _start_time(self, attrs: dict[str, str]) -> None:
        time = attrs.get("time")
        if time is None:
            self.case_time = math.nan
        else:
            try:
                self.case_time = float(time)
            except ValueError:
                self.case_time = math.nan
        self.results.clear()

    def _file_mismatch(self, name: str, file: str, suite: _Suite) -> None:
        expected = self.expected
        culprits: tuple[str, ...] = ()
        if expected is not None:
            culprits = tuple(f for f in (suite.file, file) if f in expected)[:1]
        self._note(
            "file-mismatch",
            f'test case "{name}" names file {file} but its {suite.label} is of file {suite.file}',
            culprits,
        )

    def _end_plugin_case(self) -> None:
        """Attribute a case of the gate's plugin by its node id: `FILE::REST` is the file that
        collected it and the test id; a case with no node id falls back to its attributes."""
        suite = self.suites[-1] if self.suites else None
        nodeid = self.case_nodeid
        name = self.case_name
        if nodeid is not None and "::" in nodeid:
            path, _, rest = nodeid.partition("::")
            file, classname, name = _normalize_file(path), "", rest
        else:
            file = self.case_file or (suite.file if suite else None) or ""
            classname = self.case_classname
            if not file:
                self._note("no-file", f'test case "{name}" of the plugin report names no file')
        if suite is not None and suite.file is not None and file and file != suite.file:
            self._file_mismatch(name, file, suite)
        self.case_name = name
        self.subtest_cases += self.case_subtest
        group_key = (file, classname)
        group = self.group_ids.get(group_key, -1)
        if group < 0:
            expected = self.expected
            if file and expected is not None and file not in expected:
                self._note(
                    "unexpected-file",
                    f'test case "{nodeid or name}" was collected from {file}, which is not an '
                    f"expected file",
                )
            group = self.group_ids[group_key] = len(self.groups)
            self.groups.append(group_key)
        self.case_group_id = group

    def _derive(self, classname: str) -> str | None:
        """pytest xunit2 writes no file: take the longest dotted prefix of the classname that
        names a module among the expected files."""
        if classname in self.derived:
            return self.derived[classname]
        found = None
        if self.modules is None:
            self.modules = _modules(self.expected or ())
        parts = classname.split(".")
        for end in range(len(parts), 0, -1):
            found = self.modules.get(".".join(parts[:end]))
            if found is not None:
                break
        self.derived[classname] = found
        return found

    def _start_result(self, tag: str, attrs: dict[str, str]) -> None:
        if tag in _RESULT_CODE or tag in _RERUN_KINDS:
            capture: list[str] = []
            self.results.append((tag, attrs.get("message"), capture))
            self.capture = capture
            self.captured = 0
            self.capture_depth = self.result_depth = len(self.stack)

    def _end_results(self) -> None:
        """The outcome of a case that holds result elements (its columns are appended)."""
        index = self._total() - 1
        results = self.results
        code = _PASSED
        chosen: tuple[str, str | None, list[str]] | None = None
        reruns: list[Rerun] = []
        failed = errored = 0
        for result in results:
            kind = result[0]
            if kind in _RERUN_KINDS:
                reruns.append(Rerun(kind, _bounded(result[1]), "".join(result[2]) or None))
                # Failed attempts with no final failure: the case passed only on a rerun.
                rank = _FLAKY
            else:
                rank = _RESULT_CODE[kind]
                failed += rank == _FAILED
                errored += rank == _ERROR
            if rank > code:
                code, chosen = rank, result
        if failed:
            self.failed_cases += 1
            self.failure_elements += failed
        if errored:
            self.errored_cases += 1
            self.error_elements += errored
        self.counts[code] += 1
        if not self.keep:
            return
        self.outcomes.append(code)
        if chosen is not None:
            self.details[index] = (_bounded(chosen[1]), "".join(chosen[2]) or None)
        if reruns:
            self.reruns[index] = tuple(reruns)

    # -- end of document --------------------------------------------------------------------

    def finish(self) -> Report | Rejection:
        if self.fault_rank > _RANK["duplicate-case"]:
            duplicate = self._duplicate_message()
            if duplicate is not None:
                self._note("duplicate-case", duplicate)
        if not self._total() and not (self.plugin and self.declared_empty):
            self._note("no-tests", "the report holds no test cases")
        files = frozenset(file for file, _ in self.groups)
        if self.expected is not None:
            missing = sorted(self.expected - files - self.declared_empty)
            if missing:
                more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
                self._note(
                    "missing-file",
                    f"expected file {missing[0]} has no test case{more}",
                    tuple(missing),
                )
        if self.plugin and not self.complete:
            why = (
                f"the session did not finish: {self.stopped}"
                if self.stopped
                else "it does not end with the completion marker"
            )
            self._note("truncated", f"the report of the gate's pytest plugin is cut short: {why}")
        if self.fault is not None:
            return self.fault
        counts = self.counts
        counts[_PASSED] = self._total() - sum(counts[_FLAKY:])
        self._release()
        figures = {}
        for file, marks in self.file_marks.items():
            found = _figures(marks.get(FILE_START_PROPERTY), marks.get(FILE_END_PROPERTY))
            if found is not None:
                figures[file] = found
        return Report._lazy(
            self._materialise,
            files,
            counts,
            self.subtest_cases,
            self.plugin,
            figures,
            self.baseline_kb,
            frozenset(self.declared_empty - files),
            self.finish_kb,
            self.workers,
        )

    def _total(self) -> int:
        return len(self.names)

    def _duplicate_message(self) -> str | None:
        duplicate = self._first_duplicate()
        if duplicate is None:
            return None
        return f'test case "{test_id(self._case(duplicate))}" appears more than once'

    def _release(self) -> None:
        """The report keeps this reader for its columns: drop everything else it held."""
        self.expat = None
        self.group_ids = {}
        self.derived = {}
        self.normalized = {}
        self.modules = {}

    def _first_duplicate(self) -> int | None:
        names = self.names
        unseen = set(names)
        if len(unseen) == len(names):  # the common case, at C speed
            return None
        repeated = set()  # names met twice; only their cases need a full identity
        for name in names:
            if name in unseen:
                unseen.discard(name)
            else:
                repeated.add(name)
        del unseen
        groups = self.case_group
        seen: set[tuple[int, str]] = set()
        for index, name in enumerate(names):
            if name in repeated:
                identity = (groups[index], name)
                if identity in seen:
                    return index
                seen.add(identity)
        return None

    def _case(self, index: int) -> TestCase:
        file, classname = self.groups[self.case_group[index]]
        message, text = self.details.get(index, (None, None))
        time = self.times[index]
        return TestCase(
            file,
            classname,
            self.names[index],
            _OUTCOMES[self.outcomes[index]],
            message,
            text,
            None if math.isnan(time) else time,
            self.reruns.get(index, ()),
        )

    def _materialise(self) -> tuple[TestCase, ...]:
        return tuple(self._iter_cases())

    def _iter_cases(self) -> Iterator[TestCase]:
        for index in range(len(self.names)):
            yield self._case(index)


class _CountingReader(_Reader):
    """The reader for counts alone (`ledger junit`): every check, no column per case. Each
    case's identity (its group and name) is kept as an 8-byte blake2b digest in one of 256
    buckets by its first byte, so finding a duplicate needs about 8 bytes per case, and
    never the names themselves."""

    def __init__(self, expected_files: Collection[str] | None) -> None:
        super().__init__(expected_files)
        self.keep = False
        self.total = 0
        self.buckets = [bytearray() for _ in range(256)]

    def end(self, tag: str) -> None:
        if tag != "testcase":
            super().end(tag)
            return
        self.stack.pop()
        self.capture = None
        self.total += 1
        key = f"{self.case_group_id}\0{self.case_name}".encode("utf-8", "surrogatepass")
        digest = blake2b(key, digest_size=8).digest()
        self.buckets[digest[0]] += digest
        if self.results:
            self._end_results()  # passed cases are counted at the end (total - the others)

    def _total(self) -> int:
        return self.total

    def _duplicate_message(self) -> str | None:
        repeated = 0
        for bucket in self.buckets:
            digests = array("Q", bytes(bucket))
            repeated += len(digests) - len(set(digests))
        self.buckets = []
        if not repeated:
            return None
        many = "s appear" if repeated > 1 else " appears"
        return f"{repeated} test case{many} more than once (same file, class and name)"

    def _materialise(self) -> tuple[TestCase, ...]:
        raise ValueError("this report was read for its counts only: its cases were not kept")


# -- a read report as plain data (the read models keep assessments by content) --------------

_OUTCOME_CODE: Final = {outcome: code for code, outcome in enumerate(_OUTCOMES)}


def report_to_data(report: Report) -> list[object]:
    """Everything a `Report` holds, as JSON-ready data (`report_from_data` reads it back to
    an equal report: the same cases in order, counts, files and plugin figures). Arrays, not
    objects: read back three times faster."""
    groups: dict[tuple[str, str], int] = {}
    cases: list[list[object]] = []
    for case in report.cases:
        group = groups.setdefault((case.file, case.classname), len(groups))
        row: list[object] = [group, case.name, _OUTCOME_CODE[case.outcome], case.time]
        if case.message is not None or case.text is not None or case.reruns:
            row += [case.message, case.text]
            if case.reruns:
                row.append([[r.kind, r.message, r.text] for r in case.reruns])
        cases.append(row)
    return [
        [list(group) for group in groups],
        cases,
        [report.passed, report.flaky, report.skipped, report.errors, report.failures],
        report.subtests,
        report.plugin,
        {file: _figure_list(f) for file, f in sorted(report.figures.items())},
        report.baseline_kb,
        sorted(report.empty_files),
        report.finish_kb,
        *([report.workers] if report.workers != 1 else []),  # kept forms before stay equal
    ]


def _figure_list(f: FileFigures) -> list[object]:
    return [f.seconds, f.collect_kb, f.start_rss_kb, f.start_peak_kb, f.end_rss_kb,
            f.end_peak_kb, f.reset]  # fmt: skip


def report_from_data(data: Any) -> Report:
    """The `Report` that `report_to_data` described (parsed JSON); ValueError (or KeyError,
    TypeError, IndexError) when the data is not such a description."""
    groups_data, rows, counts_data, subtests, plugin, figures, baseline, empty, finish = data[:9]
    workers = int(data[9]) if len(data) > 9 else 1
    groups: list[tuple[str, str]] = [(str(file), str(classname)) for file, classname in groups_data]
    counts = [int(n) for n in counts_data]
    if len(counts) != len(_OUTCOMES) or sum(counts) != len(rows):
        raise ValueError("the report's counts are not its cases'")
    cases: list[TestCase] = []
    for row in rows:  # now: a stored form that does not describe cases fails here, not later
        file, classname = groups[row[0]]
        if len(row) == 4:
            cases.append(TestCase(file, classname, row[1], _OUTCOMES[row[2]], None, None, row[3]))
            continue
        reruns = tuple(Rerun(*r) for r in row[6]) if len(row) > 6 else ()
        cases.append(
            TestCase(file, classname, row[1], _OUTCOMES[row[2]], row[4], row[5], row[3], reruns)
        )
    built = tuple(cases)
    return Report._lazy(
        lambda: built,
        frozenset(file for file, _ in groups),
        counts,
        int(subtests),
        bool(plugin),
        {file: FileFigures(*values) for file, values in figures.items()} if figures else None,
        baseline,
        frozenset(empty) if empty else frozenset(),
        finish,
        workers,
    )
