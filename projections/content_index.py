"""The ledger's own indexes, derived from the events of one append: pure, so the store can
write them in the same transaction as the events, and a re-index from the events gives the
same rows (`ledger rebuild --check` compares them).

Three kinds of rows:

- content rows `(kind, key, offset, item, data)`: a generic per-item lookup by content key.
  `INDEXERS` maps an event kind to the function that derives its rows; the store keeps them in
  one table (`ledger_index`) with the run id and the event's position, so "which earlier
  observation had this content key" is one indexed query. The result cache is `kind="result"`
  (key: `domain.content.result_key`, item: the test file); a measurement lookup by
  `measurement_key` registers its own indexer for `FileMeasured` the same way.
- question changes: which questions a batch opened or decided (the open-question index).
- lifecycle: the run's status from its lifecycle events, its rule, whether it asked anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from release_ledger.domain import events as ev
from release_ledger.domain.assessment import READER_VERSION
from release_ledger.domain.content import result_key
from release_ledger.domain.lifecycles import QUESTION_STEPS, RUN_STEPS, index_change
from release_ledger.domain.run_state import attempt_assessment
from release_ledger.domain.unrunnable import only_collection_errors

RESULT = "result"
READER = f"reader-{READER_VERSION}"


@dataclass(frozen=True)
class ContentRow:
    kind: str
    key: str
    offset: int  # the event's index in the appended batch (the store makes it a position)
    item: str
    data: str  # canonical JSON: what a lookup needs without reading the run


@dataclass(frozen=True)
class Lifecycle:
    status: str | None  # running, interrupted, completed (None: unchanged)
    asked: bool  # the batch asked the owner a question
    rule: str | None  # from RunStarted


ContentIndexer = Callable[[ev.Event, Mapping[str, bytes]], list[tuple[str, str, str, str]]]


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def result_rows(e: ev.Event, artifacts: Mapping[str, bytes]) -> list[tuple[str, str, str, str]]:
    """`(kind, key, item, data)` of each file a measured shard attempt has results for, keyed
    by (commit, blob, environment, command, reader). A file the report declares empty (it
    collected nothing) is a result too, of no tests: at the same commit it collects nothing
    again, so its base run is not repeated. Attempts without content keys (recorded before
    the cache), unmeasured ones, and ones whose tests changed their checkout are not cached."""
    if not isinstance(e, ev.ShardAttemptRecorded):
        return []
    if not (e.commit and e.environment_key and e.command_key and e.blobs) or e.modified_files:
        return []
    report_bytes = artifacts.get(e.report_hash) if e.report_hash else None
    if report_bytes is None:
        return []
    assessment = attempt_assessment(e, artifacts)
    if not assessment.measured or assessment.report is None:
        return []
    if only_collection_errors(assessment.report):
        return []  # no test ran: its environment may be rejected (`domain/unrunnable.py`)
    tests: dict[str, int] = {}
    for case in assessment.report.cases:
        tests[case.file] = tests.get(case.file, 0) + 1
    empty = assessment.report.empty_files
    rows = []
    for file in e.files:
        blob = e.blobs.get(file)
        if blob is None or not (tests.get(file) or file in empty):
            continue
        key = result_key(e.commit, blob, e.environment_key, e.command_key, READER)
        data = {
            "at": e.at.isoformat(),
            "shard": e.shard,
            "attempt": e.attempt,
            "revision": e.revision,
            "files": list(e.files),
            "exit_code": e.exit_code,
            "signal": e.signal,
            "report_hash": e.report_hash,
            "log_tail_hash": e.log_tail_hash,
            "seconds": e.seconds,
            "rss_mb": e.rss_mb,
            "tests": tests.get(file, 0),
        }
        rows.append((RESULT, key, file, _json(data)))
    return rows


MEASUREMENT = "measurement"


def measurement_rows(
    e: ev.Event, artifacts: Mapping[str, bytes]
) -> list[tuple[str, str, str, str]]:
    """`(kind, key, item, data)` of a file's measurement (solo, in place or reused), keyed by
    its measurement key (blob, environment, executor, command): what a later plan reuses.
    Measurements recorded before keys are not indexed, nor files that held no test: the
    plugin shares what collecting such a file took among the files with tests, so it has no
    figure of its own, and planned at nothing it under-plans its shard (parso: a shard of
    empty doctest modules 1.20x over its plan); the next plan gives it a nominal cost."""
    if not isinstance(e, ev.FileMeasured | ev.MeasurementReused) or e.key is None:
        return []
    if isinstance(e, ev.FileMeasured) and e.holds_no_test:
        return []
    data = {
        "at": e.at.isoformat(),
        "rss_mb": e.rss_mb,
        "seconds": e.seconds,
        "baseline_mb": e.baseline_mb,
        "retained_mb": e.retained_mb,
        "transient_mb": e.transient_mb,
    }
    # Only when set: rows indexed before these fields stay equal to a rebuild's.
    if e.shared_mb is not None:
        data["shared_mb"] = e.shared_mb
    if e.ceiling_mb is not None:
        data["ceiling_mb"] = e.ceiling_mb
    return [(MEASUREMENT, e.key, e.file, _json(data))]


# Event kind -> the indexers deriving its content rows. To add a lookup by content (e.g.
# measurements by `measurement_key`): write `rows(event, artifacts) -> [(kind, key, item,
# data)]`, add it here, bump `adapters.store_port.INDEX_FORMAT` (ledgers are then re-indexed
# from their events once, when opened), and ask `ledger.read_side.content(ledger, kind, keys)`.
INDEXERS: dict[str, tuple[ContentIndexer, ...]] = {
    "ShardAttemptRecorded": (result_rows,),
    "FileMeasured": (measurement_rows,),
    "MeasurementReused": (measurement_rows,),
}


# Facts the ledger's indexes do not keep: shown by folding the run itself.
NOT_INDEXED: frozenset[type[ev.Event]] = frozenset(
    {
        ev.EnvironmentPrepared, ev.TestFilesDiscovered, ev.MeasurementFailed, ev.ShardsPlanned,
        ev.PoolMeasured, ev.ShardPlaced, ev.PodFailed, ev.ShardSplit, ev.IsolationRecorded,
        ev.InOrderRecorded, ev.SourceRejected,
        ev.BaselineReused, ev.AttributionRecorded, ev.ExonerationsLookedUp,
        ev.FailureExonerated, ev.CheckRecorded, ev.ReleaseInspected,
        ev.DistributionsBuilt, ev.UpgradeChecked, ev.ApprovalIssued, ev.AttestationIssued,
    }
)  # fmt: skip


def index_feeds(kind: type[ev.Event]) -> tuple[str, ...]:
    """Which of the ledger's indexes an event type feeds (content rows, the open questions,
    the run's status row): every type feeds one or is in `NOT_INDEXED`."""
    feeds = []
    if kind.model_fields["kind"].default in INDEXERS:
        feeds.append("content")
    if kind in QUESTION_STEPS:
        feeds.append("questions")
    if kind in RUN_STEPS or kind is ev.QuestionAsked:
        feeds.append("status")
    return tuple(feeds)


def content_rows(events: Sequence[ev.Event], artifacts: Mapping[str, bytes]) -> list[ContentRow]:
    rows = []
    for offset, e in enumerate(events):
        for indexer in INDEXERS.get(e.kind, ()):
            for kind, key, item, data in indexer(e, artifacts):
                rows.append(ContentRow(kind, key, offset, item, data))
    return rows


def needs_artifacts(events: Sequence[ev.Event]) -> list[str]:
    """The artifacts the content indexers read (reports of keyed shard attempts)."""
    return [
        e.report_hash
        for e in events
        if isinstance(e, ev.ShardAttemptRecorded) and e.report_hash and e.blobs
    ]


def question_changes(events: Sequence[ev.Event]) -> list[tuple[str, str, int, str]]:
    """(change, question id, offset in the batch, data) in order, by the questions' one
    lifecycle (`domain/lifecycles.py`): a question is listed from `QuestionAsked` ("open",
    with what `ledger questions` shows) until a step decides it ("close"); an unobserved
    deadline makes an open one "expire", a critical one is "park"ed (both stay listed). The
    store applies each change where the step's source states allow it."""
    changes = []
    for offset, e in enumerate(events):
        step = QUESTION_STEPS.get(type(e))
        if step is None:
            continue
        change = index_change(step)
        data = ""
        if isinstance(e, ev.QuestionAsked):
            data = _json(
                {
                    "text": e.text,
                    "options": list(e.options),
                    "recommended": e.recommended,
                    "impact": e.impact,
                    "topic": e.topic,
                    "subject": list(e.subject),
                    "asked_at": e.at.isoformat(),
                    "deadline": e.deadline.isoformat() if e.deadline else None,
                }
            )
        elif step.new:
            continue  # decided as it is made (an assumption): never listed
        changes.append((change, str(getattr(e, "question_id", "")), offset, data))
    return changes


def lifecycle(events: Sequence[ev.Event]) -> Lifecycle | None:
    """What a batch changes in the run's status row (None: nothing), by the run's one
    lifecycle (`domain/lifecycles.RUN_STEPS`)."""
    status = rule = None
    asked = False
    for e in events:
        to = RUN_STEPS.get(type(e))
        if isinstance(e, ev.RunStarted):
            rule = e.rule
            status = status or to
        elif to is not None:
            status = to
        elif isinstance(e, ev.QuestionAsked):
            asked = True
    if status is None and rule is None and not asked:
        return None
    return Lifecycle(status, asked, rule)
