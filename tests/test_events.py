"""Every event type survives JSON and back unchanged, carries its schema version, and is sealed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from release_ledger.domain import events as ev
from release_ledger.domain.events import EVENT_TYPES, Event, event_from_json, event_to_json

AT = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
RUN = "0123456789abcdef0123456789abcdef"
SHA = "a" * 64


def _q(**extra: Any) -> dict[str, Any]:
    return {"question_id": "q1", **extra}


# One hand-made, fully populated instance of each event type (every optional field set).
SAMPLES: dict[str, dict[str, Any]] = {
    "RunStarted": {
        "repo": "/srv/repo",
        "head_ref": "main",
        "base_ref": "v1.4.0",
        "head": "f" * 40,
        "base": "e" * 40,
        "rule": "strict",
        "executor": "local",
        "command": ["pytest", "-x", "{files}"],
        "options": {"rounds": 2, "budget": 4096.5, "members": ["a", "b"], "none": None},
        "tool_version": "0.1.0",
        "python_version": "3.11.9",
        "runtime_pin": "3.11",
    },
    "RunInterrupted": {"reason": "SIGTERM"},
    "RunResumed": {"pid": 4242},
    "RunCompleted": {},
    "EnvironmentPrepared": {
        "revision": "head",
        "commit": "a" * 40,
        "where": "local",
        "status": "ready",
        "how": "uv",
        "key": "k" * 32,
        "python": "/envs/k/venv/bin/python",
        "python_version": "3.11.7",
        "reused": True,
        "seconds": 0.4,
        "packages_hash": SHA,
        "packages": 6,
        "imports": {"shiny": "/envs/projects/a/site/shiny/__init__.py"},
        "warnings": [],
        "project": "shiny",
        "extra": "test",
        "files_read": ["pyproject.toml"],
    },
    "TestFilesDiscovered": {"files": ["tests/a.py", "tests/b.py"], "missing_at_base": ["b"]},
    "FileMeasured": {
        "file": "tests/a.py",
        "rss_mb": 123.25,
        "seconds": 1.5,
        "exit_code": 0,
        "signal": None,
    },
    "MeasurementFailed": {
        "file": "tests/b.py",
        "reason": "oom",
        "exit_code": None,
        "signal": 9,
        "rss_mb": 2048.0,
        "seconds": 3.0,
        "log_tail_hash": SHA,
    },
    "MeasurementReused": {"file": "tests/a.py", "from_run": RUN, "rss_mb": 1.0, "seconds": 0.1},
    "ShardsPlanned": {
        "budget_mb": 4096.0,
        "count": 2,
        "shards": [
            {"id": "s1", "files": ["a"], "rss_mb": 10.0, "seconds": 1.0},
            {"id": "s2", "files": ["b", "c"], "rss_mb": 20.0, "seconds": 2.0},
        ],
    },
    "PoolMeasured": {
        "round": 1,
        "members": [
            {
                "member": "k8s-a",
                "ready": True,
                "capacity": 4,
                "running": 1,
                "pending": 2,
                "free_mb_per_node": {"node-1": 1024.5},
                "reason": "",
            },
            {"member": "ssh-b", "ready": False, "reason": "ssh-connect"},
        ],
    },
    "ShardPlaced": {
        "shard": "s1",
        "member": "k8s-a",
        "round": 1,
        "node": "node-1",
        "reservation_mb": 512,
    },
    "ShardAttemptRecorded": {
        "shard": "s1",
        "attempt": 2,
        "revision": "base",
        "files": ["a"],
        "member": "k8s-a",
        "exit_code": 1,
        "signal": None,
        "timed_out": True,
        "oom": True,
        "report_hash": SHA,
        "log_tail_hash": "b" * 64,
        "rss_mb": 99.5,
        "seconds": 12.25,
        "infrastructure_failure": "PodFailed",
    },
    "PodFailed": {
        "member": "k8s-a",
        "shard": "s1",
        "attempt": 1,
        "revision": "head",
        "reason": "OOMKilled",
        "detail": "container exceeded 512Mi",
    },
    "ShardSplit": {
        "parent": "s1",
        "children": [{"id": "s1.0", "files": ["a"]}, {"id": "s1.1", "files": ["b"]}],
        "reason": "unmeasured twice",
    },
    "IsolationRecorded": {
        "file": "tests/a.py",
        "revision": "head",
        "exit_code": 1,
        "signal": 11,
        "timed_out": False,
        "report_hash": SHA,
        "log_tail_hash": None,
        "seconds": 0.75,
    },
    "InOrderRecorded": {
        "revision": "base",
        "files": ["tests/test_a.py", "docs/index.rst"],
        "confirms": ["docs/index.rst"],
        "exit_code": 1,
        "report_hash": SHA,
        "seconds": 1.5,
    },
    "SourceRejected": {
        "revision": "head",
        "commit": "d" * 40,
        "source": "dependency-group",
        "detail": "group test",
        "reason": "usage-error",
        "error": "E   ModuleNotFoundError: No module named 'hypothesis'",
        "log_tail_hash": SHA,
        "stopped_shards": ["s01", "s02"],
    },
    "BaselineReused": {
        "base": "e" * 40,
        "from_run": RUN,
        "shard": "s1",
        "files": ["a"],
        "exit_code": 0,
        "signal": None,
        "report_hash": SHA,
        "log_tail_hash": "c" * 64,
        "rss_mb": 1.0,
        "seconds": 2.0,
    },
    "AttributionRecorded": {
        "tests": ["tests/a.py::test_x"],
        "files": ["tests/a.py"],
        "moved": [{"name": "pytest", "base": "8.3.4", "head": "9.2.1"}],
        "pins_hash": "d" * 64,
        "exit_code": 0,
        "report_hash": SHA,
        "seconds": 1.5,
    },
    "ExonerationsLookedUp": {"tests": ["tests/a.py::test_x"]},
    "FailureExonerated": {
        "test": "tests/a.py::test_x",
        "reason": "flaky-at-base",
        "proof": [{"run_id": "r1", "position": 7, "revision": "base", "outcome": "failed"}],
    },
    "QuestionAsked": _q(
        topic="flaky",
        text="Is tests/a.py::test_x flaky? «ünïcode» ✓",
        options=["yes", "no"],
        recommended="yes",
        impact="critical",
        deadline=AT + timedelta(hours=1),
        subject=["tests/a.py"],
    ),
    "QuestionAnswered": _q(choice="no", by="alice", late=True),
    "AssumptionMade": _q(
        topic="flaky",
        text="assumed",
        options=["yes", "no"],
        choice="yes",
        impact="low",
        reason="deadline passed",
        subject=["tests/a.py"],
    ),
    "QuestionExpired": _q(deadline=AT),
    "RecommendationTaken": _q(choice="yes"),
    "QuestionParked": _q(),
    "CheckRecorded": {
        "name": "perf",
        "verdict": "unmeasured",
        "value": "n/a",
        "by": "ci",
        "display_name": "Perf budget",
    },
    "ApprovalIssued": {
        "outcome": "approved",
        "rule": "strict",
        "rule_version": 3,
        "report_sha256": SHA,
        "required": ["perf", "security"],
        "report_format": 2,
    },
    "AttestationIssued": {
        "envelope_sha256": [SHA, SHA],
        "key_id": "ab" * 32,
        "position": 12,
        "chain_tip": SHA,
        "verification_result": "FAILED",
        "rule": "strict",
    },
    "ReleaseInspected": {
        "project": "demo",
        "version": "1.2.0",
        "version_source": "pyproject.toml [project] version",
        "base_version": "1.1.0",
        "tags_at_head": ["v1.2.0"],
        "tag": "v1.2.0",
        "changelog_files": [{"path": "CHANGES.md", "sha256": SHA, "size": 12}],
        "towncrier": True,
        "fragments": ["changes/12.feature.md"],
        "rollback": ["git tag -d {tag}"],
        "required_checks": ["docs"],
        "problems": [],
    },
    "DistributionsBuilt": {
        "revision": "head",
        "commit": "d" * 40,
        "status": "built",
        "how": "uv build",
        "python_version": "3.11.7",
        "files": [
            {
                "type": "sdist",
                "filename": "demo-1.2.0.tar.gz",
                "sha256": SHA,
                "size": 900,
                "name": "demo",
                "version": "1.2.0",
                "metadata_version": "2.4",
                "description_content_type": "text/markdown",
                "description": True,
                "readme": "passed",
            },
            {
                "type": "wheel",
                "filename": "demo-1.2.0-py3-none-any.whl",
                "sha256": "c" * 64,
                "size": 1100,
                "name": "demo",
                "version": "1.2.0",
                "description": True,
                "readme": "warned",
            },
        ],
        "top_level": ["demo"],
        "readme_check": "twine check",
        "readme_error": "",
        "check_output_hash": "c" * 64,
        "error": "",
        "log_tail_hash": None,
        "seconds": 4.2,
        "reused": True,
    },
    "UpgradeChecked": {
        "base_commit": "e" * 40,
        "head_commit": "d" * 40,
        "project": "demo",
        "base_wheel": "demo-1.1.0-py3-none-any.whl",
        "base_wheel_sha256": "c" * 64,
        "head_wheel": "demo-1.2.0-py3-none-any.whl",
        "head_wheel_sha256": SHA,
        "how": "uv",
        "python_version": "3.11.7",
        "steps": [
            {"step": "install base", "exit_code": 0},
            {"step": "upgrade to head", "exit_code": 1, "error": "exit 1"},
        ],
        "version_before": "1.1.0",
        "version_after": None,
        "imports": {"demo": "ok", "démo_ext": "ImportError: «no»"},
        "skipped": "",
        "packages_hash": SHA,
        "log_tail_hash": "c" * 64,
        "seconds": 0.5,
        "reused": False,
    },
}


def sample(kind: str) -> Event:
    return EVENT_TYPES[kind](run_id=RUN, at=AT, **SAMPLES[kind])


def test_every_event_type_has_a_sample() -> None:
    assert set(SAMPLES) == set(EVENT_TYPES)
    assert len(EVENT_TYPES) == 34


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
def test_event_round_trips_through_json_unchanged(kind: str) -> None:
    event = sample(kind)
    text = event_to_json(event)
    assert event_from_json(text) == event
    assert event_from_json(text.encode(), kind) == event
    assert type(event_from_json(text)) is EVENT_TYPES[kind]
    assert event_to_json(event_from_json(text)) == text  # canonical bytes are stable


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
def test_samples_set_real_fields_of_their_type(kind: str) -> None:
    """A misspelt sample field would otherwise fail as an extra field, far from its cause."""
    event = sample(kind)
    cls = EVENT_TYPES[kind]
    for name in SAMPLES[kind]:
        assert name in cls.model_fields, f"{kind}.{name} is not a field"
    assert event.kind == kind


# Nested models with default factories confuse `st.builds`; give them explicit strategies.
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_NESTED: dict[str, st.SearchStrategy[Any]] = {
    "members": st.lists(
        st.builds(
            ev.MemberLease,
            free_mb_per_node=st.dictionaries(st.text(max_size=8), _FLOATS, max_size=3),
        ),
        max_size=3,
    ),
    "shards": st.lists(st.builds(ev.PlannedShard, rss_mb=_FLOATS, seconds=_FLOATS), max_size=3),
    "children": st.lists(st.builds(ev.ChildShard), max_size=3),
}
_AWARE = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_generated_events_round_trip(kind: str, data: st.DataObject) -> None:
    cls = EVENT_TYPES[kind]
    nested = {k: v for k, v in _NESTED.items() if k in cls.model_fields}
    # Required fields named explicitly: `st.builds` alone reads them from the class's
    # signature, which pydantic makes lazily (under xdist it was sometimes not there yet).
    required = {
        name: st.from_type(field.annotation)  # type: ignore[arg-type]
        for name, field in cls.model_fields.items()
        if field.is_required() and name not in nested and name not in ("run_id", "at")
    }
    event = data.draw(st.builds(cls, run_id=st.just(RUN), at=_AWARE, **nested, **required))
    text = event_to_json(event)
    parsed = event_from_json(text, kind)
    assert event_to_json(parsed) == text
    assert type(parsed) is cls
    if "NaN" not in text:  # NaN never equals itself; its bytes are compared above
        assert parsed == event
        assert event_from_json(text) == event


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
def test_schema_version_is_carried_on_the_wire(kind: str) -> None:
    event = sample(kind)
    wire = json.loads(event_to_json(event))
    assert wire["schema_version"] == Event.SCHEMA_VERSION == 1
    assert wire["kind"] == kind
    wire["schema_version"] = 2
    assert event_from_json(json.dumps(wire)).schema_version == 2


def test_canonical_json_has_sorted_keys_and_no_spaces() -> None:
    text = event_to_json(sample("RunStarted"))
    assert ", " not in text and ": " not in text
    assert list(json.loads(text)) == sorted(json.loads(text))


def test_unknown_kind_is_rejected() -> None:
    wire = json.loads(event_to_json(sample("RunCompleted")))
    wire["kind"] = "RunExploded"
    with pytest.raises(ValidationError):
        event_from_json(json.dumps(wire))


def test_unknown_kind_hint_falls_back_to_the_payload_kind() -> None:
    text = event_to_json(sample("RunCompleted"))
    assert isinstance(event_from_json(text, "NoSuchKind"), ev.RunCompleted)


def test_payload_that_contradicts_its_kind_hint_is_rejected() -> None:
    text = event_to_json(sample("RunCompleted"))
    with pytest.raises(ValidationError):
        event_from_json(text, "RunInterrupted")


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
def test_extra_fields_are_rejected(kind: str) -> None:
    wire = json.loads(event_to_json(sample(kind)))
    wire["unexpected_field"] = "pass"
    with pytest.raises(ValidationError):
        event_from_json(json.dumps(wire))
    with pytest.raises(ValidationError):
        event_from_json(json.dumps(wire), kind)


def test_extra_fields_in_nested_models_are_rejected() -> None:
    wire = json.loads(event_to_json(sample("ShardsPlanned")))
    wire["shards"][0]["verdict"] = "pass"
    with pytest.raises(ValidationError):
        event_from_json(json.dumps(wire))


def test_missing_required_field_is_rejected() -> None:
    wire = json.loads(event_to_json(sample("FileMeasured")))
    del wire["rss_mb"]
    with pytest.raises(ValidationError):
        event_from_json(json.dumps(wire), "FileMeasured")


def test_wrong_literal_is_rejected() -> None:
    with pytest.raises(ValidationError):
        ev.PodFailed(
            run_id=RUN,
            at=AT,
            member="m",
            shard="s",
            attempt=1,
            revision="middle",  # type: ignore[arg-type]
            reason="OOMKilled",
        )


def test_malformed_json_is_rejected() -> None:
    with pytest.raises(ValidationError):
        event_from_json(b"{not json")


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
def test_events_are_immutable(kind: str) -> None:
    event = sample(kind)
    with pytest.raises(ValidationError):
        event.run_id = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        event.at = AT + timedelta(days=1)  # type: ignore[misc]


def test_nested_models_are_immutable() -> None:
    planned = sample("ShardsPlanned")
    assert isinstance(planned, ev.ShardsPlanned)
    with pytest.raises(ValidationError):
        planned.shards[0].rss_mb = 1.0  # type: ignore[misc]


def test_timestamps_keep_their_zone_and_microseconds() -> None:
    event = event_from_json(event_to_json(sample("QuestionAsked")))
    assert isinstance(event, ev.QuestionAsked)
    assert event.at == AT and event.at.utcoffset() == timedelta(0)
    assert event.deadline == AT + timedelta(hours=1)


def test_artifact_hashes_name_every_referenced_blob() -> None:
    assert sample("ShardAttemptRecorded").artifact_hashes() == [SHA, "b" * 64]
    assert sample("MeasurementFailed").artifact_hashes() == [SHA]
    assert sample("IsolationRecorded").artifact_hashes() == [SHA]
    assert sample("InOrderRecorded").artifact_hashes() == [SHA]
    assert sample("SourceRejected").artifact_hashes() == [SHA]
    assert sample("BaselineReused").artifact_hashes() == [SHA, "c" * 64]
    assert sample("RunStarted").artifact_hashes() == []


def test_many_events_parse_in_one_call_as_they_do_one_by_one() -> None:
    events = [sample(kind) for kind in sorted(EVENT_TYPES)]
    payloads = [event_to_json(e).encode() for e in events]
    assert ev.events_from_json(payloads) == events
    assert ev.events_from_json([]) == []


def test_many_events_reject_a_payload_that_smuggles_two_objects() -> None:
    one = event_to_json(sample("RunCompleted")).encode()
    with pytest.raises(ValueError, match="single JSON object"):
        ev.events_from_json([one + b"," + one])


def test_many_events_reject_extra_fields() -> None:
    wire = json.loads(event_to_json(sample("RunCompleted")))
    wire["unexpected_field"] = 1
    with pytest.raises(ValidationError):
        ev.events_from_json([json.dumps(wire).encode()])
