"""An observation becomes its events' fields in one place (`domain/observed.py`): what an
environment's report says reaches `EnvironmentPrepared` whole, a report over the limit is kept
as its head, and an attempt records how its run ended."""

from __future__ import annotations

from datetime import UTC, datetime

from release_ledger.domain import events as ev
from release_ledger.domain.events.outcome import RunEnded
from release_ledger.domain.execution import EnvironmentReport, Observation, ShardRun, SourceTried
from release_ledger.domain.observed import (
    REPORT_HEAD_BYTES,
    attempt_fields,
    attribution_fields,
    environment_fields,
    in_order_fields,
    isolation_fields,
    kept,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_every_field_an_environment_report_shares_with_its_event_is_recorded() -> None:
    report = EnvironmentReport(
        status="failed", how="uv", python="/p/bin/python", python_version="3.12.1", key="k1",
        reused=True, seconds=2.5, packages="a==1\nb==2\n", imports={"a": "/p/a"},
        warnings=("w",), error="boom", log_tail="the end", project="demo", extra="test",
        group="dev", files_read=("pyproject.toml",), where="host-1", source="extras",
        deps_key="d1", exclude_newer="2026-01-01T00:00:00Z", requires_dist=("a",),
        provides_extra=("test",), lock="uv.lock sha256:00", lock_note="applied",
        tried=(SourceTried(source="tox", outcome="failed", error="e", log_tail="tox said"),),
    )  # fmt: skip
    fields, artifacts = environment_fields(report, "head", "c0ffee")
    event = ev.EnvironmentPrepared(run_id="r", at=AT, **fields)

    shared = set(EnvironmentReport.model_fields) & set(ev.EnvironmentPrepared.model_fields)
    for name in shared - {"packages", "tried"}:
        recorded, given = getattr(event, name), getattr(report, name)
        assert recorded == (list(given) if isinstance(given, tuple) else given), name
    assert event.packages == 2 and artifacts[event.packages_hash or ""] == report.packages.encode()
    assert event.log_tail_hash in artifacts and event.tried[0].log_tail_hash in artifacts


def test_a_report_over_the_limit_is_kept_as_its_head_with_its_full_size() -> None:
    big = b"x" * (REPORT_HEAD_BYTES * 2)
    k = kept(Observation(exit_code=0, report=big), max_report_mb=REPORT_HEAD_BYTES / 2**20)
    assert k.too_large == len(big) and k.observation.report == big[:REPORT_HEAD_BYTES]
    assert k.artifacts[k.report_hash or ""] == big[:REPORT_HEAD_BYTES]


def test_an_attempt_records_its_run_and_how_it_ended() -> None:
    run = ShardRun(run_id="r", shard_id="s01", attempt=2, revision="base", commit="c",
                   files=("tests/test_a.py",))  # fmt: skip
    o = Observation(
        exit_code=None, signal=9, timed_out=True, log_tail=b"killed", rss_mb=12.0,
        failure_kind="timeout", failure_reason="deadline", failure_detail="d",
    )  # fmt: skip
    event = ev.ShardAttemptRecorded(run_id="r", at=AT, **attempt_fields(run, kept(o, 64), "m1"))
    assert (event.shard, event.attempt, event.revision, event.member) == ("s01", 2, "base", "m1")
    assert event.timed_out and event.signal == 9 and event.rss_mb == 12.0
    assert (event.infrastructure_failure, event.infrastructure_detail) == ("deadline", "d")
    assert event.log_tail_hash is not None and event.report_hash is None


def test_every_event_of_a_run_records_how_it_ended_alike() -> None:
    """A shard attempt, a file run alone, files run in the project's order and head's rerun
    with base's packages say a run's exit, evidence and time in the same fields (`RunEnded`),
    with the same values."""
    run = ShardRun(run_id="r", shard_id="s01", attempt=1, revision="head", commit="c",
                   files=("tests/test_a.py",))  # fmt: skip
    o = Observation(exit_code=1, signal=None, timed_out=True, report=b"<testsuites/>" * 9,
                    log_tail=b"tail", seconds=3.5, rss_mb=40.0, oom=True)  # fmt: skip
    k = kept(o, max_report_mb=64 / 2**20)
    order = {"files": ["tests/test_a.py"], "confirms": [], "revision": "head"}
    recorded = [
        ev.ShardAttemptRecorded(run_id="r", at=AT, **attempt_fields(run, k, "m1")),
        ev.IsolationRecorded(run_id="r", at=AT, **isolation_fields(run, k)),
        ev.InOrderRecorded(run_id="r", at=AT, **order, **in_order_fields(k)),
        ev.AttributionRecorded(
            run_id="r", at=AT, tests=[], files=[], moved=[], **attribution_fields(k)
        ),
    ]

    ended = {e.kind: {n: getattr(e, n) for n in RunEnded.model_fields} for e in recorded}
    assert all(isinstance(event, RunEnded) for event in recorded)
    assert list(ended.values()) == [ended["ShardAttemptRecorded"]] * 4
    assert ended["InOrderRecorded"] == {
        "exit_code": 1, "signal": None, "timed_out": True, "report_hash": k.report_hash,
        "log_tail_hash": k.log_hash, "seconds": 3.5, "report_too_large": len(o.report or b""),
    }  # fmt: skip
    assert all(event.artifact_hashes()[-2:] == [k.report_hash, k.log_hash] for event in recorded)
