"""Assessments kept by content in the views file: read back equal to reading the report again,
reused by the next rebuild (same digest), invalidated by a reader change, never trusted by
`ledger rebuild --check`."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings

import release_ledger.domain.assessment
from release_ledger.domain import assessment_memo, run_state
from release_ledger.domain.assessment import Assessment, assessment_from_json, assessment_to_json
from release_ledger.domain.junit import Report, read_report
from release_ledger.ledger import views
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.service import Ledger
from tests import test_junit_properties as plain
from tests import test_plugin_report_properties as plugin
from tests.synthetic_runs import synthetic_run
from tests.test_junit_corpus import CORPUS, manifest
from tests.test_plugin_figures import A_END, A_START, B_END, B_START, PLUGIN, report

ATTRIBUTES = (
    "cases", "files", "tests", "failures", "errors", "skipped", "flaky", "passed", "subtests",
    "plugin", "figures", "baseline_kb", "empty_files", "finish_kb",
)  # fmt: skip


def assert_reads_back(read: Report) -> None:
    for assessment in (
        Assessment(True, report=read),
        Assessment(False, "unattributed", "exit 0 but the report holds 1 failures", read, ("a",)),
    ):
        again = assessment_from_json(assessment_to_json(assessment))
        assert (again.measured, again.reason, again.detail, again.culprits) == (
            assessment.measured, assessment.reason, assessment.detail, assessment.culprits,
        )  # fmt: skip
        assert again.report is not None
        for name in ATTRIBUTES:
            assert getattr(again.report, name) == getattr(read, name), name
        assert assessment_to_json(again) == assessment_to_json(assessment)


def test_an_assessment_without_a_report_reads_back() -> None:
    for assessment in (
        Assessment(False, "no-output", "exit 1 and no JUnit report"),
        Assessment(True, detail="the file holds no test", report=Report(())),
    ):
        assert assessment_from_json(assessment_to_json(assessment)) == assessment


def test_plugin_figures_baseline_and_empty_files_read_back() -> None:
    data = report(
        PLUGIN + '<property name="release-ledger.baseline" value="rss_kb=30720" />'
        '<property name="release-ledger.empty" value="t/test_none.py" />',
        [("t/test_a.py", A_START, A_END), ("t/test_b.py", B_START, B_END)],
    )
    read = read_report(data, ["t/test_a.py", "t/test_b.py", "t/test_none.py"])
    assert isinstance(read, Report) and read.figures and read.empty_files
    assert_reads_back(read)


@pytest.mark.skipif(not (CORPUS / "MANIFEST.tsv").is_file(), reason=f"no corpus at {CORPUS}")
def test_every_valid_corpus_report_reads_back() -> None:
    valid = 0
    for row in manifest():
        read = read_report((CORPUS / row["path"]).read_bytes())
        if isinstance(read, Report):
            assert_reads_back(read)
            valid += 1
    assert valid > 10


@given(plain.suites(), plain.formats)
@settings(max_examples=100, deadline=None)
def test_generated_reports_read_back(suites: list[plain.Suite], fmt: dict[str, object]) -> None:
    read = read_report(plain.render(suites, **fmt))  # type: ignore[arg-type]
    assert isinstance(read, Report), str(read)
    assert_reads_back(read)


@given(plugin.plugin_reports())
@settings(max_examples=100, deadline=None)
def test_generated_plugin_reports_read_back(cases: dict[str, list[plugin.Case]]) -> None:
    read = read_report(plugin.render(cases), list(cases))
    assert isinstance(read, Report), str(read)
    assert_reads_back(read)


def test_a_stored_form_that_is_not_an_assessment_is_refused() -> None:
    broken = '[true,null,"",[],[[],[[0]],[1,0,0,0,0],0,false,{},null,[],null]]'
    for text in ('{"measured": true}', "[]", "not json", "[1,2,3,4,5]", broken):
        with pytest.raises(ValueError):
            assessment_from_json(text)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    for index in range(4):
        run = synthetic_run(random.Random(index), f"{index + 1:x}" * 32, files=6, shards=2,
                            p_unmeasured=0.2, questions=1, checks=1)  # fmt: skip
        led.append(run.run_id, run.events, artifacts=run.artifacts)
    return led


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the reports read (the reader called) from here on."""
    calls: list[int] = []
    real = release_ledger.domain.assessment.read_report

    def counting(data: bytes, expected_files: object = None) -> object:
        calls.append(1)
        return real(data, expected_files)  # type: ignore[arg-type]

    monkeypatch.setattr(release_ledger.domain.assessment, "read_report", counting)
    run_state._ASSESSMENTS.clear()  # the in-process memo would hide the reads
    return calls


def _kept(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM assessments").fetchone()[0])
    finally:
        conn.close()


def test_a_rebuild_reuses_what_the_views_kept_with_the_same_digest(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "views.db"
    reads = _reads(monkeypatch)
    first = views.rebuild(ledger, path)  # no views yet: every report read, and kept
    assert reads and _kept(path) > 0
    reads.clear()
    run_state._ASSESSMENTS.clear()
    second = views.rebuild(ledger, path)
    assert not reads  # nothing read again
    assert second["digest"] == first["digest"]
    slow = views.open_views(tmp_path / "slow.db")
    try:
        views.rebuild_into(ledger, slow, reuse=False)
        assert slow.digest() == first["digest"]
    finally:
        slow.close()
    run_state._ASSESSMENTS.clear()
    assert views.check(ledger, path)["identical"] is True
    assert reads  # the check's rebuild read every report itself


def test_a_reader_version_bump_reads_every_report_again(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "views.db"
    first = views.rebuild(ledger, path)
    reads = _reads(monkeypatch)
    monkeypatch.setattr(assessment_memo, "READER_VERSION", assessment_memo.READER_VERSION + 1)
    again = views.rebuild(ledger, path)
    assert reads
    assert again["digest"] == first["digest"]


def test_a_catch_up_keeps_what_it_assessed_for_the_next_rebuild(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "views.db"
    store = views.open_views(path)
    views.catch_up(ledger, store)
    maintained = store.digest()
    store.close()
    assert _kept(path) > 0
    reads = _reads(monkeypatch)
    assert views.rebuild(ledger, path)["digest"] == maintained
    assert not reads


def test_check_finds_views_rebuilt_from_a_tampered_kept_assessment(
    ledger: Ledger, tmp_path: Path
) -> None:
    path = tmp_path / "views.db"
    views.rebuild(ledger, path)
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE assessments SET data = '[false' || substr(data, 6) WHERE data LIKE '[true,%'"
    )
    conn.commit()
    conn.close()
    run_state._ASSESSMENTS.clear()
    views.rebuild(ledger, path)  # trusts what its own views kept
    result = views.check(ledger, path)  # reads every report again
    assert result["identical"] is False and result["difference"]


def test_another_ledgers_views_lend_no_assessment(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "views.db"
    views.rebuild(ledger, path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE views_meta SET value = 'another' WHERE key = 'ledger_id'")
    conn.commit()
    conn.close()
    reads = _reads(monkeypatch)
    views.rebuild(ledger, path)
    assert reads
