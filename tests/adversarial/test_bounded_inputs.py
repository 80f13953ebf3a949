"""8. Bounded inputs. A report over `--max-report-mb` makes its attempt unmeasured with reason
`report-too-large`, keeping only its head as evidence; `ledger junit` reads a report for its
counts without a column per case (duplicates found by hash) and gives the same answer as the
gate's reader. On today's main a 300 MB report was parsed whole and stored whole (the gate
peaked near 1 GB). The memory figure itself is measured by `bench/junit_memory.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from release_ledger.domain.junit import Rejection, Report, read_report, read_report_chunks
from tests.gatekit import events, gate, ledger_url, run_ledger
from tests.gitrepo import commit, make_repo, tag
from tests.ledgerkit import open_ledger

RUNNER = """import sys
junit, files = sys.argv[1], sys.argv[2:]
cases = "".join(
    f'<testcase classname="{f[:-3].replace("/", ".")}" name="test_x" file="{f}" time="0.1"/>'
    for f in files
)
pad = "x" * (PAD_BYTES)
with open(junit, "w") as out:
    out.write(
        f'<testsuites><testsuite name="pytest" tests="{len(files)}" failures="0" errors="0" '
        f'skipped="0">{cases}<system-out>{pad}</system-out></testsuite></testsuites>'
    )
"""


@pytest.mark.slow
def test_a_report_over_the_limit_is_unmeasured_and_only_its_head_kept(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "run.py": RUNNER.replace("PAD_BYTES", "3 * 1024 * 1024"),
            "tests/test_a.py": "# run by run.py\n",
        },
    )
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": "# run by run.py, changed\n"}, "change")
    result = gate(
        tmp_path, repo, "--command", "{python} run.py {junit} {files}",
        "--discover", "tests/test_*.py", "--measure", "never", "--shards", "1",
        "--rounds", "0", "--max-report-mb", "1",
    )  # fmt: skip
    assert result.code == 3, result.stdout + result.stderr
    document = result.document
    assert document["status"] == "unmeasured"
    assert {u["reason"] for u in document["unmeasured"]} == {"report-too-large"}
    stored = events(tmp_path, document["run_id"])
    recorded = [e for e in stored if e["kind"] == "ShardAttemptRecorded"]
    assert recorded and all(e["report_too_large"] > 3 * 1024 * 1024 for e in recorded)
    ledger = open_ledger(ledger_url(tmp_path))
    try:
        kept = [ledger.artifact(e["report_hash"]) for e in recorded]
        assert all(data is not None and len(data) <= 64 * 1024 for data in kept)
    finally:
        ledger.close()
    replayed = run_ledger(tmp_path, "verdict", document["run_id"], "--json")
    assert replayed.code == 3 and replayed.document["unmeasured"] == document["unmeasured"]


def _report(cases: list[tuple[str, str, str]]) -> bytes:
    body = "".join(
        f'<testcase classname="{c}" name="{n}" file="{f}" time="0.1"'
        + ("><failure message='x'>x</failure></testcase>" if n.endswith("fail") else "/>")
        for f, c, n in cases
    )
    failures = sum(n.endswith("fail") for _, _, n in cases)
    return (
        f'<testsuites><testsuite name="pytest" tests="{len(cases)}" failures="{failures}" '
        f'errors="0" skipped="0">{body}</testsuite></testsuites>'
    ).encode()


@pytest.mark.parametrize(
    "cases",
    [
        [("tests/a.py", "tests.a", "test_1"), ("tests/a.py", "tests.a", "test_2_fail")],
        [("tests/a.py", "tests.a", "test_1"), ("tests/a.py", "tests.a", "test_1")],
        [("tests/a.py", "tests.a", "test_1"), ("tests/b.py", "tests.b", "test_1")],
        [("tests/a.py", "tests.a.K", "test_1"), ("tests/a.py", "tests.a.L", "test_1")],
        [],
    ],
)
def test_counting_reads_as_the_gate_reads(cases: list[tuple[str, str, str]]) -> None:
    data = _report(cases)
    full = read_report(data)
    counted = read_report_chunks([data], counts_only=True)
    assert type(full) is type(counted)
    if isinstance(full, Rejection):
        assert isinstance(counted, Rejection) and counted.code == full.code
    else:
        assert isinstance(full, Report) and isinstance(counted, Report)
        assert (full.tests, full.failures, full.errors, full.skipped, full.flaky) == (
            counted.tests, counted.failures, counted.errors, counted.skipped, counted.flaky,
        )  # fmt: skip
        assert full.files == counted.files
