"""Property tests: generated valid reports read back exactly; any cut is rejected; order of
suites and chunking change nothing but order."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from release_ledger.domain.junit import (
    Outcome,
    Rejection,
    Report,
    Rerun,
    TestCase,
    read_report,
    read_report_chunks,
)

OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "error", "skipped", "flaky")
ELEMENT = {"failed": "failure", "error": "error", "skipped": "skipped", "flaky": "flakyFailure"}

# Characters XML 1.0 can carry, including markup that must be escaped.
xml_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufffe\uffff")
    | st.sampled_from("<>&\"'\n\t]]>"),
    max_size=40,
)
identifier = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=8)


def escape(text: str, *, attribute: bool) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("\r", "&#13;")
    if attribute:
        text = text.replace('"', "&quot;").replace("\n", "&#10;").replace("\t", "&#9;")
    return text


@dataclass(frozen=True)
class Suite:
    name: str
    declare_failures: bool
    cases: tuple[TestCase, ...]


@st.composite
def cases(draw: st.DrawFn) -> TestCase:
    module = draw(identifier)
    file = f"tests/test_{module}.py"
    classname = draw(st.sampled_from([f"tests.test_{module}", f"tests.test_{module}.TestK"]))
    outcome = draw(st.sampled_from(OUTCOMES))
    message = text = None
    reruns: tuple[Rerun, ...] = ()
    if outcome != "passed":
        message = draw(st.none() | xml_text)
        text = draw(st.none() | xml_text.filter(bool))
    if outcome == "flaky":
        reruns = (Rerun("flakyFailure", message, text),)
    time = draw(st.none() | st.integers(0, 10**6).map(lambda ms: ms / 1000))
    name = draw(xml_text.filter(bool))
    return TestCase(file, classname, name, outcome, message, text, time, reruns)


@st.composite
def suites(draw: st.DrawFn) -> list[Suite]:
    all_cases = draw(
        st.lists(
            cases(), min_size=1, max_size=12, unique_by=lambda c: (c.file, c.classname, c.name)
        )
    )
    cuts = sorted(draw(st.lists(st.integers(0, len(all_cases)), max_size=3)))
    bounds = [0, *cuts, len(all_cases)]
    return [
        Suite(f"suite{i}", draw(st.booleans()), tuple(all_cases[bounds[i] : bounds[i + 1]]))
        for i in range(len(bounds) - 1)
    ]


def render_case(case: TestCase) -> str:
    attrs = (
        f'classname="{escape(case.classname, attribute=True)}" '
        f'name="{escape(case.name, attribute=True)}" file="{case.file}"'
    )
    if case.time is not None:
        attrs += f' time="{case.time!r}"'
    if case.outcome == "passed":
        return f"<testcase {attrs}/>"
    message = "" if case.message is None else f' message="{escape(case.message, attribute=True)}"'
    body = "" if case.text is None else escape(case.text, attribute=False)
    element = ELEMENT[case.outcome]
    return f"<testcase {attrs}><{element}{message}>{body}</{element}></testcase>"


def render(report: list[Suite], *, declaration: bool, indent: str) -> bytes:
    """A report that ends exactly at its root's end tag, so every strict prefix is cut."""
    parts = ['<?xml version="1.0" encoding="UTF-8"?>\n' if declaration else ""]
    total = sum(len(suite.cases) for suite in report)
    parts.append(f'<testsuites name="generated" tests="{total}">')
    for suite in report:
        counts = f'tests="{len(suite.cases)}"'
        if suite.declare_failures:
            failures = sum(case.outcome == "failed" for case in suite.cases)
            errors = sum(case.outcome == "error" for case in suite.cases)
            counts += f' failures="{failures}" errors="{errors}"'
        parts.append(f'{indent}<testsuite name="{suite.name}" {counts}>')
        parts.extend(indent * 2 + render_case(case) for case in suite.cases)
        parts.append(f"{indent}</testsuite>")
    parts.append("</testsuites>")
    return ("\n" if indent else "").join(parts).encode()


def flatten(report: list[Suite]) -> tuple[TestCase, ...]:
    return tuple(case for suite in report for case in suite.cases)


formats = st.fixed_dictionaries(
    {"declaration": st.booleans(), "indent": st.sampled_from(["", "  "])}
)


@given(suites(), formats)
@settings(max_examples=100, deadline=None)
def test_generated_reports_read_back_exactly(report: list[Suite], fmt: dict[str, object]) -> None:
    result = read_report(render(report, **fmt))  # type: ignore[arg-type]
    assert isinstance(result, Report), str(result)
    assert result.cases == flatten(report)
    assert result.tests == len(flatten(report))
    assert result.failures == sum(case.outcome == "failed" for case in flatten(report))
    assert result.flaky == sum(case.outcome == "flaky" for case in flatten(report))


@given(suites(), formats)
@settings(max_examples=25, deadline=None)
def test_every_strict_prefix_of_a_valid_report_is_rejected(
    report: list[Suite], fmt: dict[str, object]
) -> None:
    data = render(report, **fmt)  # type: ignore[arg-type]
    assert isinstance(read_report(data), Report)
    for end in range(len(data)):
        assert isinstance(read_report(data[:end]), Rejection), data[:end]


@given(suites(), st.data())
@settings(max_examples=100, deadline=None)
def test_shuffling_suites_changes_nothing_but_order(
    report: list[Suite], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(report))
    original = read_report(render(report, declaration=True, indent=""))
    reordered = read_report(render(shuffled, declaration=True, indent=""))
    assert isinstance(original, Report) and isinstance(reordered, Report)
    assert reordered.cases == flatten(shuffled)
    assert sorted(reordered.cases, key=repr) == sorted(original.cases, key=repr)
    counts = ("tests", "failures", "errors", "skipped", "flaky")
    assert [getattr(reordered, c) for c in counts] == [getattr(original, c) for c in counts]


@given(suites(), st.lists(st.integers(1, 64), min_size=1, max_size=20))
@settings(max_examples=100, deadline=None)
def test_chunk_boundaries_change_nothing(report: list[Suite], sizes: list[int]) -> None:
    data = render(report, declaration=True, indent="  ")
    pieces: list[bytes] = []
    start = 0
    while start < len(data):
        size = sizes[len(pieces) % len(sizes)]
        pieces.append(data[start : start + size])
        start += size
    assert read_report_chunks(pieces) == read_report(data)
