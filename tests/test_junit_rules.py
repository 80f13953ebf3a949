"""Hand-written reports for every rule of the strict JUnit reader, one rule broken at a time."""

from __future__ import annotations

import pytest

from release_ledger.domain.junit import (
    MAX_TEXT,
    Rejection,
    Report,
    Rerun,
    TestCase,
    read_report,
    read_report_chunks,
    test_id,
)

CASE_A = '<testcase classname="tests.test_api" name="test_a" file="tests/test_api.py" time="0.5"/>'
CASE_B = '<testcase classname="tests.test_api" name="test_b" file="tests/test_api.py"/>'
GOOD = (
    '<?xml version="1.0" encoding="utf-8"?>\n'
    '<testsuites tests="2" failures="0" errors="0">\n'
    f'  <testsuite name="api" tests="2" failures="0" errors="0">\n    {CASE_A}\n    {CASE_B}\n'
    "  </testsuite>\n</testsuites>\n"
)


def read(text: str | bytes, expected: list[str] | None = None) -> Report | Rejection:
    data = text.encode() if isinstance(text, str) else text
    return read_report(data, expected)


def valid(text: str | bytes, expected: list[str] | None = None) -> Report:
    result = read(text, expected)
    assert isinstance(result, Report), str(result)
    return result


def rejected(text: str | bytes, code: str, expected: list[str] | None = None) -> Rejection:
    result = read(text, expected)
    assert isinstance(result, Rejection), f"expected {code}, read {result!r}"
    assert result.code == code, str(result)
    assert str(result).startswith(f"{code}: ") and "\n" not in str(result)
    return result


def suite(body: str, attrs: str = 'name="api" tests="1"') -> str:
    return f"<testsuites><testsuite {attrs}>{body}</testsuite></testsuites>"


# -- the baseline ------------------------------------------------------------------------------


def test_a_self_consistent_report_is_valid_with_its_cases_in_order() -> None:
    report = valid(GOOD)
    assert report.cases == (
        TestCase("tests/test_api.py", "tests.test_api", "test_a", "passed", time=0.5),
        TestCase("tests/test_api.py", "tests.test_api", "test_b", "passed"),
    )
    assert (report.tests, report.failures, report.errors, report.skipped, report.flaky) == (
        2,
        0,
        0,
        0,
        0,
    )
    assert report.files == frozenset({"tests/test_api.py"})


def test_reading_in_chunks_of_any_size_gives_the_same_report() -> None:
    data = GOOD.encode()
    whole = valid(data)
    for size in (1, 7, 64):
        pieces = [data[i : i + size] for i in range(0, len(data), size)]
        assert read_report_chunks(pieces) == whole


def test_a_report_read_again_is_the_same_reading_and_other_expected_files_read_anew() -> None:
    """A gate reads each stored report in its fold, its timeline and its views: once."""
    data = GOOD.encode()
    first = valid(data, ["tests/test_api.py"])
    assert read_report(bytes(data), ["tests/test_api.py"]) is first  # by content, not object
    assert rejected(data, "missing-file", ["tests/test_api.py", "tests/test_other.py"])
    assert valid(data) == first


def test_a_bom_an_xml_declaration_and_a_testsuite_root_are_fine() -> None:
    text = '\ufeff<?xml version="1.0"?>' + f'<testsuite name="api" tests="1">{CASE_A}</testsuite>'
    assert valid(text).tests == 1


def test_comments_after_the_root_are_fine() -> None:
    assert valid(GOOD + "<!-- generated -->\n  \n").tests == 2


def test_a_processing_instruction_after_the_root_is_rejected_like_other_trailing_content() -> None:
    rejected(GOOD + "<!-- generated -->\n<?done yes?>\n", "content-after-root")


def test_a_processing_instruction_before_the_root_is_fine() -> None:
    styled = GOOD.replace("?>\n", '?>\n<?xml-stylesheet href="a.xsl"?>\n', 1)
    assert valid(styled).tests == 2


# -- well formed -------------------------------------------------------------------------------


def test_an_empty_report_is_rejected() -> None:
    rejected(b"", "empty")


def test_whitespace_and_a_declaration_without_a_root_are_rejected() -> None:
    rejected('<?xml version="1.0"?>\n  ', "no-root")


def test_plain_text_is_not_xml() -> None:
    assert "not XML" in rejected("all tests passed\n", "not-xml").message


def test_a_report_cut_short_is_truncated() -> None:
    cut = GOOD[: GOOD.index("</testsuite>")]
    assert "ends before its root element is closed" in rejected(cut, "truncated").message


def test_a_second_root_is_rejected() -> None:
    rejected(GOOD + "<testsuites/>", "content-after-root")


def test_text_after_the_root_is_rejected() -> None:
    rejected(GOOD + "trailing words", "content-after-root")


def test_unbalanced_tags_are_malformed() -> None:
    rejection = rejected(suite(f"<testcase name='x' file='f'>{CASE_A}</testsuite>"), "malformed")
    assert "mismatched tag" in rejection.message and "line 1" in rejection.message


def test_an_undefined_entity_is_malformed() -> None:
    rejected(suite('<testcase name="&nope;" file="f"/>'), "malformed")


def test_the_root_must_be_a_suite_element() -> None:
    assert "<results>" in rejected("<results/>", "not-junit").message
    rejected(f"<testrun>{suite(CASE_A)}</testrun>", "not-junit")
    rejected(CASE_A, "not-junit")


# -- hostile XML -------------------------------------------------------------------------------

BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n'
        for i in range(1, 10)
    )
    + ']>\n<testsuites><testsuite name="&lol9;" tests="0"/></testsuites>\n'
)
XXE = (
    '<?xml version="1.0"?>\n<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
    '<testsuites><testsuite name="&x;" tests="0"/></testsuites>'
)
EXTERNAL_DTD = '<!DOCTYPE testsuites SYSTEM "http://example.invalid/junit.dtd"><testsuites/>'


@pytest.mark.parametrize("hostile", [BILLION_LAUGHS, XXE, EXTERNAL_DTD])
def test_any_dtd_is_refused_before_entities_expand(hostile: str) -> None:
    rejected(hostile, "dtd-forbidden")


def test_a_huge_report_behind_a_dtd_is_refused_at_the_doctype() -> None:
    # The reader stops at the DOCTYPE: nothing after it is ever parsed.
    huge = EXTERNAL_DTD.encode() + b"<testsuite>" * 2_000_000
    rejected(huge, "dtd-forbidden")


# -- CDATA and comments are text ---------------------------------------------------------------


def test_a_testcase_inside_a_failure_message_is_not_a_test_case() -> None:
    body = (
        '<testcase name="real" file="f.py"><failure message="boom"><![CDATA['
        '<testcase name="ghost" file="f.py"/>]]> and &lt;testcase name="escaped"/&gt;'
        "</failure></testcase>"
        '<!-- <testcase name="commented" file="f.py"/> -->'
    )
    report = valid(suite(body, 'name="s" tests="1" failures="1"'))
    assert [case.name for case in report.cases] == ["real"]
    assert (
        report.cases[0].text
        == '<testcase name="ghost" file="f.py"/> and <testcase name="escaped"/>'
    )


# -- counts ------------------------------------------------------------------------------------


def test_tests_must_equal_the_cases_beneath_the_suite() -> None:
    rejection = rejected(suite(CASE_A + CASE_B, 'name="api" tests="3"'), "count-mismatch")
    assert rejection.message == 'suite "api" declares tests=3 but holds 2 test cases'


def test_nested_suites_count_towards_their_parents() -> None:
    inner = f'<testsuite name="inner" tests="1">{CASE_B}</testsuite>'
    assert valid(suite(CASE_A + inner, 'name="outer" tests="2"')).tests == 2
    rejected(suite(CASE_A + inner, 'name="outer" tests="1"'), "count-mismatch")


def test_every_suite_needs_a_tests_attribute() -> None:
    assert "has no tests attribute" in rejected(suite(CASE_A, 'name="api"'), "no-count").message


@pytest.mark.parametrize("value", ["-1", "1.0", "two", " 1", "+1", ""])
def test_counts_must_be_non_negative_integers(value: str) -> None:
    rejected(suite(CASE_A, f'name="api" tests="{value}"'), "bad-count")


def test_failures_and_errors_where_present_must_match() -> None:
    failing = '<testcase name="f" file="x.py"><failure message="m"/></testcase>'
    erring = '<testcase name="e" file="x.py"><error message="m"/></testcase>'
    body = failing + erring
    assert valid(suite(body, 'name="s" tests="2" failures="1" errors="1"')).failures == 1
    assert (
        "failures=0"
        in rejected(suite(body, 'name="s" tests="2" failures="0"'), "count-mismatch").message
    )
    assert (
        "errors=2"
        in rejected(suite(body, 'name="s" tests="2" errors="2"'), "count-mismatch").message
    )


def test_a_case_with_several_failures_may_be_counted_once_or_per_element() -> None:
    twice = '<testcase name="f" file="x.py"><failure message="1"/><failure message="2"/></testcase>'
    assert valid(suite(twice, 'name="s" tests="1" failures="1"')).failures == 1
    assert valid(suite(twice, 'name="s" tests="1" failures="2"')).failures == 1
    rejected(suite(twice, 'name="s" tests="1" failures="3"'), "count-mismatch")


def test_root_totals_must_equal_the_sum_of_the_suites() -> None:
    rejection = rejected(
        GOOD.replace('<testsuites tests="2"', '<testsuites tests="5"'), "count-mismatch"
    )
    assert rejection.message == "the root <testsuites> declares tests=5 but holds 2 test cases"
    rejected(
        GOOD.replace(
            'failures="0" errors="0">\n  <testsuite', 'failures="1" errors="0">\n  <testsuite'
        ),
        "count-mismatch",
    )


def test_a_testcase_directly_under_testsuites_is_rejected() -> None:
    rejected(f"<testsuites>{CASE_A}</testsuites>", "case-under-testsuites")


def test_a_testcase_inside_another_element_is_rejected() -> None:
    rejected(suite(f"<system-out>{CASE_A}</system-out>"), "misplaced-case")


def test_an_error_outside_any_test_case_is_rejected() -> None:
    body = CASE_A + '<error message="class setup failed">trace</error>'
    assert "outside any test case" in rejected(suite(body), "suite-result").message


def test_a_suite_inside_a_test_case_is_rejected() -> None:
    rejected(
        suite('<testcase name="x" file="f.py"><testsuite tests="0"/></testcase>'),
        "misplaced-suite",
    )


# -- names, files, identity --------------------------------------------------------------------


@pytest.mark.parametrize("case", ['<testcase file="f.py"/>', '<testcase name="" file="f.py"/>'])
def test_every_case_needs_a_name(case: str) -> None:
    rejected(suite(case), "no-name")


def test_every_case_needs_a_file() -> None:
    rejection = rejected(suite('<testcase classname="C" name="t"/>'), "no-file")
    assert '"t"' in rejection.message


def test_the_file_is_inherited_from_the_nearest_suite() -> None:
    inner = '<testsuite name="in" tests="1" file="b.py"><testcase name="t2"/></testsuite>'
    body = '<testcase name="t1"/>' + inner
    report = valid(suite(body, 'name="out" tests="2" file="a.py"'))
    assert [case.file for case in report.cases] == ["a.py", "b.py"]


def test_windows_and_dot_slash_paths_are_read_as_pytest_prints_them() -> None:
    report = valid(suite('<testcase name="t" file=".\\tests\\test_x.py"/>'), ["tests/test_x.py"])
    assert report.cases[0].file == "tests/test_x.py"


def test_pytest_xunit2_cases_take_their_file_from_the_classname() -> None:
    body = (
        '<testcase classname="tests.test_api.TestX" name="test_a"/>'
        '<testcase classname="tests.test_api" name="test_b"/>'
        '<testcase classname="tests.sub.test_db.TestY.TestZ" name="test_c"/>'
    )
    files = ["tests/test_api.py", "tests/sub/test_db.py"]
    report = valid(suite(body, 'name="pytest" tests="3"'), files)
    assert [test_id(case) for case in report.cases] == [
        "tests/test_api.py::TestX::test_a",
        "tests/test_api.py::test_b",
        "tests/sub/test_db.py::TestY::TestZ::test_c",
    ]
    rejected(suite(body, 'name="pytest" tests="3"'), "no-file")  # without the expected files
    rejected(suite(body, 'name="pytest" tests="3"'), "no-file", ["tests/test_api.py"])


def test_src_layout_classnames_match_a_unique_path_suffix() -> None:
    body = '<testcase classname="pkg.test_m.TestK" name="t"/>'
    report = valid(suite(body), ["src/pkg/test_m.py"])
    assert test_id(report.cases[0]) == "src/pkg/test_m.py::TestK::t"


def test_with_expected_files_every_case_belongs_to_one_of_them() -> None:
    rejection = rejected(GOOD, "unexpected-file", ["tests/test_db.py", "tests/test_other.py"])
    assert "tests/test_api.py" in rejection.message


def test_with_expected_files_every_file_has_a_case() -> None:
    rejection = rejected(GOOD, "missing-file", ["tests/test_api.py", "tests/test_db.py"])
    assert rejection.message == "expected file tests/test_db.py has no test case"
    assert valid(GOOD, ["tests/test_api.py"]).tests == 2


def test_no_two_cases_share_file_classname_and_name() -> None:
    rejection = rejected(suite(CASE_A + CASE_A, 'name="api" tests="2"'), "duplicate-case")
    assert rejection.message == 'test case "tests/test_api.py::test_a" appears more than once'


def test_the_same_name_in_another_class_or_file_is_a_different_case() -> None:
    other_class = CASE_A.replace('classname="tests.test_api"', 'classname="tests.test_api.TestK"')
    other_file = CASE_A.replace('file="tests/test_api.py"', 'file="tests/test_db.py"')
    assert valid(suite(CASE_A + other_class + other_file, 'name="s" tests="3"')).tests == 3


@pytest.mark.parametrize(
    "text", ["<testsuites/>", '<testsuite name="s" tests="0"/>', suite("", 'name="s" tests="0"')]
)
def test_a_report_needs_at_least_one_case(text: str) -> None:
    rejected(text, "no-tests")


# -- which fault is named ----------------------------------------------------------------------


def test_truncation_is_named_even_when_earlier_rules_are_broken() -> None:
    rejected('<testsuites><testsuite tests="9"><testcase/><testcase name="x">', "truncated")


def test_an_inconsistent_count_outranks_a_missing_file() -> None:
    rejected(suite('<testcase name="t"/>', 'name="s" tests="2"'), "count-mismatch")


# -- outcomes ----------------------------------------------------------------------------------


def outcome_of(body: str) -> TestCase:
    report = valid(suite(f'<testcase classname="C" name="t" file="f.py">{body}</testcase>'))
    return report.cases[0]


def test_failure_error_and_skipped_elements_give_the_outcome_with_message_and_text() -> None:
    failed = outcome_of('<failure message="assert 1 == 2" type="AssertionError">trace</failure>')
    assert (failed.outcome, failed.message, failed.text) == ("failed", "assert 1 == 2", "trace")
    assert outcome_of('<error message="boom"/>').outcome == "error"
    assert outcome_of('<skipped message="later"/>').outcome == "skipped"
    assert outcome_of("<system-out>noise</system-out><properties/>").outcome == "passed"


def test_a_failure_outranks_an_error_and_an_error_outranks_a_skip() -> None:
    assert outcome_of('<skipped/><failure message="f"/><error message="e"/>').outcome == "failed"
    assert outcome_of('<skipped/><error message="e"/>').outcome == "error"


def test_flaky_attempts_without_a_final_failure_make_the_case_flaky() -> None:
    case = outcome_of(
        '<flakyFailure message="first try" type="X"><stackTrace>at a()</stackTrace>'
        "<system-out>ignored</system-out></flakyFailure>"
        '<flakyError message="second try"/>'
    )
    assert case.outcome == "flaky"
    assert case.message == "first try" and case.text == "at a()"
    assert case.reruns == (
        Rerun("flakyFailure", "first try", "at a()"),
        Rerun("flakyError", "second try", None),
    )


def test_reruns_of_a_final_failure_are_kept_as_evidence() -> None:
    case = outcome_of(
        '<failure message="final">last</failure>'
        '<rerunFailure message="r1"/><rerunError message="r2"/>'
    )
    assert case.outcome == "failed" and case.message == "final"
    assert [rerun.kind for rerun in case.reruns] == ["rerunFailure", "rerunError"]


def test_reruns_without_a_final_failure_count_as_flaky_not_passed() -> None:
    case = outcome_of('<rerunFailure message="first try"/>')
    assert case.outcome == "flaky" and case.message == "first try"


def test_flaky_counts_are_reported() -> None:
    body = (
        '<testcase name="a" file="f.py"><flakyFailure message="m"/></testcase>'
        '<testcase name="b" file="f.py"/>'
    )
    report = valid(suite(body, 'name="s" tests="2" failures="0"'))
    assert (report.tests, report.flaky, report.passed) == (2, 1, 1)


def test_messages_and_texts_are_bounded() -> None:
    long = "x" * (MAX_TEXT * 3)
    case = outcome_of(f'<failure message="{long}">{long}<![CDATA[{long}]]></failure>')
    assert case.message is not None and case.text is not None
    assert len(case.message) == MAX_TEXT and len(case.text) == MAX_TEXT


def test_times_are_kept_when_they_are_numbers() -> None:
    body = (
        '<testcase name="a" file="f" time="1.5e-3"/><testcase name="b" file="f" time="2,503.1"/>'
        '<testcase name="c" file="f" time="-3"/>'
    )
    report = valid(suite(body, 'name="s" tests="3"'))
    assert [case.time for case in report.cases] == [0.0015, None, -3.0]


# -- identity for people -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "classname", "expected"),
    [
        ("tests/test_api.py", "tests.test_api.TestX", "tests/test_api.py::TestX::t"),
        ("tests/test_api.py", "tests.test_api", "tests/test_api.py::t"),
        ("tests/test_api.py", "", "tests/test_api.py::t"),
        ("tests/test_api.py", "test_api.TestX", "tests/test_api.py::TestX::t"),
        ("src/Foo.java", "com.acme.FooTest", "src/Foo.java::com.acme.FooTest::t"),
        ("spec/a.js", "spec/a.js", "spec/a.js::t"),
    ],
)
def test_ids_are_the_ones_pytest_prints(file: str, classname: str, expected: str) -> None:
    assert test_id(TestCase(file, classname, "t", "passed")) == expected


def test_a_report_is_immutable_and_compares_by_its_cases() -> None:
    report = valid(GOOD)
    with pytest.raises(AttributeError):
        report.tests = 3
    assert report == Report(report.cases) and hash(report) == hash(Report(report.cases))
    assert Report(report.cases).failures == 0
