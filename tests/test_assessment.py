"""When is an attempt a measurement? One fact changed at a time."""

from __future__ import annotations

from release_ledger.domain.assessment import assess, last_started_file, pytest_summary

FILES = ["tests/test_a.py"]


def report(*cases: str, tests: int | None = None, failures: int | None = None) -> bytes:
    body = "".join(cases)
    n = len(cases) if tests is None else tests
    f = sum("<failure" in c for c in cases) if failures is None else failures
    return (
        f'<testsuites><testsuite name="pytest" tests="{n}" failures="{f}" errors="0">'
        f"{body}</testsuite></testsuites>"
    ).encode()


PASS = '<testcase file="tests/test_a.py" classname="tests.test_a" name="test_ok"/>'
FAIL = (
    '<testcase file="tests/test_a.py" classname="tests.test_a" name="test_bad">'
    '<failure message="boom">assert 0</failure></testcase>'
)


def judge(**overrides: object):  # type: ignore[no-untyped-def]
    facts: dict[str, object] = {
        "exit_code": 0,
        "signal": None,
        "timed_out": False,
        "oom": False,
        "infrastructure_failure": None,
        "report": report(PASS),
        "log_tail": b"",
        "files": FILES,
    }
    facts.update(overrides)
    return assess(**facts)  # type: ignore[arg-type]


def test_clean_exit_with_valid_report_is_measured() -> None:
    result = judge()
    assert result.measured and result.reason is None and result.report is not None


def test_exit_one_with_a_failure_is_measured() -> None:
    assert judge(exit_code=1, report=report(PASS, FAIL)).measured


def test_a_signal_is_unmeasured_even_with_a_report() -> None:
    assert judge(exit_code=None, signal=9).reason == "signal"


def test_timeout_and_oom_name_their_reason() -> None:
    assert judge(timed_out=True).reason == "timeout"
    assert judge(oom=True).reason == "oom"


def test_no_report_is_no_output() -> None:
    assert judge(report=None).reason == "no-output"


def test_truncated_report_is_incomplete() -> None:
    data = report(PASS)
    assert judge(report=data[: len(data) // 2]).reason == "incomplete"


def test_report_missing_a_file_of_the_shard_is_incomplete() -> None:
    result = judge(files=[*FILES, "tests/test_b.py"])
    assert result.reason == "incomplete"
    assert "tests/test_b.py" in result.detail


def test_exit_code_other_than_zero_or_one_is_job_failed() -> None:
    assert judge(exit_code=2).reason == "job-failed"


def test_exit_code_contradicting_the_report_is_unattributed() -> None:
    assert judge(exit_code=0, report=report(FAIL)).reason == "unattributed"
    assert judge(exit_code=1, report=report(PASS)).reason == "unattributed"


def test_pytest_summary_disagreeing_with_report_is_unattributed() -> None:
    tail = b"==================== 2 failed, 1 passed in 0.12s ====================\n"
    assert judge(exit_code=1, report=report(PASS, FAIL), log_tail=tail).reason == "unattributed"


def test_pytest_summary_agreeing_with_report_is_measured() -> None:
    tail = b"========================= 1 failed, 1 passed in 0.12s =========================\n"
    assert judge(exit_code=1, report=report(PASS, FAIL), log_tail=tail).measured


def test_infrastructure_failure_is_never_a_measurement() -> None:
    assert judge(infrastructure_failure="OOMKilled").reason == "oom"
    assert judge(infrastructure_failure="Evicted").reason == "job-failed"


def test_summary_line_parsing_reads_every_count() -> None:
    line = "=== 3 failed, 10 passed, 2 skipped, 1 xfailed, 1 error, 4 warnings in 1.50s ==="
    assert pytest_summary(line) == {
        "failed": 3,
        "passed": 10,
        "skipped": 2,
        "xfailed": 1,
        "errors": 1,
        "warnings": 4,
    }
    assert pytest_summary("no summary here") is None


def test_last_started_file_comes_from_progress_lines() -> None:
    tail = "tests/test_a.py ..\ntests/test_b.py .F\ntests/test_c.py "
    assert last_started_file(tail, ["tests/test_a.py", "tests/test_c.py"]) == "tests/test_c.py"
