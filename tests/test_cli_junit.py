"""`ledger junit`: one line or one JSON object per report, exit 0 / 3 / 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from release_ledger.cli.cmd_junit import junit

VALID = (
    '<?xml version="1.0" encoding="utf-8"?>'
    '<testsuites><testsuite name="api" tests="3" failures="1">'
    '<testcase classname="tests.test_api" name="test_a" file="tests/test_api.py"/>'
    '<testcase classname="tests.test_api" name="test_b" file="tests/test_api.py">'
    '<failure message="assert 1 == 2">trace</failure></testcase>'
    '<testcase classname="tests.test_api" name="test_c" file="tests/test_api.py">'
    "<skipped/></testcase>"
    "</testsuite></testsuites>"
)
MISMATCH = VALID.replace('tests="3"', 'tests="4"')
XUNIT2 = VALID.replace(' file="tests/test_api.py"', "")


@pytest.fixture
def reports(tmp_path: Path) -> dict[str, str]:
    paths = {}
    for name, text in {"good": VALID, "bad": MISMATCH, "xunit2": XUNIT2}.items():
        path = tmp_path / f"{name}.xml"
        path.write_text(text, encoding="utf-8")
        paths[name] = str(path)
    return paths


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(junit, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_valid_report_prints_its_counts_and_exits_0(reports: dict[str, str]) -> None:
    code, out, _ = run(reports["good"])
    assert code == 0
    assert out == f"{reports['good']}: valid: 3 tests, 1 failures, 0 errors, 1 skipped, 0 flaky\n"


def test_any_rejected_report_exits_3_with_its_reason(reports: dict[str, str]) -> None:
    code, out, _ = run(reports["good"], reports["bad"])
    assert code == 3
    lines = out.splitlines()
    assert lines[0].startswith(f"{reports['good']}: valid")
    assert lines[1] == (
        f"{reports['bad']}: rejected: count-mismatch: "
        'suite "api" declares tests=4 but holds 3 test cases'
    )


def test_json_is_one_array_in_argument_order(reports: dict[str, str]) -> None:
    code, out, _ = run(reports["bad"], reports["good"], "--json")
    assert code == 3
    rows = json.loads(out)
    assert [row["file"] for row in rows] == [reports["bad"], reports["good"]]
    assert rows[0]["valid"] is False and rows[0]["reason"].startswith("count-mismatch: ")
    assert rows[0]["tests"] is None
    assert rows[1] == {
        "file": reports["good"],
        "valid": True,
        "code": None,
        "reason": None,
        "tests": 3,
        "failures": 1,
        "errors": 0,
        "skipped": 1,
        "flaky": 0,
    }


def test_files_attribute_xunit2_cases_and_are_checked(reports: dict[str, str]) -> None:
    code, out, _ = run(reports["xunit2"])
    assert code == 3 and "no-file" in out
    code, out, _ = run(reports["xunit2"], "--files", "tests/test_api.py")
    assert code == 0 and ": valid: 3 tests" in out
    code, out, _ = run(reports["good"], "--files", "tests/test_api.py,tests/test_db.py")
    assert code == 3 and "missing-file: expected file tests/test_db.py has no test case" in out


def test_an_unreadable_file_is_one_line_and_exit_2(reports: dict[str, str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.xml")
    code, out, err = run(reports["good"], missing)
    assert code == 2
    assert out == ""  # nothing half-written
    assert err == f"ledger: error: cannot read {missing}: No such file or directory\n"


def test_a_directory_cannot_be_read(tmp_path: Path) -> None:
    code, _, err = run(str(tmp_path))
    assert code == 2 and err.startswith("ledger: error: cannot read")


def test_help_shows_an_example() -> None:
    code, out, _ = run("--help")
    assert code == 0 and "Examples:" in out and "ledger junit report.xml" in out


@pytest.mark.slow
def test_the_ledger_command_runs_junit(reports: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "release_ledger", "junit", reports["bad"], "--json"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout)[0]["reason"].startswith("count-mismatch")
