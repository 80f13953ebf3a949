"""The read side's one entry: every question the gate and the command line ask of the ledger.

Lookups go through the ledger's own indexes, written in the same transaction as the events
they derive from (`projections/content_index.py`), never through a scan of every run or a fold
of unrelated runs:

- the run list, newest first with its status: the run index and the status row (one range
  read; the verdict status is remembered per run, computed again only when events or the
  rule and reader versions changed since);
- run id prefixes: a range read of the run index's primary key;
- open questions: the open-question index names the few runs to fold;
- content lookups (`content(kind, keys)`): the generic per-item index; the result cache
  (`cached_results`) is its `result` kind, a measurement lookup by content its own kind;
- a run's state and verdict: its own stream, folded (`project`, `verdict_of`);
- `ledger show` and `ledger verdict` under the run's own rule: its kept reading, valid for its
  exact events and this code, else its stream folded once (`run_reading`,
  `ledger/kept_readings.py`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from release_ledger.adapters.gc_pause import gc_paused
from release_ledger.adapters.store_records import ContentHit, IndexedRun
from release_ledger.domain.errors import BrokenRun
from release_ledger.ledger import kept_readings
from release_ledger.ledger.service import Ledger, verdict_events

if TYPE_CHECKING:  # imported where used: `ledger runs` and `ledger questions` need no fold
    from release_ledger.domain.events import Event
    from release_ledger.domain.run_state import QuestionView, RunState
    from release_ledger.domain.verdict import Verdict

DEFAULT_PAGE = 100


def project(ledger: Ledger, run_id: str) -> RunState:
    """The run's state from the ledger: its events and the artifacts they reference."""
    from release_ledger.domain.run_state import fold

    with gc_paused():
        records = ledger.store.read_events(run_id)
        return fold(records, ledger.artifacts_for([event for _, event in records]))


def verdict_of(state: RunState, rule: str | None = None) -> Verdict:
    """The verdict under `rule`, or under the rule the run was started with."""
    from release_ledger.domain.rules import verdict_under

    return verdict_under(state, rule)


def run_reading(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """The run's timeline (every event, and grouped), `ledger show`'s conclusion and the
    verdict document under its own rule: kept, or made from its stream and kept."""
    return kept_readings.run_reading(ledger, run_id)


# --- the run list -----------------------------------------------------------------------------


def status_code(rule: str) -> str:
    """What a remembered verdict status depends on besides the events: the rule's and the
    reader's versions (a new version computes it again)."""
    from release_ledger.domain.rules import get_rule
    from release_ledger.domain.versions import READER_VERSION

    try:
        version = get_rule(rule).version
    except Exception:
        version = 0
    return f"{rule}@{version}/reader-{READER_VERSION}"


def refresh_status_after(ledger: Ledger, run_id: str, events: Sequence[Event]) -> None:
    """The post-commit subscriber that keeps `ledger runs`' remembered status current: after
    an append that can change the run's verdict (`AFFECTS_VERDICT`), it is computed again
    (derived: should this fail, a reader recomputes a stale status)."""
    if any(e.kind in verdict_events() for e in events):
        refresh_status(ledger, run_id)


def refresh_status(ledger: Ledger, run_id: str) -> str | None:
    """Compute the run's verdict status under its own rule and remember it (a run that is
    completed or asked a question shows its verdict in the run list)."""
    state = project(ledger, run_id)
    if state.started is None:
        return None
    status = verdict_of(state).status
    code = sealed_code(ledger, run_id, state.length, status_code(state.started.rule), status)
    if code is not None:
        ledger.store.set_verdict(run_id, state.length, code, status)
    return status


def sealed_code(ledger: Ledger, run_id: str, length: int, code: str, status: str) -> str | None:
    """The status row's code with the ledger's seal over what it remembers (`CODE#HMAC`): a
    status set by hand in the database is computed again, never shown; None without a key
    (then nothing is remembered)."""
    from release_ledger.adapters.ledger_key import seal

    key = ledger.sealing_key()
    return None if key is None else f"{code}#{seal(key, run_id, str(length), code, status)}"


def _status(ledger: Ledger, run: IndexedRun) -> str:
    if not (run.lifecycle == "completed" or run.asked):
        return run.lifecycle
    rule = run.rule or "default"
    if (
        run.verdict is not None
        and run.verdict_length == run.row.length
        and run.verdict_code is not None
        and run.verdict_code
        == sealed_code(ledger, run.row.run_id, run.row.length, status_code(rule), run.verdict)
    ):
        return run.verdict
    try:
        return refresh_status(ledger, run.row.run_id) or run.lifecycle
    except BrokenRun:
        return "broken"


def list_runs(
    ledger: Ledger, limit: int | None = DEFAULT_PAGE, offset: int = 0
) -> list[dict[str, Any]]:
    """A page of runs, newest first, each with its status. Each listed run's hash chain is
    checked (without parsing its events): a tampered run shows as `broken`."""
    rows = []
    page = ledger.store.runs_page(limit, offset)
    broken = ledger.store.broken_runs([run.row for run in page])  # one read for the page
    for run in page:
        row = run.row
        try:
            if row.run_id in broken:
                raise broken[row.run_id]
            status = _status(ledger, run) if ledger.indexed else _folded_status(ledger, row.run_id)
        except BrokenRun:
            status = "broken"  # `ledger verify` names where
        rows.append(
            {
                "run_id": row.run_id,
                "started_at": row.started_at,
                "repo": row.repo,
                "head": row.head,
                "base": row.base,
                "head_ref": row.head_ref,
                "base_ref": row.base_ref,
                "status": status,
                "events": row.length,
            }
        )
    return rows


def _folded_status(ledger: Ledger, run_id: str) -> str:
    """The status from the run's events (a ledger without its indexes: read-only, old)."""
    from release_ledger.domain.run_state import fold
    from release_ledger.projections.status import run_status

    records = ledger.store.read_events(run_id)
    events = [e for _, e in records]
    status = run_status(events)
    if status == "completed" or any(e.kind == "QuestionAsked" for e in events):
        state = fold(records, ledger.artifacts_for(events))
        if state.started is not None:
            return verdict_of(state).status
    return status


def run_count(ledger: Ledger) -> int:
    return ledger.store.run_count()


# --- questions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenQuestion:
    """A question not yet decided, as the open-question index holds it."""

    run_id: str
    id: str
    position: int
    state: str  # open, expired, parked
    text: str
    options: tuple[str, ...]
    recommended: str
    impact: str
    topic: str
    subject: tuple[str, ...]
    asked_at: str
    deadline: str | None


def open_questions(ledger: Ledger, limit: int | None = None, offset: int = 0) -> list[OpenQuestion]:
    """Questions not yet decided, newest first (a page of `limit` from `offset`; None: all):
    one range read of the open-question index."""
    found = []
    for run_id, question_id, position, state, data in ledger.store.open_questions(limit, offset):
        d = json.loads(data)
        found.append(
            OpenQuestion(
                run_id, question_id, position, state, d["text"], tuple(d["options"]),
                d["recommended"], d["impact"], d["topic"], tuple(d["subject"]), d["asked_at"],
                d["deadline"],
            )
        )  # fmt: skip
    return found


def open_question_count(ledger: Ledger) -> int:
    """How many questions are not yet decided (the index's row count)."""
    return ledger.store.open_question_count()


@functools.cache
def _question_kinds() -> frozenset[str]:
    """What the question fold reads: a run's start and its questions' lives."""
    from release_ledger.domain.events import QUESTION, kinds_with

    return kinds_with(QUESTION) | {"RunStarted"}


def pending_questions(
    ledger: Ledger, run_prefix: str | None = None, limit: int | None = None, offset: int = 0
) -> list[dict[str, Any]]:
    """Open, expired and parked questions, newest first: a page of `limit` from `offset`
    (None: all). Reading appends nothing: an open question past its deadline is shown
    `overdue` until someone observes it (resume, answer, expire). From the open-question
    index; one run's (`run_prefix`), or a ledger without its indexes, from the run's events."""
    now = ledger.clock.now()
    if not run_prefix and ledger.indexed:
        return [_indexed_question_dict(q, now) for q in open_questions(ledger, limit, offset)]
    from release_ledger.domain.run_state import fold

    found = []
    ids = [ledger.resolve(run_prefix)] if run_prefix else list(run_ids(ledger))
    for run_id in ids:
        records = ledger.store.read_events(run_id)
        state = fold([(p, e) for p, e in records if e.kind in _question_kinds()], {})
        for q in state.questions.values():
            if not q.decided and q.state in ("open", "expired", "parked"):
                found.append(_question_dict(run_id, q, now))
    found.sort(key=lambda d: (d["asked_at"], d["run_id"], d["position"]), reverse=True)
    return found[offset:] if limit is None else found[offset : offset + limit]


def _question_dict(run_id: str, q: QuestionView, now: Any) -> dict[str, Any]:
    return _question_fields(run_id, q, q.asked_at.isoformat(), q.deadline, now)


def _indexed_question_dict(q: OpenQuestion, now: Any) -> dict[str, Any]:
    """`_question_dict` from the open-question index (the same fields, no fold)."""
    deadline = datetime.fromisoformat(q.deadline) if q.deadline else None
    return _question_fields(q.run_id, q, q.asked_at, deadline, now)


def _question_fields(
    run_id: str,
    q: QuestionView | OpenQuestion,
    asked_at: str,
    deadline: datetime | None,
    now: Any,
) -> dict[str, Any]:
    """What `ledger questions` shows of a question, folded or indexed alike."""
    return {
        "id": q.id,
        "run_id": run_id,
        "text": q.text,
        "options": [{"name": o, "recommended": o == q.recommended} for o in q.options],
        "recommended": q.recommended,
        "impact": q.impact,
        "topic": q.topic,
        "subject": list(q.subject),
        "asked_at": asked_at,
        "deadline": deadline.isoformat() if deadline else None,
        "overdue": bool(q.state == "open" and deadline is not None and now >= deadline),
        "seconds_left": (
            round((deadline - now).total_seconds(), 3) if deadline is not None else None
        ),
        "state": q.state,
        "position": q.position,
    }


# --- content lookups (the generic per-item index) ---------------------------------------------


def content(ledger: Ledger, kind: str, keys: Iterable[str]) -> list[ContentHit]:
    """Every indexed item of `kind` under any of `keys`, newest first (by the event's time,
    then run and position). Register an indexer in `projections.content_index.INDEXERS` to
    add a kind; rows are then written with each append and rebuilt by `Ledger.reindex`."""
    hits = ledger.store.content(kind, keys)
    return sorted(hits, key=lambda h: (_at(h), h.run_id, h.position), reverse=True)


def _at(hit: ContentHit) -> str:
    try:
        return str(json.loads(hit.data).get("at", ""))
    except ValueError:
        return ""


@dataclass(frozen=True)
class CachedResult:
    """One file's results at a commit from an earlier measured shard attempt."""

    key: str
    file: str
    run_id: str
    position: int
    shard: str
    attempt: int
    revision: str
    files: tuple[str, ...]
    exit_code: int | None
    signal: int | None
    report_hash: str | None
    log_tail_hash: str | None
    seconds: float
    rss_mb: float
    tests: int


def cached_results(
    ledger: Ledger, keys: dict[str, str], exclude_run: str | None = None
) -> dict[str, CachedResult]:
    """For each file (mapped to its result key), the newest cached result from a run whose
    chain is whole (a broken run proves nothing), other than `exclude_run`."""
    from release_ledger.projections.content_index import RESULT

    by_key: dict[str, list[ContentHit]] = {}
    for hit in content(ledger, RESULT, keys.values()):
        if hit.run_id != exclude_run:
            by_key.setdefault(hit.key, []).append(hit)
    whole: dict[str, bool] = {}
    found: dict[str, CachedResult] = {}
    for file, key in sorted(keys.items()):
        for hit in by_key.get(key, []):
            if hit.item != file:
                continue
            if hit.run_id not in whole:
                try:
                    ledger.store.check_chain(hit.run_id)
                    whole[hit.run_id] = True
                except BrokenRun:
                    whole[hit.run_id] = False
            if not whole[hit.run_id]:
                continue
            data = json.loads(hit.data)
            found[file] = CachedResult(
                key=key,
                file=file,
                run_id=hit.run_id,
                position=hit.position,
                shard=str(data["shard"]),
                attempt=int(data["attempt"]),
                revision=str(data["revision"]),
                files=tuple(data["files"]),
                exit_code=data.get("exit_code"),
                signal=data.get("signal"),
                report_hash=data.get("report_hash"),
                log_tail_hash=data.get("log_tail_hash"),
                seconds=float(data.get("seconds", 0.0)),
                rss_mb=float(data.get("rss_mb", 0.0)),
                tests=int(data.get("tests", 0)),
            )
            break
    return found


# --- catching views up ------------------------------------------------------------------------


def touched_runs(ledger: Ledger, after: int, until: int) -> list[str]:
    """Run ids with events in the ledger's notification range (after, until]."""
    return ledger.store.touched_runs(after, until)


def last_notification(ledger: Ledger) -> int:
    return ledger.store.max_notification_id()


def run_ids(ledger: Ledger) -> Sequence[str]:
    return sorted(row.run_id for row in ledger.store.runs())
