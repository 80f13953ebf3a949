"""Read models: the rows of every view table for one run, built from its events alone.

Pure: `run_rows(run_id, records, artifacts)` folds the run's whole stream (every JUnit report
parsed once, as the gate does) and judges it under every registered rule. The same events
always give the same rows, so a rebuild is reproducible to the digest and a run's rows can be
replaced whenever new events for it arrive. `TABLES` is the schema, with explicit column types
and the indexes for the questions people ask of it, e.g. (`sqlite3 .ledger/ledger.views.db`):

    -- every run where this test was introduced (under the run's own rule)
    SELECT c.run_id FROM classifications c JOIN verdicts v USING (run_id, rule)
     WHERE c.test = 'tests/test_a.py::test_a2' AND c.class = 'introduced' AND v.own = 1;
    -- slowest files, measured alone
    SELECT file, max(seconds) FROM files GROUP BY file ORDER BY 2 DESC LIMIT 20;
    -- flakiest tests
    SELECT test, count(*) FROM classifications WHERE class = 'flaky' AND rule = 'default'
     GROUP BY test ORDER BY 2 DESC LIMIT 20;
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from release_ledger.domain import events as ev
from release_ledger.domain.assessment import Assessment, assess
from release_ledger.domain.junit import FAILING, test_id
from release_ledger.domain.rules import REGISTRY
from release_ledger.domain.run_state import AssessmentMemo, AttemptView, RunState, fold
from release_ledger.domain.verdict import Verdict
from release_ledger.projections.rule_comparison import shard_classes, test_classes
from release_ledger.projections.verdict_view import base_reuse, verdict_document

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Table:
    """One view table: typed columns (str, int, float), primary key, secondary indexes."""

    name: str
    columns: tuple[tuple[str, type], ...]
    pk: tuple[str, ...]
    indexes: tuple[tuple[str, ...], ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)


RUN_TABLES: tuple[Table, ...] = (
    Table(
        "runs",
        (
            ("run_id", str), ("repo", str), ("head", str), ("base", str), ("head_ref", str),
            ("base_ref", str), ("rule", str), ("executor", str), ("tool_version", str),
            ("started_at", str), ("last_at", str), ("events", int), ("files", int),
            ("shards", int), ("completed", int), ("interrupted", int), ("status", str),
            ("base_files_reused", int), ("base_tests_reused", int),
        ),
        ("run_id",),
        (("repo", "started_at"), ("status",)),
    ),
    Table(
        "files",  # the measurement of each test file alone: "slowest files"
        (
            ("run_id", str), ("file", str), ("source", str), ("rss_mb", float),
            ("seconds", float), ("from_run", str), ("reason", str), ("interpreter", str),
        ),
        ("run_id", "interpreter", "file"),
        (("seconds",), ("file", "seconds"), ("rss_mb",),
         # a test's file in `ledger tests`: its median (by offset) and its peak (one probe)
         ("file", "interpreter", "seconds", "rss_mb"),
         ("file", "interpreter", "rss_mb", "seconds")),
    ),
    Table(
        "shards",
        (
            ("run_id", str), ("shard", str), ("parent", str), ("depth", int), ("leaf", int),
            ("file_count", int), ("files", str), ("planned_rss_mb", float),
            ("planned_seconds", float), ("split_reason", str), ("interpreter", str),
        ),
        ("run_id", "interpreter", "shard"),
    ),
    Table(
        "attempts",  # shard attempts, reused baselines and isolations, one row per event
        (
            ("run_id", str), ("position", int), ("kind", str), ("shard", str),
            ("revision", str), ("attempt", int), ("file", str), ("member", str),
            ("exit_code", int), ("signal", int), ("measured", int), ("reason", str),
            ("detail", str), ("tests", int), ("failures", int), ("errors", int),
            ("skipped", int), ("report_hash", str), ("log_tail_hash", str),
            ("seconds", float), ("rss_mb", float), ("reused_from", str), ("last_started", str),
            ("interpreter", str),
        ),
        ("run_id", "position"),
        (("run_id", "shard", "revision"), ("reason",), ("seconds",)),
    ),
    Table(
        "test_cases",  # one row per test per revision per attempt
        (
            ("run_id", str), ("position", int), ("revision", str), ("shard", str),
            ("attempt", int), ("test", str), ("file", str), ("outcome", str),
            ("seconds", float),
        ),
        ("run_id", "position", "test"),
        (("test", "outcome"),),
    ),
    Table(
        # Each test's history, one row per run, interpreter and revision (issue 29): the
        # commit it ran at, every outcome observed there (attempts, reused results and
        # isolations, as [position, outcome]) and whether they differed (flaky evidence);
        # `ledger tests` and the gate's exoneration read across runs from here.
        "test_history",
        (
            ("run_id", str), ("interpreter", str), ("revision", str), ("test", str),
            ("file", str), ("commit_sha", str), ("at", str), ("outcomes", str),
            ("failed", int), ("passed", int),
            ("state", int),  # 0 neither failed nor passed (skipped), 1 passed, 2 failed, 3 both
            ("first_failed", int), ("first_passed", int), ("seconds", float),
            ("run_first", int),  # 1 on the run's first row of the test: `runs seen` is a sum
        ),
        ("run_id", "interpreter", "revision", "test"),
        # A test's counts are kept in `test_totals` and `test_commits` (10,000 runs of one
        # suite are 20,000 rows a test); these find its first and last failure (one probe a
        # failing state) and its outcomes at one commit (the gate's exoneration).
        (("test", "interpreter", "state", "at", "run_id", "commit_sha"),
         ("test", "interpreter", "commit_sha")),
    ),
    Table(
        "classifications",  # per rule: "every run where this test was introduced", "flakiest"
        (
            ("run_id", str), ("rule", str), ("rule_version", int), ("test", str),
            ("file", str), ("class", str), ("effect", str),
        ),
        ("run_id", "rule", "test"),
        (("test", "class", "run_id"), ("class", "rule", "test")),
    ),
    Table(
        "shard_classifications",
        (
            ("run_id", str), ("rule", str), ("rule_version", int), ("shard", str),
            ("classification", str),
        ),
        ("run_id", "rule", "shard"),
    ),
    Table(
        "verdicts",  # every registered rule; `document` is the byte-exact verdict JSON
        (
            ("run_id", str), ("rule", str), ("rule_version", int), ("own", int),
            ("status", str), ("introduced", int), ("preexisting", int), ("fixed", int),
            ("flaky", int), ("skipped", int), ("unmeasured", int), ("retry_shards", int),
            ("reasons", str), ("document", str),
        ),
        ("run_id", "rule"),
        (("rule", "status"),),
    ),
    Table(
        "questions",
        (
            ("run_id", str), ("question_id", str), ("topic", str), ("text", str),
            ("options", str), ("recommended", str), ("impact", str), ("deadline", str),
            ("subject", str), ("asked_at", str), ("position", int), ("state", str),
            ("choice", str), ("by", str), ("late", int), ("decided_at", str),
        ),
        ("run_id", "question_id"),
        (("state", "impact"),),
    ),
    Table(
        "checks",
        (
            ("run_id", str), ("name", str), ("verdict", str), ("value", str), ("by", str),
            ("at", str), ("position", int),
        ),
        ("run_id", "name"),
        (("name", "verdict"),),
    ),
)  # fmt: skip

RUN_TABLE_NAMES = tuple(t.name for t in RUN_TABLES)  # the tables `run_rows` fills
RunRows = dict[str, list[Row]]


@dataclass(frozen=True)
class Summary:
    """Running totals of a run table's rows, grouped by some of its columns. The views store
    keeps them as rows come and go (each row's share added when it is written, taken off
    when it is deleted), so a total across every run is one row to read, not one a run.
    A row exists while any of its totals is not zero; source rows with an empty key part
    count nowhere. Only sums are kept: a maximum cannot be taken off again."""

    name: str
    source: Table
    key: tuple[str, ...]
    totals: tuple[str, ...]
    share: Callable[[Row], tuple[int, ...]]  # one source row's share of each total
    indexes: tuple[tuple[str, ...], ...] = ()
    key_positions: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        names = self.source.column_names
        object.__setattr__(self, "key_positions", tuple(names.index(c) for c in self.key))

    @property
    def columns(self) -> tuple[tuple[str, type], ...]:
        kinds = dict(self.source.columns)
        return (*((c, kinds[c]) for c in self.key), *((t, int) for t in self.totals))

    @property
    def pk(self) -> tuple[str, ...]:
        return self.key

    @property
    def column_names(self) -> tuple[str, ...]:
        return (*self.key, *self.totals)


_TABLE = {t.name: t for t in RUN_TABLES}
_H = {c: i for i, c in enumerate(_TABLE["test_history"].column_names)}
_F = {c: i for i, c in enumerate(_TABLE["files"].column_names)}

SUMMARIES: tuple[Summary, ...] = (
    # `ledger tests`: a test's rows per revision and state (1 passed, 2 failed, 3 both, 0
    # neither) and the runs that saw it (each run's first row of the test)
    Summary(
        "test_totals", _TABLE["test_history"], ("test", "interpreter", "revision", "state"),
        ("rows", "runs"), lambda r: (1, int(r[_H["run_first"]])),
    ),
    # flaky evidence: at each commit, the rows where the test failed and where it passed;
    # `--flaky` reads the few pairs that ever failed from their own index
    Summary(
        "test_commits", _TABLE["test_history"], ("test", "interpreter", "commit_sha"),
        ("failed_rows", "passed_rows"),
        lambda r: (int(r[_H["failed"]] > 0), int(r[_H["passed"]] > 0)),
        (("failed_rows", "test", "interpreter", "passed_rows"),),
    ),
    # a file's measurements (with a time) on one interpreter: where its median lies
    Summary(
        "file_totals", _TABLE["files"], ("file", "interpreter"), ("measured",),
        lambda r: (int(r[_F["seconds"]] is not None),),
    ),
)  # fmt: skip

# Every view table, in the order they are created.
TABLES: tuple[Table | Summary, ...] = (*RUN_TABLES, *SUMMARIES)


# The events the read models read themselves (each attempt's and isolation's row); every
# other fact reaches them through the run's fold (`domain/run_state.FOLDED`).
READ_FROM_EVENTS: frozenset[type[ev.Event]] = frozenset(
    {ev.ShardAttemptRecorded, ev.BaselineReused, ev.IsolationRecorded}
)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def verdicts_of(state: RunState) -> list[Verdict]:
    """The run judged under every registered rule, in name order."""
    return [REGISTRY[name].decide(state) for name in sorted(REGISTRY)]


def run_rows(
    run_id: str,
    records: Sequence[tuple[int, ev.Event]],
    artifacts: Mapping[str, bytes],
    memo: AssessmentMemo | None = None,
) -> RunRows:
    """Every view row of one run from its whole stream (positions from the ledger); with a
    `memo`, the assessments it knows are not made again (`domain.run_state.fold`)."""
    state = fold(records, artifacts, memo)
    verdicts = verdicts_of(state)
    own_rule = state.started.rule if state.started else "default"
    rows: RunRows = {name: [] for name in RUN_TABLE_NAMES}
    own = next((v for v in verdicts if v.rule == own_rule), None)
    rows["runs"].append(_run_row(run_id, state, len(records), own))
    rows["files"] = _file_rows(run_id, state)
    rows["shards"] = _shard_rows(run_id, state)
    observed: list[Observed] = []
    rows["attempts"], rows["test_cases"] = _attempt_rows(
        run_id, state, records, artifacts, observed
    )
    rows["test_history"] = _history_rows(run_id, state, observed)
    for verdict in verdicts:
        rows["verdicts"].append(_verdict_row(run_id, state, verdict, verdict.rule == own_rule))
        for test, (cls, effect) in test_classes(verdict).items():
            rows["classifications"].append(
                (run_id, verdict.rule, verdict.rule_version, test, test.split("::", 1)[0],
                 cls, effect)
            )  # fmt: skip
        for shard, classification in shard_classes(state, verdict).items():
            rows["shard_classifications"].append(
                (run_id, verdict.rule, verdict.rule_version, shard, classification)
            )
    rows["questions"] = _question_rows(run_id, state)
    rows["checks"] = [
        (run_id, name, e.verdict, e.value, e.by, _iso(e.at), position)
        for name, (position, e) in sorted(state.checks.items())
    ]
    return rows


def _run_row(run_id: str, state: RunState, events: int, own: Verdict | None) -> Row:
    s = state.started
    reuse = base_reuse(state)
    return (
        run_id,
        s.repo if s else None,
        s.head if s else None,
        s.base if s else None,
        s.head_ref if s else None,
        s.base_ref if s else None,
        s.rule if s else None,
        s.executor if s else None,
        s.tool_version if s else None,
        _iso(s.at) if s else None,
        _iso(state.last_at),
        events,
        len(state.files),
        sum(len(lane.leaves()) for lane in _lanes(state)),
        int(state.completed),
        int(state.interrupted),
        own.status if own else None,
        reuse["reused"]["files"],
        reuse["reused"]["tests"],
    )


def _lanes(state: RunState) -> list[RunState]:
    """Each interpreter's state of a matrix run (rows carry its label), else the run's."""
    return list(state.matrix.values()) or [state]


def _file_rows(run_id: str, state: RunState) -> list[Row]:
    rows: list[Row] = []
    for lane in _lanes(state):
        on = lane.interpreter
        for file in sorted(set(lane.measured) | set(lane.measure_failures)):
            if file in lane.measured:
                rss, seconds, from_run = lane.measured[file]
                source = "reused" if from_run else "measured"
                rows.append((run_id, file, source, rss, seconds, from_run, None, on))
            else:
                f = lane.measure_failures[file]
                rows.append((run_id, file, "failed", f.rss_mb, f.seconds, None, f.reason, on))
    return rows


def _shard_rows(run_id: str, state: RunState) -> list[Row]:
    rows: list[Row] = []
    for lane in _lanes(state):
        planned = {s.id: s for s in lane.plan.shards} if lane.plan else {}
        for shard_id in sorted(lane.shards):
            shard = lane.shards[shard_id]
            plan = planned.get(shard_id)
            rows.append(
                (
                    run_id,
                    shard_id,
                    shard.parent,
                    shard.depth,
                    int(shard.leaf),
                    len(shard.files),
                    canonical_json(list(shard.files)),
                    plan.rss_mb if plan else None,
                    plan.seconds if plan else None,
                    shard.split_reason or None,
                    lane.interpreter,
                )
            )
    return rows


# (interpreter, revision, test, position, file, outcome, seconds): one test seen by one event.
Observed = tuple[str, str, str, int, str, str, float]


def _history_rows(run_id: str, state: RunState, observed: Sequence[Observed]) -> list[Row]:
    """`test_history`: each test's outcomes at each revision of this run, by interpreter."""
    s = state.started
    commits = {"head": s.head if s else None, "base": s.base if s else None}
    at = _iso(s.at) if s else None
    grouped: dict[tuple[str, str, str], list[Observed]] = {}
    for o in observed:
        grouped.setdefault((o[0], o[1], o[2]), []).append(o)
    rows: list[Row] = []
    counted: set[tuple[str, str]] = set()
    for (interpreter, revision, test), seen in sorted(grouped.items()):  # base before head
        seen.sort(key=lambda o: o[3])
        failed = [o[3] for o in seen if o[5] in FAILING]
        passed = [o[3] for o in seen if o[5] == "passed"]
        rows.append(
            (run_id, interpreter, revision, test, seen[0][4], commits.get(revision), at,
             canonical_json([[o[3], o[5]] for o in seen]), len(failed), len(passed),
             2 * bool(failed) + bool(passed),
             failed[0] if failed else None, passed[0] if passed else None,
             max(o[6] for o in seen), int((interpreter, test) not in counted))
        )  # fmt: skip
        counted.add((interpreter, test))
    return rows


def _attempt_rows(
    run_id: str,
    state: RunState,
    records: Sequence[tuple[int, ev.Event]],
    artifacts: Mapping[str, bytes],
    observed: list[Observed] | None = None,
) -> tuple[list[Row], list[Row]]:
    lanes = _lanes(state)
    views: dict[int, AttemptView] = {
        a.position: a
        for lane in lanes
        for shard in lane.shards.values()
        for revision in shard.attempts.values()
        for a in revision
    }
    isolations = {v.position: v.assessment for lane in lanes for v in lane.isolations.values()}
    reused_sources = {
        r.position: r.source
        for lane in lanes
        for shard in lane.shards.values()
        for r in shard.reused.values()
    }
    attempts: list[Row] = []
    cases: list[Row] = []
    for position, e in records:
        if isinstance(e, ev.BaselineReused) and e.per_file and position not in views:
            source = reused_sources.get(position)
            if source is None:
                continue
            assessment = source
            kind, shard, file, attempt = "reused", e.shard, None, 0
            member, revision, last_started = "reused", "base", None
            rss_mb = e.rss_mb
            reused_from: str | None = e.from_run
        elif isinstance(e, ev.ShardAttemptRecorded | ev.BaselineReused):
            view = views.get(position)
            if view is None:
                continue  # an attempt of a shard the run never planned: the fold ignores it
            assessment = view.assessment
            kind = "reused" if isinstance(e, ev.BaselineReused) else "shard"
            shard, file, attempt = e.shard, None, view.attempt
            member, revision, last_started = view.member, view.revision, view.last_started
            rss_mb, reused_from = e.rss_mb, view.reused_from
        elif isinstance(e, ev.IsolationRecorded):
            assessment = isolations.get(position) or _isolation_assessment(e, artifacts)
            kind, shard, file, attempt = "isolation", None, e.file, 1
            member, revision, last_started, rss_mb, reused_from = None, e.revision, None, 0.0, None
        else:
            continue
        report = assessment.report
        attempts.append(
            (
                run_id, position, kind, shard, revision, attempt, file, member, e.exit_code,
                e.signal, int(assessment.measured), assessment.reason,
                assessment.detail or None,
                report.tests if report else None, report.failures if report else None,
                report.errors if report else None, report.skipped if report else None,
                e.report_hash, e.log_tail_hash, e.seconds, rss_mb, reused_from, last_started,
                e.interpreter,
            )
        )  # fmt: skip
        if report is None:
            continue
        # Each event lists the results of its own files (a base attempt joined with reused
        # files lists the reused ones under their reuse events).
        own = {e.file} if isinstance(e, ev.IsolationRecorded) else set(e.files)
        outcomes = {test_id(case): case for case in report.cases if case.file in own}
        for test in sorted(outcomes):
            case = outcomes[test]
            cases.append(
                (run_id, position, revision, shard, attempt, test, case.file, case.outcome,
                 case.time)
            )  # fmt: skip
            if observed is not None:
                observed.append(
                    (e.interpreter, revision, test, position, case.file, case.outcome,
                     case.time if case.time is not None and case.time == case.time else 0.0)
                )  # fmt: skip
    return attempts, cases


def _isolation_assessment(e: ev.IsolationRecorded, artifacts: Mapping[str, bytes]) -> Assessment:
    """An isolation superseded by a later one of the same file: the fold keeps only the last."""
    report = artifacts.get(e.report_hash) if e.report_hash else None
    log_tail = artifacts.get(e.log_tail_hash, b"") if e.log_tail_hash else b""
    return assess(
        exit_code=e.exit_code,
        signal=e.signal,
        timed_out=e.timed_out,
        oom=False,
        infrastructure_failure=None,
        report=report,
        log_tail=log_tail,
        files=[e.file],
        report_too_large=e.report_too_large,
    )


def _verdict_row(run_id: str, state: RunState, verdict: Verdict, own: bool) -> Row:
    return (
        run_id,
        verdict.rule,
        verdict.rule_version,
        int(own),
        verdict.status,
        len(verdict.introduced),
        len(verdict.preexisting),
        len(verdict.fixed),
        len(verdict.flaky),
        len(verdict.skipped),
        len(verdict.unmeasured),
        len(verdict.retry_shards),
        canonical_json(list(verdict.reasons)),
        canonical_json(verdict_document(run_id, state, verdict)),
    )


def _question_rows(run_id: str, state: RunState) -> list[Row]:
    rows: list[Row] = []
    for qid in sorted(state.questions):
        q = state.questions[qid]
        rows.append(
            (
                run_id, qid, q.topic, q.text, canonical_json(list(q.options)), q.recommended,
                q.impact, _iso(q.deadline), canonical_json(list(q.subject)), _iso(q.asked_at),
                q.position, q.state, q.choice, q.by, int(q.late), _iso(q.decided_at),
            )
        )  # fmt: skip
    return rows
