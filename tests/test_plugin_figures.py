"""The reader takes the plugin's per-file memory figures, its declared empty files and what
finishing took — from plugin reports only — and the gate turns them into the memory model."""

from __future__ import annotations

from release_ledger.domain.junit import FileFigures, Report, read_report
from release_ledger.domain.memory import file_terms

HEAD = (
    '<?xml version="1.0" encoding="utf-8"?>\n<testsuites tests="{tests}" failures="0" errors="0">'
    "<properties>{root}</properties>"
)
SUITE = (
    '<testsuite name="{f}" file="{f}" tests="1" failures="0" errors="0"><properties>'
    '<property name="release-ledger.file-start" value="{start}" />'
    '<property name="release-ledger.file-end" value="{end}" /></properties>'
    '<testcase classname="x" name="test_{n}" file="{f}" time="0.1"><properties>'
    '<property name="release-ledger.nodeid" value="{f}::test_{n}" /></properties></testcase>'
    "</testsuite>"
)
TAIL = (
    '<properties><property name="release-ledger.complete" value="{tests}" />'
    '<property name="release-ledger.finish" value="kb=2048" /></properties></testsuites>'
)
PLUGIN = '<property name="release-ledger.plugin" value="2" />'


def report(root: str, suites: list[tuple[str, str, str]]) -> bytes:
    body = "".join(
        SUITE.format(f=f, start=start, end=end, n=i) for i, (f, start, end) in enumerate(suites)
    )
    tests = len(suites)
    return (HEAD.format(tests=tests, root=root) + body + TAIL.format(tests=tests)).encode()


A_START = "rss_kb=40960 peak_kb=40960 collect_kb=10240 reset=1"
A_END = "seconds=0.500 rss_kb=51200 peak_kb=153600"
B_START = "rss_kb=51200 peak_kb=51200 collect_kb=0 reset=1"
B_END = "seconds=0.250 rss_kb=51200 peak_kb=51200"


def test_figures_baseline_empty_files_and_finish_are_read_from_plugin_reports() -> None:
    data = report(
        PLUGIN + '<property name="release-ledger.baseline" value="rss_kb=30720" />'
        '<property name="release-ledger.empty" value="t/test_none.py" />',
        [("t/test_a.py", A_START, A_END), ("t/test_b.py", B_START, B_END)],
    )
    read = read_report(data, ["t/test_a.py", "t/test_b.py", "t/test_none.py"])
    assert isinstance(read, Report), read
    assert read.baseline_kb == 30720 and read.finish_kb == 2048
    assert read.empty_files == frozenset({"t/test_none.py"})  # accounted for: no missing-file
    assert read.figures["t/test_a.py"] == FileFigures(0.5, 10240, 40960, 40960, 51200, 153600, True)
    split = file_terms(read, "t/test_a.py")
    # keeps its import (10 MB) and run growth (10 MB) plus its share of finishing (1 MB);
    # rose 100 MB above what it kept; run cold it needs no more than it kept.
    assert split == {
        "baseline_mb": 30.0, "retained_mb": 21.0, "transient_mb": 100.0, "shared_mb": None,
        "ceiling_mb": 21.0,
    }  # fmt: skip
    # test_b kept only its report share (1 MB), but ended 10 MB above where the runs started:
    # run cold, it may need what test_a filled before it.
    later = file_terms(read, "t/test_b.py")
    assert later["retained_mb"] == 1.0 and later["ceiling_mb"] == 11.0
    # Collected first, its import is what its shard's files share, kept out of retained.
    first = file_terms(read, "t/test_a.py", first=True)
    assert first["shared_mb"] == 10.0 and first["retained_mb"] == 11.0


def test_another_producers_figure_properties_are_ignored() -> None:
    data = report("", [("t/test_a.py", A_START, A_END)])
    read = read_report(data, ["t/test_a.py"])
    assert isinstance(read, Report)
    assert read.figures == {} and read.baseline_kb is None and read.finish_kb is None


def test_malformed_figures_are_left_out_not_guessed() -> None:
    data = report(PLUGIN, [("t/test_a.py", "rss_kb=x peak_kb=1", A_END),
                           ("t/test_b.py", B_START, "seconds=nan rss_kb=1 peak_kb=1")])  # fmt: skip
    read = read_report(data, ["t/test_a.py", "t/test_b.py"])
    assert isinstance(read, Report) and read.figures == {}


def test_a_file_declared_empty_by_another_producer_is_still_missing() -> None:
    data = report(
        '<property name="release-ledger.empty" value="t/test_none.py" />',
        [("t/test_a.py", A_START, A_END)],
    )
    read = read_report(data, ["t/test_a.py", "t/test_none.py"])
    assert not isinstance(read, Report) and read.code == "missing-file"
