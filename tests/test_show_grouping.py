"""`ledger show` summarises long runs of one event kind unless --all."""

from __future__ import annotations

from release_ledger.projections.timeline import (
    TimelineGroup,
    TimelineLine,
    grouped_timeline,
    timeline,
)
from tests.runbuilder import RunBuilder


def big_run() -> RunBuilder:
    files = [f"tests/test_{i:03}.py" for i in range(12)]
    run = RunBuilder().discover(files).plan({f"s{i:02}": [f] for i, f in enumerate(files)})
    for i, f in enumerate(files):
        run.attempt(f"s{i:02}", "head", [f], {f"{f}::t": "failed" if i == 3 else "passed"})
    for i, f in enumerate(files):
        run.attempt(f"s{i:02}", "base", [f], {f"{f}::t": "passed"}, signal=9 if i == 5 else None)
    return run


def test_long_runs_are_grouped_and_anomalies_named() -> None:
    run = big_run()
    events = list(enumerate(run.events, start=1))
    full = timeline(events, run.artifacts)
    grouped = grouped_timeline(events, run.artifacts)
    assert len(full) == len(events) and len(grouped) < len(full)
    groups = [g for g in grouped if isinstance(g, TimelineGroup)]
    assert [g.kind for g in groups] == ["FileMeasured", "ShardAttemptRecorded"]
    measured, attempts = groups
    assert measured.count == 12 and measured.text.startswith(
        "measured 12 files: 50 MB median peak, 1.0 s median, slowest "
    )
    assert attempts.count == 24 and "12 at head, 12 at base" in attempts.text
    assert "s03 at head: exit 1" in attempts.text and "tests/test_003.py::t" in attempts.text
    assert "s05 at base: killed by signal 9" in attempts.text
    covered = sum(g.count for g in groups) + sum(isinstance(x, TimelineLine) for x in grouped)
    assert covered == len(events)  # every event is in exactly one line
    assert grouped_timeline(events, run.artifacts, at_least=10**6) == full


def test_short_runs_stay_as_they_are() -> None:
    run = RunBuilder().discover(["tests/a.py", "tests/b.py"])
    events = list(enumerate(run.events, start=1))
    assert grouped_timeline(events, run.artifacts) == timeline(events, run.artifacts)
