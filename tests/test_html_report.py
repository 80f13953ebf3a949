"""`ledger report --html`: a pure, self-contained page — and it renders in real Chromium."""

from __future__ import annotations

import hashlib
import shutil
from collections import Counter
from pathlib import Path

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.junit import Report, read_report
from release_ledger.domain.rules import get_rule
from release_ledger.projections.html_report import html_report
from tests import chromium
from tests.gatekit import ledger_url, run_ledger
from tests.runbuilder import RunBuilder, junit

A, B, C, K = "tests/test_a.py", "tests/test_b.py", "tests/test_c.py", "tests/test_kill.py"
HOSTILE = "t_&lt;script&gt;alert('x')&lt;/script&gt;"  # as written in the XML report


def story() -> RunBuilder:
    """Two slots: a clean shard, a shard with an introduced failure, one killed and bisected
    down to its culprit, a flaky test, a hostile test name."""
    run = RunBuilder().release().discover([A, B, C, K]).plan({"s01": [A, B], "s02": [C, K]})

    def attempt(shard: str, revision: str, files: list[str], cases: dict[str, str] | None,
                seconds: float, member: str = "local", **extra: object) -> None:  # fmt: skip
        report_hash = None
        if cases is not None:
            data = junit(cases)
            report_hash = hashlib.sha256(data).hexdigest()
            run.artifacts[report_hash] = data
        exit_code = extra.pop("exit_code", None)
        if exit_code is None and cases is not None and not extra:
            exit_code = 1 if "failed" in cases.values() else 0
        run.add(ev.ShardAttemptRecorded, shard=shard, attempt=int(extra.pop("attempt", 1)),
                revision=revision, files=files, member=member, exit_code=exit_code,
                report_hash=report_hash, seconds=seconds, rss_mb=80.0, **extra)  # fmt: skip

    attempt("s01", "head", [A, B], {f"{A}::{HOSTILE}": "failed", f"{B}::t": "passed"}, 4.0)
    attempt("s01", "base", [A, B], {f"{A}::{HOSTILE}": "passed", f"{B}::t": "passed"}, 3.0)
    attempt("s02", "head", [C, K], None, 6.0, signal=9)
    attempt("s02", "base", [C, K], {f"{C}::t": "passed", f"{K}::t": "passed"}, 2.5)
    attempt("s02", "head", [C, K], None, 6.5, oom=True, attempt=2)
    run.split("s02", {"s02.1": [C], "s02.2": [K]}, "signal")
    attempt("s02.1", "head", [C], {f"{C}::t": "failed"}, 1.5)
    attempt("s02.1", "base", [C], {f"{C}::t": "passed"}, 1.5)
    attempt("s02.2", "head", [K], None, 3.0, timed_out=True)
    attempt("s02.2", "base", [K], {f"{K}::t": "passed"}, 1.0)
    run.isolation(A, "head", {f"{A}::{HOSTILE}": "failed"})
    run.isolation(A, "base", {f"{A}::{HOSTILE}": "passed"})
    run.isolation(C, "head", {f"{C}::t": "passed"})
    run.isolation(C, "base", {f"{C}::t": "passed"})
    run.add(ev.RunCompleted)
    return run


def page(run: RunBuilder, rule: str = "default") -> str:
    return html_report(list(enumerate(run.events, start=1)), run.artifacts, get_rule(rule).decide)


def test_the_page_is_pure_self_contained_and_escaped() -> None:
    run = story()
    text = page(run)
    assert text == page(run)  # same events, same bytes
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    lowered = text.lower()
    for forbidden in ("<script", "src=", "href=", "<link", "<img", "<iframe", "@import", "url("):
        assert forbidden not in lowered, forbidden
    assert "<script>alert" not in text
    assert "tests/test_a.py::t_&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    assert '<div class="status">failed</div>' in text
    assert "v1.2.0 approval" in text and "blocked: " in text


def test_timeline_bisection_and_tables() -> None:
    text = page(run := story())
    assert text.count("<svg") == 2  # the timeline and one bisection tree
    for label in ("s01 head #1", "s02 head #2", "local · slot 1", "measuring · slot 1"):
        assert label in text
    for colour in ("#c62828", "#6a1b9a", "#b8860b", "#ef6c00", "#2e7d32"):  # every outcome
        assert f'fill="{colour}"' in text
    assert "s02.1 (1 files)" in text and "split: signal" in text
    assert "tests/test_a.py::t_&lt;script" in text  # introduced
    assert "tests/test_c.py::t" in text  # flaky
    assert text.count('<rect x="') >= len([e for e in run.events if e.kind.endswith("Recorded")])


def test_cli_writes_html_and_junit(tmp_path: Path) -> None:
    from release_ledger.ledger.bootstrap import open_ledger

    run = story()
    led = open_ledger(ledger_url(tmp_path))
    led.append(run.run_id, run.events, artifacts=run.artifacts)
    led.close()
    out = tmp_path / "out"
    out.mkdir()
    done = run_ledger(tmp_path, "report", run.run_id[:8], "--html", str(out / "r.html"),
                      "--junit-out", str(out / "j.xml"), "--json")  # fmt: skip
    assert done.code == 0, done.stderr
    assert done.document["files"]["html"]["bytes"] == (out / "r.html").stat().st_size
    report = read_report((out / "j.xml").read_bytes())
    assert isinstance(report, Report), report
    assert (report.failures, report.errors) == (2, 1)  # a's and c's failures; K unmeasured
    bad = run_ledger(tmp_path, "report", run.run_id[:8], "--html", str(tmp_path / "no/x.html"))
    assert bad.code == 2 and "does not exist" in bad.stderr
    assert run_ledger(tmp_path, "report", run.run_id[:8]).code == 2


@pytest.mark.slow
def test_the_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = chromium.find()
    if browser is None:
        pytest.skip("no Chromium found (Debian's `chromium` package; .ci/run installs it)")
    target = tmp_path / "report.html"
    target.write_text(page(story()), encoding="utf-8")
    rendered = chromium.render(browser, target, tmp_path, size="1000,900")
    assert rendered.screenshot.is_file(), rendered.log[-2000:]
    width, height, pixels = chromium.png_pixels(rendered.screenshot.read_bytes())
    assert (width, height) == (1000, 900)
    colours = Counter(pixels)
    _background, most = colours.most_common(1)[0]
    assert most / len(pixels) < 0.9, "the screenshot is (nearly) blank"
    assert len(colours) > 50
    # The banner and the outcome colours were painted.
    assert (0xC6, 0x28, 0x28) in colours or (0xB7, 0x1C, 0x1C) in colours
    assert (0x2E, 0x7D, 0x32) in colours
    assert rendered.console_errors() == []
    assert '<div class="status">failed</div>' in rendered.dom
    shutil.copy(rendered.screenshot, tmp_path / "kept-screenshot.png")  # the test's artifact
