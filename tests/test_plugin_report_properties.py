"""Property tests of the reader on reports in the gate's pytest plugin format: cases are read
by node id (whatever their `file` attribute says), subtests are counted, a report without its
completion marker or cut anywhere is rejected, and a node id of another file than its suite's
is a file mismatch."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from release_ledger.domain.junit import Rejection, Report, read_report, test_id

identifier = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=6)
odd = st.text(alphabet="ab1-._ /:[]()<>&\"'é💥", min_size=0, max_size=8)
OUTCOMES = {"passed": "", "failed": "failure", "error": "error", "skipped": "skipped"}


def esc(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        .replace('"', "&quot;")
    )  # fmt: skip


@dataclass(frozen=True)
class Case:
    nodeid: str
    defined_in: str  # the file pytest's own writer would name (an inherited method's file)
    outcome: str
    subtest: str | None


@st.composite
def plugin_reports(draw: st.DrawFn) -> dict[str, list[Case]]:
    modules = draw(st.lists(identifier, min_size=1, max_size=4, unique=True))
    files = [f"tests/test_{m}.py" for m in modules]
    report: dict[str, list[Case]] = {}
    for file in files:
        seen: set[str] = set()
        cases = []
        for _ in range(draw(st.integers(0, 5))):
            klass = draw(st.sampled_from(["", "TestK::", "TestK::Inner::"]))
            name = draw(identifier)
            params = draw(st.none() | odd)
            nodeid = f"{file}::{klass}test_{name}" + ("" if params is None else f"[{params}]")
            subtest = draw(st.none() | st.sampled_from(["(i=1)", "[m] (x='a b')", "(<subtest>)"]))
            if subtest is not None:
                nodeid = f"{nodeid} {subtest}"
            if nodeid in seen:
                continue
            seen.add(nodeid)
            defined_in = draw(st.sampled_from(files))
            cases.append(Case(nodeid, defined_in, draw(st.sampled_from(list(OUTCOMES))), subtest))
        if cases:
            report[file] = cases
    if not report:  # a report of no test is rejected (no-tests): not this property's subject
        report[files[0]] = [Case(f"{files[0]}::test_only", files[0], "passed", None)]
    return report


def render(report: dict[str, list[Case]], *, complete: bool = True) -> bytes:
    total = sum(len(cases) for cases in report.values())
    parts = [
        f'<?xml version="1.0" encoding="utf-8"?>\n<testsuites name="pytest" tests="{total}">'
        '<properties><property name="release-ledger.plugin" value="1"/></properties>'
    ]
    for file, cases in report.items():
        failures = sum(c.outcome == "failed" for c in cases)
        errors = sum(c.outcome == "error" for c in cases)
        parts.append(
            f'<testsuite name="{file}" file="{file}" tests="{len(cases)}" '
            f'failures="{failures}" errors="{errors}"><properties>'
            '<property name="release-ledger.file-start" value="rss_kb=1 peak_kb=1"/>'
            "</properties>"
        )
        for case in cases:
            props = f'<property name="release-ledger.nodeid" value="{esc(case.nodeid)}"/>'
            if case.subtest:
                props += f'<property name="release-ledger.subtest" value="{esc(case.subtest)}"/>'
            tag = OUTCOMES[case.outcome]
            result = f'<{tag} message="m">text</{tag}>' if tag else ""
            parts.append(
                f'<testcase classname="x" name="{esc(case.nodeid.rsplit("::", 1)[1])}" '
                f'file="{case.defined_in}"><properties>{props}</properties>{result}</testcase>'
            )
        parts.append("</testsuite>")
    if complete:
        parts.append(
            f'<properties><property name="release-ledger.complete" value="{total}"/></properties>'
        )
    parts.append("</testsuites>")
    return "".join(parts).encode()


@given(plugin_reports())
@settings(max_examples=100, deadline=None)
def test_cases_are_read_by_node_id_whatever_file_they_were_defined_in(
    report: dict[str, list[Case]],
) -> None:
    result = read_report(render(report), list(report))
    assert isinstance(result, Report), str(result)
    expected = {c.nodeid: c.outcome for cases in report.values() for c in cases}
    assert {test_id(c): c.outcome for c in result.cases} == expected
    assert [test_id(c) for c in result.cases] == [c.nodeid for v in report.values() for c in v]
    assert all(c.file == test_id(c).split("::", 1)[0] for c in result.cases)
    assert result.plugin
    assert result.subtests == sum(c.subtest is not None for v in report.values() for c in v)


@given(plugin_reports())
@settings(max_examples=50, deadline=None)
def test_without_the_completion_marker_a_well_formed_report_is_truncated(
    report: dict[str, list[Case]],
) -> None:
    result = read_report(render(report, complete=False), list(report))
    assert isinstance(result, Rejection) and result.code == "truncated"


@given(plugin_reports(), st.data())
@settings(max_examples=50, deadline=None)
def test_every_strict_prefix_of_a_plugin_report_is_rejected(
    report: dict[str, list[Case]], data: st.DataObject
) -> None:
    whole = render(report)
    cut = data.draw(st.integers(0, len(whole) - 1))
    assert isinstance(read_report(whole[:cut], list(report)), Rejection)


@given(plugin_reports(), st.data())
@settings(max_examples=50, deadline=None)
def test_a_node_id_of_another_file_than_its_suite_is_a_file_mismatch(
    report: dict[str, list[Case]], data: st.DataObject
) -> None:
    file = data.draw(st.sampled_from(sorted(report)))
    moved = report[file][0]
    stranger = Case(
        moved.nodeid.replace(file, "tests/elsewhere.py", 1), moved.defined_in, "passed", None
    )
    changed = {**report, file: [stranger, *report[file][1:]]}
    result = read_report(render(changed), [*report, "tests/elsewhere.py"])
    assert isinstance(result, Rejection) and result.code == "file-mismatch", str(result)
    assert result.files == (file,)  # the suite's file collected it: the culprit
