"""Every report of the shared JUnit corpus is read as its MANIFEST.tsv says it should be.

The expectation tables below are explicit, so a change of the reader's verdict on any real
report fails here. `VALID` gives (tests, failures, errors, skipped, flaky); `REJECTED` gives
the reason code. Many real reports name no file for their cases (the gate cannot attribute them
to a shard): `ATTRIBUTED` says what the reader finds in those once each suite is given a file,
so their counts and every other rule are still checked. The corpus is found beside the
repository (`../shared/junit-corpus`) or at `$JUNIT_CORPUS`.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest

from release_ledger.domain.junit import Rejection, Report, read_report, read_report_chunks, test_id

CORPUS = Path(
    os.environ.get(
        "JUNIT_CORPUS", Path(__file__).resolve().parents[1].parent / "shared" / "junit-corpus"
    )
)
pytestmark = pytest.mark.skipif(
    not (CORPUS / "MANIFEST.tsv").is_file(), reason=f"no JUnit corpus at {CORPUS}"
)

Counts = tuple[int, int, int, int, int]

VALID: dict[str, Counts] = {
    "bun/bun-test-junit-windows.xml": (3, 1, 0, 1, 0),
    "bun/bun-test-junit.xml": (3, 1, 0, 0, 0),
    "codeception/codeception-feature-attr.xml": (22, 0, 1, 0, 0),
    "misc-hand-written/unicode-astral-chars.xml": (7, 2, 2, 2, 0),
    "phpunit/paratest-phpunit10-combined.xml": (7, 1, 1, 2, 0),
    "phpunit/phpunit-nested-system-out.xml": (30, 2, 0, 0, 0),
    "phpunit/phpunit11-phpt-failures.xml": (12, 2, 0, 0, 0),
    "phpunit/phpunit9-data-provider-nested.xml": (3, 0, 1, 2, 0),
    "phpunit/phpunit9-special-chars-dataset.xml": (42, 42, 0, 0, 0),
    "phpunit/phpunit9-warning-element.xml": (1, 0, 0, 0, 0),
    "pytest/pytest-xunit1-file-line-failure.xml": (5, 1, 0, 1, 0),
    "pytest/pytest-xunit1-gloo-standalone.xml": (97, 0, 0, 17, 0),
    "wdio/wdio-results.xml": (1, 1, 0, 0, 0),
}

REJECTED: dict[str, str] = {
    # Cases naming another file than their suite (issue 12: rejected, as the reader cannot
    # tell which of the two the case belongs to).
    "misc-hand-written/testsuite-in-testsuite.xml": "file-mismatch",
    "unittest-xml-reporting/unittest-file-line-cdata.xml": "file-mismatch",
    "android-instrumentation/android-device-properties-skipped.xml": "no-file",
    "ansible/ansible-junit-semicolon.xml": "duplicate-case",
    "ant/ant-1.9.16-junit.xml": "no-file",
    "ant/ant-crlf-entities.xml": "no-file",
    "ant/ant-error-directly-in-testsuite.xml": "suite-result",
    "ant/ant-testsuites-package-id.xml": "no-file",
    "ant/antunit-child-elements.xml": "no-count",
    "ant/error-with-commented-output.xml": "no-file",
    "bazel/bazel-generated-junit.xml": "no-file",
    "bazel/bazel-test-xml-error.xml": "no-file",
    "behave/behave-cyrillic-cdata.xml": "no-file",
    "cargo-nextest/nextest-2026-failure-message.xml": "no-file",
    "cargo-nextest/nextest-failure-system-out-err.xml": "no-file",
    "cargo-nextest/nextest-rerunfailure-nested-output.xml": "no-file",
    "cargo-nextest/nextest-setup-script-no-decl.xml": "no-file",
    "casperjs/casperjs-duration-attr.xml": "duplicate-case",
    "catch2/catch2-failure-file-line.xml": "no-file",
    "container-structure-test/cst-unnamed-suite-huge-times.xml": "no-count",
    "cpython-regrtest/regrtest-lots-of-results.xml": "count-mismatch",
    "cucumber-js/cucumber-all-statuses.xml": "no-file",
    "cucumber-js/cucumber-cdata-split.xml": "no-file",
    "cucumber-jvm/cucumber-error-multiline-attr.xml": "no-file",
    "cucumber-jvm/cucumber-jvm-unicode-heavy-check.xml": "count-mismatch",
    "cucumber-jvm/cucumber-skipped-cdata.xml": "no-file",
    "cunit/cunit-failure.xml": "no-file",
    "cute/cute-empty-suites-no-decl.xml": "duplicate-case",
    "cypress/cypress-mocha-junit.xml": "no-file",
    "eclipse-junit/eclipse-testrun-root.xml": "not-junit",
    "eclipse-pde/eclipse-plugin-test-report-783k.xml": "no-file",
    "eslint/eslint-junit.xml": "no-file",
    "ginkgo/kubernetes-e2e-sonobuoy.xml": "count-mismatch",
    "go-junit-report/001-pass-fail-skip.xml": "no-file",
    "go-junit-report/005-no-xml-header.xml": "no-file",
    "go-junit-report/013-syntax-error.xml": "no-file",
    "go-junit-report/015-empty.xml": "no-tests",
    "go-junit-report/017-race.xml": "no-file",
    "go-junit-report/030-stdout.xml": "no-file",
    "go-junit-report/035-whitespace.xml": "no-file",
    "go-junit-report/106-testmain.xml": "no-file",
    "googletest/disabled-with-failure.xml": "no-count",
    "googletest/gtest-disabled-status.xml": "no-file",
    "googletest/gtest-failures-disabled.xml": "no-file",
    "googletest/gtest-status-run-cdata.xml": "count-mismatch",
    "googletest/gtest-xml-output-unittest.xml": "no-file",
    "gotestsum/go-server-failure-skip-duplicate.xml": "count-mismatch",
    "gotestsum/gotestsum-junitxml-report.xml": "count-mismatch",
    "gotestsum/gotestsum-tc-with-attributes.xml": "no-file",
    "gradle/gradle-mojibake-failure-error-skip.xml": "no-file",
    "gradle/gradle-two-tests.xml": "no-file",
    "jest-junit/empty-testsuite.xml": "no-tests",
    "jest-junit/jest-junit-escaped-names.xml": "no-file",
    "jest-junit/jest-junit-large-615k.xml": "no-name",
    "jest-junit/jest-junit-suite-failed-to-run.xml": "count-mismatch",
    "jest-junit/jest-junit-windows-failures.xml": "no-file",
    "junitxml-testlogger/junit-testlogger-bom-no-decl.xml": "no-file",
    "karma/karma-unicode-euro.xml": "no-file",
    "launch-testing/ros-launch-testing-empty-failure.xml": "no-file",
    "marathon/marathon-flakyfailure-xsi.xml": "no-file",
    "marathon/marathon-single-line-cdata-empty.xml": "no-file",
    "misc-hand-written/cyrillic-names.xml": "count-mismatch",
    "misc-hand-written/duplicate-test-names-no-decl.xml": "no-count",
    "misc-hand-written/empty-system-out-err.xml": "no-file",
    "misc-hand-written/empty-testsuite-only.xml": "no-count",
    "misc-hand-written/empty-testsuites-only.xml": "no-tests",
    "misc-hand-written/id-attrs-no-classname.xml": "no-count",
    "misc-hand-written/jasmine-like-nested-suites.xml": "no-file",
    "misc-hand-written/multiple-errors-per-testcase.xml": "no-file",
    "misc-hand-written/multiresult-skipped-failure-error.xml": "no-count",
    "misc-hand-written/negative-duration.xml": "count-mismatch",
    "misc-hand-written/nested-4-levels-empty-classname.xml": "count-mismatch",
    "misc-hand-written/nested-testsuites-error-in-suite.xml": "suite-result",
    "misc-hand-written/no-attributes.xml": "no-count",
    "misc-hand-written/playwright-like-flaky-nested.xml": "no-count",
    "misc-hand-written/properties-multiline-value.xml": "no-file",
    "misc-hand-written/skip-attr-en-dash.xml": "no-file",
    "misc-hand-written/time-with-thousands-comma.xml": "no-count",
    "misc-hand-written/various-timestamps.xml": "no-count",
    "misc-hand-written/xml-entities.xml": "no-count",
    "misc-synthetic/huge-1.28mb-nested-properties.xml": "no-count",
    "mocha-junit-reporter/mocha-junit-reporter-example.xml": "duplicate-case",
    "mocha-junit-reporter/mocha-root-suite-empty-suites.xml": "count-mismatch",
    "nette-tester/tester-v1.7-report.xml": "count-mismatch",
    "newman/newman-postman-multi-cdata.xml": "count-mismatch",
    "node-test-runner/node-test-junit.xml": "no-count",
    "not-junit/nunit3-test-run.xml": "not-junit",
    "not-junit/wrong-root-nothing.xml": "not-junit",
    "not-junit/wrong-root-suites.xml": "not-junit",
    "not-junit/xxe-external-entity.xml": "dtd-forbidden",
    "not-xml/bacon.xml": "not-xml",
    "not-xml/empty-file.xml": "empty",
    "not-xml/not-xml-text.xml": "not-xml",
    "not-xml/utf16-bad-encoding-name.xml": "malformed",
    "perl/perl-exponent-time.xml": "no-file",
    "perl/tap-harness-make-test-656k.xml": "count-mismatch",
    "phpunit/phpunit-empty-testsuites.xml": "no-tests",
    "phpunit/phpunit-selenium-nested-dataset.xml": "duplicate-case",
    "pytest/no-cases-but-tests.xml": "count-mismatch",
    "pytest/pytest-old-binary-names.xml": "count-mismatch",
    "pytest/pytest-xunit1-testcase-properties.xml": "count-mismatch",
    "pytest/truncated-pytest.xml": "truncated",
    "pytest/xunit2-properties-skip-xfail.xml": "count-mismatch",
    "quick-junit/quick-junit-all-elements.xml": "no-file",
    "scalatest/scalatest-surefire-properties.xml": "no-file",
    "sikuli-unittest/no-decl-stack-trace.xml": "no-file",
    "surefire/empty-testsuite-no-cases.xml": "no-tests",
    "surefire/surefire-enclosed-nested-class.xml": "no-file",
    "surefire/surefire-flakyfailure-flakyerror.xml": "count-mismatch",
    "surefire/surefire-flakyfailure-system-out.xml": "count-mismatch",
    "surefire/surefire-junit5-beforeall-empty-name.xml": "no-name",
    "surefire/surefire-newline-in-attr.xml": "no-file",
    "surefire/surefire-nonascii-errors.xml": "no-file",
    "surefire/surefire-rerunfailure-system-out.xml": "count-mismatch",
    "surefire/surefire2-hudson-2009.xml": "no-file",
    "surefire/surefire3-flaky-xunit-plugin.xml": "count-mismatch",
    "surefire/truncated-surefire-report.xml": "truncated",
    "swift/swift-xunit.xml": "no-file",
    "testng/pulsar-merged-133k.xml": "duplicate-case",
    "testng/testng-junitreportreporter-duplicate-names.xml": "duplicate-case",
    "testng/testng-system-out-between-cases.xml": "no-file",
    "trx-to-junit/dotnet-trx-converted.xml": "no-file",
    "tst/tst-cpp-status-single-quotes.xml": "no-file",
    "unity-c/c-file-line-on-failure.xml": "no-file",
    "vitest/vitest-results.xml": "no-file",
    "web-test-runner/wtr-expected-placeholder-time.xml": "malformed",
    "xcresult-to-junit/xcresult-swift-mix.xml": "no-file",
    "xunit-net/xunit-net-bom-properties.xml": "count-mismatch",
}

ATTRIBUTED: dict[str, Counts | str] = {
    "android-instrumentation/android-device-properties-skipped.xml": (11, 0, 0, 3, 0),
    "ant/ant-1.9.16-junit.xml": (10, 4, 0, 2, 0),
    "ant/ant-crlf-entities.xml": (8, 0, 3, 0, 0),
    "ant/ant-testsuites-package-id.xml": (3, 0, 0, 0, 0),
    "ant/error-with-commented-output.xml": (1, 0, 1, 0, 0),
    "bazel/bazel-generated-junit.xml": (2, 0, 1, 0, 0),
    "bazel/bazel-test-xml-error.xml": (1, 0, 1, 0, 0),
    "behave/behave-cyrillic-cdata.xml": (1, 0, 0, 0, 0),
    "cargo-nextest/nextest-2026-failure-message.xml": (3, 1, 0, 0, 0),
    "cargo-nextest/nextest-failure-system-out-err.xml": (3, 1, 0, 0, 0),
    "cargo-nextest/nextest-rerunfailure-nested-output.xml": (3, 1, 0, 0, 1),
    "cargo-nextest/nextest-setup-script-no-decl.xml": (1, 0, 0, 0, 0),
    "catch2/catch2-failure-file-line.xml": (1, 1, 0, 0, 0),
    "cucumber-js/cucumber-all-statuses.xml": (6, 4, 0, 1, 0),
    "cucumber-js/cucumber-cdata-split.xml": (1, 0, 0, 0, 0),
    "cucumber-jvm/cucumber-error-multiline-attr.xml": (1, 0, 1, 0, 0),
    "cucumber-jvm/cucumber-skipped-cdata.xml": (1, 0, 0, 1, 0),
    "cunit/cunit-failure.xml": (4, 1, 0, 0, 0),
    "cypress/cypress-mocha-junit.xml": (2, 2, 0, 0, 0),
    "eclipse-pde/eclipse-plugin-test-report-783k.xml": (3366, 0, 0, 0, 0),
    "eslint/eslint-junit.xml": (1, 0, 0, 0, 0),
    "go-junit-report/001-pass-fail-skip.xml": (5, 1, 0, 2, 0),
    "go-junit-report/005-no-xml-header.xml": (2, 0, 0, 0, 0),
    "go-junit-report/013-syntax-error.xml": (5, 0, 3, 0, 0),
    "go-junit-report/017-race.xml": (1, 1, 0, 0, 0),
    "go-junit-report/030-stdout.xml": (17, 9, 0, 0, 0),
    "go-junit-report/035-whitespace.xml": (9, 0, 0, 0, 0),
    "go-junit-report/106-testmain.xml": (3, 0, 1, 0, 0),
    "googletest/gtest-disabled-status.xml": (22, 4, 2, 0, 0),
    "googletest/gtest-failures-disabled.xml": (4, 2, 0, 0, 0),
    "googletest/gtest-xml-output-unittest.xml": (24, 4, 0, 0, 0),
    "gotestsum/gotestsum-tc-with-attributes.xml": (1, 0, 0, 0, 0),
    "gradle/gradle-mojibake-failure-error-skip.xml": (5, 1, 1, 1, 0),
    "gradle/gradle-two-tests.xml": (2, 1, 0, 0, 0),
    "jest-junit/jest-junit-escaped-names.xml": (1, 0, 0, 0, 0),
    "jest-junit/jest-junit-windows-failures.xml": (6, 4, 0, 1, 0),
    "junitxml-testlogger/junit-testlogger-bom-no-decl.xml": (52, 14, 0, 6, 0),
    "karma/karma-unicode-euro.xml": (2, 1, 0, 0, 0),
    "launch-testing/ros-launch-testing-empty-failure.xml": (3, 1, 0, 0, 0),
    "marathon/marathon-flakyfailure-xsi.xml": (1, 0, 0, 0, 1),
    "marathon/marathon-single-line-cdata-empty.xml": (1, 1, 0, 0, 0),
    "misc-hand-written/empty-system-out-err.xml": (1, 0, 0, 0, 0),
    "misc-hand-written/jasmine-like-nested-suites.xml": (3, 1, 0, 1, 0),
    "misc-hand-written/multiple-errors-per-testcase.xml": (3, 1, 1, 0, 0),
    "misc-hand-written/properties-multiline-value.xml": (2, 1, 0, 0, 0),
    "misc-hand-written/skip-attr-en-dash.xml": (1, 1, 0, 0, 0),
    "perl/perl-exponent-time.xml": (1, 0, 0, 0, 0),
    "quick-junit/quick-junit-all-elements.xml": (7, 2, 1, 1, 1),
    "scalatest/scalatest-surefire-properties.xml": (5, 0, 0, 0, 0),
    "sikuli-unittest/no-decl-stack-trace.xml": (1, 1, 0, 0, 0),
    "surefire/surefire-enclosed-nested-class.xml": (1, 0, 1, 0, 0),
    "surefire/surefire-newline-in-attr.xml": (8, 0, 0, 0, 0),
    "surefire/surefire-nonascii-errors.xml": (9, 2, 5, 0, 0),
    "surefire/surefire2-hudson-2009.xml": (6, 0, 0, 0, 0),
    "swift/swift-xunit.xml": (3, 1, 0, 0, 0),
    "testng/testng-system-out-between-cases.xml": (2, 0, 0, 0, 0),
    "trx-to-junit/dotnet-trx-converted.xml": (11, 5, 0, 1, 0),
    "tst/tst-cpp-status-single-quotes.xml": (31, 19, 1, 0, 0),
    "unity-c/c-file-line-on-failure.xml": "file-mismatch",  # cases name main.c
    "vitest/vitest-results.xml": (12, 2, 0, 0, 0),
    "xcresult-to-junit/xcresult-swift-mix.xml": "file-mismatch",  # one case names its file
}

# Sentences that must name the real fault, for the negative fixtures and a few others.
REASONS = {
    "pytest/truncated-pytest.xml": "ends before its root element is closed",
    "surefire/truncated-surefire-report.xml": "unclosed CDATA section",
    "not-junit/xxe-external-entity.xml": "DTD",
    "not-junit/nunit3-test-run.xml": "root element is <test-run>",
    "not-junit/wrong-root-nothing.xml": "root element is <nothing>",
    "not-junit/wrong-root-suites.xml": "root element is <suites>",
    "eclipse-junit/eclipse-testrun-root.xml": "root element is <testrun>",
    "not-xml/empty-file.xml": "empty (0 bytes)",
    "not-xml/bacon.xml": "not XML",
    "not-xml/not-xml-text.xml": "not XML",
    "not-xml/utf16-bad-encoding-name.xml": "XML declaration not well-formed",
    "web-test-runner/wtr-expected-placeholder-time.xml": "line 9, column 58",
    "pytest/no-cases-but-tests.xml": 'suite "pytest" declares tests=6 but holds 0 test cases',
    "mocha-junit-reporter/mocha-root-suite-empty-suites.xml": "declares tests=15515 but holds 1",
    "cucumber-jvm/cucumber-jvm-unicode-heavy-check.xml": "declares tests=939 but holds 1",
    "ant/ant-error-directly-in-testsuite.xml": "<error> outside any test case",
    "misc-hand-written/nested-testsuites-error-in-suite.xml": '"test.3rdlevel" holds an <error>',
    "surefire/surefire-junit5-beforeall-empty-name.xml": "has no name",
    "testng/testng-junitreportreporter-duplicate-names.xml": "testVersionStrings",
    "misc-hand-written/empty-testsuite-only.xml": "has no tests attribute",
}
SYNTAX = {"empty", "no-root", "not-xml", "truncated", "malformed", "content-after-root"}
SUITE_TAG = re.compile(rb"<testsuite(?=[\s/>])")


def manifest() -> list[dict[str, str]]:
    with open(CORPUS / "MANIFEST.tsv", encoding="utf-8", newline="") as stream:
        return list(csv.DictReader(stream, delimiter="\t"))


def rows() -> list[dict[str, str]]:
    return manifest() if (CORPUS / "MANIFEST.tsv").is_file() else []


def counts(report: Report) -> Counts:
    return (report.tests, report.failures, report.errors, report.skipped, report.flaky)


def with_suite_files(data: bytes) -> bytes:
    """Give every suite that names no file a file of its own (test scaffolding only)."""
    number = 0

    def add(match: re.Match[bytes]) -> bytes:
        nonlocal number
        tag = data[match.end() : data.find(b">", match.end())]
        if re.search(rb"\sfile=", tag):
            return match.group(0)
        number += 1
        return b'<testsuite file="suite-%d.src"' % number

    return SUITE_TAG.sub(add, data)


def test_the_tables_cover_exactly_the_manifest() -> None:
    paths = {row["path"] for row in manifest()}
    assert set(VALID) | set(REJECTED) == paths
    assert not set(VALID) & set(REJECTED)
    assert set(ATTRIBUTED) == {path for path, code in REJECTED.items() if code == "no-file"}


@pytest.mark.parametrize("row", rows(), ids=lambda row: row["path"])
def test_each_report_is_read_as_expected(row: dict[str, str]) -> None:
    path = row["path"]
    data = (CORPUS / path).read_bytes()
    result = read_report(data)
    if path in VALID:
        assert isinstance(result, Report), str(result)
        assert counts(result) == VALID[path]
        assert result.tests == int(row["testcases"])  # the manifest's independent count
    else:
        assert isinstance(result, Rejection), f"{path} read as valid"
        assert result.code == REJECTED[path], str(result)
        assert "\n" not in str(result)
    if path in REASONS:
        assert REASONS[path] in str(result)
    if row["notes"].startswith("MALFORMED"):
        assert isinstance(result, Rejection)
        assert result.code in SYNTAX | {"not-junit", "dtd-forbidden"}
    if row["well_formed"] == "no":
        assert isinstance(result, Rejection) and result.code in SYNTAX | {"dtd-forbidden"}
    pieces = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    again = read_report_chunks(pieces)
    assert again == result if isinstance(result, Report) else str(again) == str(result)


@pytest.mark.parametrize("path", sorted(ATTRIBUTED))
def test_reports_without_files_obey_every_other_rule(path: str) -> None:
    result = read_report(with_suite_files((CORPUS / path).read_bytes()))
    expected = ATTRIBUTED[path]
    if isinstance(expected, str):
        assert isinstance(result, Rejection) and result.code == expected, str(result)
    else:
        assert isinstance(result, Report), str(result)
        assert counts(result) == expected


def test_a_pytest_xunit1_report_yields_the_ids_pytest_prints() -> None:
    result = read_report((CORPUS / "pytest/pytest-xunit1-file-line-failure.xml").read_bytes())
    assert isinstance(result, Report)
    failed = [test_id(case) for case in result.cases if case.outcome == "failed"]
    assert failed == ["test/test_spark.py::SparkTests::test_rsh_events"]
    skipped = [case for case in result.cases if case.outcome == "skipped"]
    assert skipped[0].message is not None and "Spark 3.0" in skipped[0].message


def test_the_shard_files_are_checked_against_a_real_report() -> None:
    data = (CORPUS / "pytest/pytest-xunit1-gloo-standalone.xml").read_bytes()
    both = ["test/test_run.py", "test/test_spark.py"]
    assert isinstance(read_report(data, both), Report)
    missing = read_report(data, [*both, "test/test_other.py"])
    assert isinstance(missing, Rejection) and missing.code == "missing-file"
    unexpected = read_report(data, ["test/test_spark.py"])
    assert isinstance(unexpected, Rejection) and unexpected.code == "unexpected-file"
