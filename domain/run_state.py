"""A run's state, folded from its events: what the rules judge and the gate acts on.

Pure: `fold(events, artifacts)` reads nothing but its arguments. Artifacts (report and log
bytes by sha256) are passed in by the caller, so a changed reader or rule changes the
verdict on replay without rerunning a test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from release_ledger.domain import events as ev
from release_ledger.domain.assessment import (
    INCOMPLETE,
    Assessment,
    assess,
    last_started_file,
    plugin_running_file,
)
from release_ledger.domain.assessment_memo import AssessmentMemo as AssessmentMemo  # re-exported
from release_ledger.domain.assessment_memo import content_key
from release_ledger.domain.failures import blames_executor, excludes_member
from release_ledger.domain.harness import HarnessChange
from release_ledger.domain.junit import Report
from release_ledger.domain.lifecycles import (
    ASSUMED,
    COMPLETED,
    INTERRUPTED,
    LISTED,
    QUESTION_STEPS,
    RUN_STEPS,
    TAKEN,
)
from release_ledger.domain.memory import FileCost
from release_ledger.domain.rerun_views import (
    AttributionView,
    ExonerationView,
    InOrderView,
    IsolationView,
)

HEAD = "head"
BASE = "base"
NO_TESTS_COLLECTED = 5  # pytest's exit code for a file that holds no test


@dataclass(frozen=True)
class AttemptView:
    shard: str
    attempt: int
    revision: str
    files: tuple[str, ...]
    member: str
    assessment: Assessment
    position: int
    last_started: str | None = None
    running: str | None = None  # the file the gate's pytest plugin said was running (exact)
    reused_from: str | None = None
    report_hash: str | None = None
    log_tail_hash: str | None = None
    seconds: float = 0.0
    rss_mb: float = 0.0
    # Files whose base results came from the result cache, and the runs they came from.
    reused_files: tuple[str, ...] = ()
    reused_runs: tuple[str, ...] = ()
    killed_test: str | None = None  # ended at its file's time limit, this test running
    time_limit_s: float | None = None
    exit_code: int | None = None
    time_limit_not_believed: str | None = None  # a time-limit line the supervisor belied


@dataclass(frozen=True)
class ReusedFile:
    """One file's base results taken from an earlier attempt (a per-file `BaselineReused`):
    that attempt's assessment, read from its report with the files it ran."""

    file: str
    from_run: str
    position: int  # of the BaselineReused event in this run
    source: Assessment
    seconds: float = 0.0


@dataclass
class ShardView:
    id: str
    files: tuple[str, ...]
    parent: str | None = None
    children: tuple[str, ...] = ()
    split_reason: str = ""
    attempts: dict[str, list[AttemptView]] = field(default_factory=lambda: {HEAD: [], BASE: []})
    reused: dict[str, ReusedFile] = field(default_factory=dict)  # base results by file
    # Attempts made in an environment source rejected since (`SourceRejected`), by revision.
    superseded: dict[str, list[AttemptView]] = field(default_factory=dict)

    @property
    def leaf(self) -> bool:
        return not self.children

    @property
    def depth(self) -> int:
        return self.id.count(".")

    def latest(self, revision: str) -> AttemptView | None:
        attempts = self.attempts[revision]
        return attempts[-1] if attempts else None


@dataclass
class QuestionView:
    id: str
    topic: str
    text: str
    options: tuple[str, ...]
    recommended: str
    impact: str
    deadline: datetime | None
    subject: tuple[str, ...]
    asked_at: datetime
    position: int
    state: str = "open"  # open, answered, assumed, expired, taken, parked
    choice: str | None = None
    by: str | None = None
    late: bool = False
    decided_position: int | None = None
    decided_at: datetime | None = None
    history: list[tuple[int, str]] = field(default_factory=list)  # (position, kind)

    @property
    def decided(self) -> bool:
        return self.choice is not None


@dataclass
class RunState:
    run_id: str = ""
    started: ev.RunStarted | None = None
    files: tuple[str, ...] = ()
    missing_at_base: tuple[str, ...] = ()
    removed_at_head: tuple[str, ...] = ()  # test files deleted at head (not renamed)
    renamed_at_head: dict[str, str] = field(default_factory=dict)  # old path -> new
    # Harness files changed at head (None: the run's discovery did not compare them).
    harness_changed: tuple[HarnessChange, ...] | None = None
    discovered: bool = False
    measured: dict[str, tuple[float, float, str | None]] = field(default_factory=dict)
    # The latest cost of each file for the memory model (solo, reused or measured in place),
    # and the largest runner baseline any measurement saw (MB).
    costs: dict[str, FileCost] = field(default_factory=dict)
    baseline_mb: float | None = None
    discovered_sizes: dict[str, int] = field(default_factory=dict)
    discovered_tests: dict[str, int] = field(default_factory=dict)
    discovered_items: dict[str, int] = field(default_factory=dict)  # collected, per file
    measure_failures: dict[str, ev.MeasurementFailed] = field(default_factory=dict)
    measure_retries: dict[str, int] = field(default_factory=dict)  # infrastructure failures
    empty_files: set[str] = field(default_factory=set)  # collected no test (pytest exit 5)
    plan: ev.ShardsPlanned | None = None
    shards: dict[str, ShardView] = field(default_factory=dict)
    isolations: dict[tuple[str, str], IsolationView] = field(default_factory=dict)
    attribution: AttributionView | None = None
    # Head's introduced failures looked up in the history and quarantine (None: not yet), and
    # those exonerated, by test.
    looked_up: tuple[str, ...] | None = None
    exonerations: dict[str, ExonerationView] = field(default_factory=dict)
    # The project's collection order, its runs in that order by (file, revision), and the
    # sources rejected by revision (`domain/order.py`, `domain/unrunnable.py`).
    order: tuple[str, ...] = ()
    in_order: dict[tuple[str, str], InOrderView] = field(default_factory=dict)
    rejected_sources: dict[str, list[ev.SourceRejected]] = field(default_factory=dict)
    pool_rounds: list[ev.PoolMeasured] = field(default_factory=list)
    placements: list[ev.ShardPlaced] = field(default_factory=list)
    pod_failures: list[tuple[int, ev.PodFailed]] = field(default_factory=list)
    # The latest environment of each revision on each machine: (revision, where) -> event.
    environments: dict[tuple[str, str], ev.EnvironmentPrepared] = field(default_factory=dict)
    questions: dict[str, QuestionView] = field(default_factory=dict)
    checks: dict[str, tuple[int, ev.CheckRecorded]] = field(default_factory=dict)
    # The release's built distributions per revision and the upgrade check (latest of each).
    distributions: dict[str, tuple[int, ev.DistributionsBuilt]] = field(default_factory=dict)
    upgrade: tuple[int, ev.UpgradeChecked] | None = None
    approvals: list[tuple[int, ev.ApprovalIssued]] = field(default_factory=list)
    interrupted: bool = False
    completed: bool = False
    completed_position: int | None = None
    last_at: datetime | None = None
    length: int = 0
    # A matrix gate (`--python`): the interpreter this state folds (its label), and on the
    # first interpreter's state every interpreter's state by label (itself included).
    interpreter: str = ""
    matrix: dict[str, RunState] = field(default_factory=dict, repr=False, compare=False)
    # Derived values memoised by pure functions of this state; every `apply` clears it.
    cache: dict[str, object] = field(default_factory=dict, repr=False, compare=False)
    # Assessments the caller knows ahead by content, and those this fold made (`fold`).
    memo: AssessmentMemo | None = field(default=None, repr=False, compare=False)
    # `missing_at_base` as a set, for the tuple it was made of (`base_files_of`).
    _missing: tuple[tuple[str, ...], frozenset[str]] | None = field(
        default=None, repr=False, compare=False
    )

    # -- views --

    @property
    def base_files(self) -> frozenset[str]:
        missing = set(self.missing_at_base)
        return frozenset(f for f in self.files if f not in missing)

    def leaves(self) -> list[ShardView]:
        return [s for s in self.shards.values() if s.leaf]

    def base_files_of(self, shard: ShardView) -> tuple[str, ...]:
        if not self.missing_at_base:
            return shard.files  # every file is at base: nothing to filter
        missing = self._missing
        if missing is None or missing[0] is not self.missing_at_base:
            missing = self._missing = (self.missing_at_base, frozenset(self.missing_at_base))
        return tuple(f for f in shard.files if f not in missing[1])

    def nominal_tests(self, file: str) -> int:
        """What a file's first cost counts: the items its declared invocation collected (a
        parametrized case each), else the `def test` functions discovery read."""
        items = self.discovered_items.get(file)
        return items if items is not None else self.discovered_tests.get(file, 0)

    @property
    def excluded_members(self) -> frozenset[str]:
        """Pool members whose machinery failed in this run (a test's own OOM does not count)."""
        return frozenset(
            e.member for _, e in self.pod_failures if excludes_member(e.failure_kind, e.reason)
        )

    def option(self, name: str, default: object) -> object:
        if self.started is None:
            return default
        return self.started.options.get(name, default)


# Assessments memoised by the facts they are a pure function of (artifacts by hash), so
# re-projecting a run after each gate step, or replaying many runs that share a reused
# baseline, reads each stored report once. Bounded; any entry can be recomputed.
_ASSESSMENTS: dict[tuple[object, ...], Assessment] = {}
_ASSESSMENTS_MAX = 4096


def _assess_stored(
    *,
    exit_code: int | None,
    signal: int | None,
    timed_out: bool,
    oom: bool,
    infrastructure_failure: str | None,
    infrastructure_detail: str,
    kind: str | None = None,
    report_hash: str | None,
    log_tail_hash: str | None,
    files: Sequence[str],
    artifacts: Mapping[str, bytes],
    report_too_large: int | None = None,
    memo: AssessmentMemo | None = None,
) -> Assessment:
    report = artifacts.get(report_hash) if report_hash else None
    if report_hash and report is None:
        return Assessment(False, "no-output", "the report is missing from the ledger")
    key = (
        exit_code, signal, timed_out, oom, infrastructure_failure, infrastructure_detail, kind,
        report_hash, log_tail_hash, tuple(files), report_too_large,
    )  # fmt: skip
    # Where the caller keeps assessments by content: its entry for this report, if any.
    made: dict[str, tuple[str, Assessment]] | None = None
    content = ""
    if memo is not None and report_hash:
        content = content_key(key)
        known = memo.known.get(content)
        if known is not None:
            return known
        made = memo.made
    cached = _ASSESSMENTS.get(key)
    if cached is not None:
        if made is not None:
            made[content] = (report_hash or "", cached)
        return cached
    log_tail = artifacts.get(log_tail_hash, b"") if log_tail_hash else b""
    assessment = assess(
        exit_code=exit_code,
        signal=signal,
        timed_out=timed_out,
        oom=oom,
        infrastructure_failure=infrastructure_failure,
        report=report,
        log_tail=log_tail,
        files=files,
        infrastructure_detail=infrastructure_detail,
        kind=kind,
        report_too_large=report_too_large,
    )
    if len(_ASSESSMENTS) >= _ASSESSMENTS_MAX:
        _ASSESSMENTS.clear()
    _ASSESSMENTS[key] = assessment
    if made is not None:
        made[content] = (report_hash or "", assessment)
    return assessment


def attempt_assessment(
    e: ev.ShardAttemptRecorded,
    artifacts: Mapping[str, bytes],
    memo: AssessmentMemo | None = None,
) -> Assessment:
    """A shard attempt's assessment, memoised as the fold's (indexers and the fold that
    follows an append read each report once)."""
    return _assess_stored(
        exit_code=e.exit_code, signal=e.signal, timed_out=e.timed_out, oom=e.oom,
        infrastructure_failure=e.infrastructure_failure,
        infrastructure_detail=e.infrastructure_detail, kind=e.failure_kind,
        report_hash=e.report_hash, log_tail_hash=e.log_tail_hash, files=e.files,
        artifacts=artifacts, report_too_large=e.report_too_large, memo=memo,
    )  # fmt: skip


def _reused_assessment(
    e: ev.BaselineReused,
    files: Sequence[str],
    artifacts: Mapping[str, bytes],
    memo: AssessmentMemo | None = None,
) -> Assessment:
    """An earlier attempt's report, reused as base results, read for `files` (the reused
    shard's, or the whole earlier attempt's when only some files are reused)."""
    return _assess_stored(
        exit_code=e.exit_code, signal=e.signal, timed_out=False, oom=False,
        infrastructure_failure=None, infrastructure_detail="",
        report_hash=e.report_hash, log_tail_hash=e.log_tail_hash, files=files,
        artifacts=artifacts, memo=memo,
    )  # fmt: skip


def _attempt_view(
    e: ev.ShardAttemptRecorded | ev.BaselineReused,
    position: int,
    artifacts: Mapping[str, bytes],
    memo: AssessmentMemo | None = None,
) -> AttemptView:
    if isinstance(e, ev.BaselineReused):
        assessment = _reused_assessment(e, e.files, artifacts, memo)
        return AttemptView(
            e.shard, 0, BASE, tuple(e.files), "reused", assessment, position,
            reused_from=e.from_run, report_hash=e.report_hash, log_tail_hash=e.log_tail_hash,
            seconds=e.seconds, rss_mb=e.rss_mb,
        )  # fmt: skip
    assessment = attempt_assessment(e, artifacts, memo)
    last = running = None
    if not assessment.measured and e.log_tail_hash:
        log_tail = artifacts.get(e.log_tail_hash, b"").decode("utf-8", "replace")
        running = plugin_running_file(log_tail, e.files)
        last = running or last_started_file(log_tail, e.files)
    return AttemptView(
        e.shard, e.attempt, e.revision, tuple(e.files), e.member, assessment, position,
        last_started=last, running=running, report_hash=e.report_hash,
        log_tail_hash=e.log_tail_hash, seconds=e.seconds, rss_mb=e.rss_mb,
        killed_test=e.killed_test, time_limit_s=e.time_limit_s, exit_code=e.exit_code,
        time_limit_not_believed=e.time_limit_not_believed,
    )  # fmt: skip


def _apply_reused_files(
    state: RunState,
    shard: ShardView,
    position: int,
    e: ev.BaselineReused,
    artifacts: Mapping[str, bytes],
) -> None:
    """Record the files' reused base results; once every base file of the shard has one (and
    no base attempt was made), they are the shard's base attempt."""
    source = _reused_assessment(e, e.source_files, artifacts, state.memo)
    share = e.seconds / len(e.files) if e.files else 0.0
    for file in e.files:
        shard.reused[file] = ReusedFile(file, e.from_run, position, source, share)
    needed = state.base_files_of(shard)
    if shard.attempts[BASE] or not all(f in shard.reused for f in needed):
        return
    empty = AttemptView(
        shard.id, 0, BASE, (), "reused", Assessment(True, report=Report(())), position
    )
    shard.attempts[BASE].append(_with_reused(state, shard, empty))


def _with_reused(state: RunState, shard: ShardView, fresh: AttemptView) -> AttemptView:
    """A base attempt joined with the shard's reused files: measured only when the fresh part
    and every reused file are; the report holds the reused files' cases, then the fresh ones."""
    files = state.base_files_of(shard)
    reused = [shard.reused[f] for f in files if f in shard.reused]
    runs = tuple(sorted({r.from_run for r in reused}))
    if not fresh.assessment.measured:
        return replace(fresh, reused_files=tuple(r.file for r in reused), reused_runs=runs)
    cases = []
    assessment: Assessment | None = None
    for r in reused:
        if not r.source.measured or r.source.report is None:
            assessment = Assessment(
                False,
                r.source.reason or INCOMPLETE,
                f"the reused base result of {r.file} (run {r.from_run[:12]}) is not a "
                f"measurement: {r.source.detail or r.source.reason}",
            )
            break
        own = [case for case in r.source.report.cases if case.file == r.file]
        if not own and r.file not in r.source.report.empty_files:
            assessment = Assessment(
                False,
                INCOMPLETE,
                f"the reused base report (run {r.from_run[:12]}) holds no result for {r.file}",
            )
            break
        cases.extend(own)
    if assessment is None:
        report = fresh.assessment.report
        assessment = Assessment(True, report=Report([*cases, *(report.cases if report else ())]))
    return replace(
        fresh,
        files=tuple(files),
        assessment=assessment,
        seconds=fresh.seconds + sum(r.seconds for r in reused),
        reused_from=fresh.reused_from or (runs[0] if fresh.attempt == 0 else None),
        reused_files=tuple(r.file for r in reused),
        reused_runs=runs,
    )


def _isolation_view(
    e: ev.IsolationRecorded,
    position: int,
    artifacts: Mapping[str, bytes],
    memo: AssessmentMemo | None = None,
) -> IsolationView:
    assessment = _assess_stored(
        exit_code=e.exit_code, signal=e.signal, timed_out=e.timed_out, oom=e.oom,
        infrastructure_failure=None, infrastructure_detail="",
        report_hash=e.report_hash, log_tail_hash=e.log_tail_hash, files=[e.file],
        artifacts=artifacts, report_too_large=e.report_too_large, memo=memo,
    )  # fmt: skip
    return IsolationView(
        e.file, e.revision, assessment, position, e.killed_test, e.time_limit_s, e.seconds,
        e.oom, e.rss_mb, e.time_limit_not_believed,
    )  # fmt: skip


def _question_decided(
    q: QuestionView, position: int, at: datetime, choice: str, state: str, by: str | None = None
) -> None:
    q.choice = choice
    q.state = state
    q.by = by
    q.decided_position = position
    q.decided_at = at


def _note_cost(state: RunState, file: str, e: ev.FileMeasured | ev.MeasurementReused) -> None:
    state.costs[file] = FileCost(
        e.rss_mb, e.seconds, e.retained_mb, e.transient_mb, e.shared_mb, e.ceiling_mb
    )
    if e.baseline_mb is not None:
        state.baseline_mb = max(state.baseline_mb or 0.0, e.baseline_mb)


# --- the fold's handlers: one per event type ---------------------------------------------

Handler = Callable[[RunState, int, Any, Mapping[str, bytes]], None]
FOLDED: dict[type[ev.Event], Handler] = {}
# Read elsewhere, never by the fold: the release report reads `ReleaseInspected` itself.
NOT_FOLDED: frozenset[type[ev.Event]] = frozenset({ev.ReleaseInspected, ev.AttestationIssued})


def _folds(*types: type[ev.Event]) -> Callable[[Handler], Handler]:
    """Register the fold's handler of these event types (`tests/test_projectors.py` checks
    every type is folded or named in `NOT_FOLDED`)."""

    def register(handler: Handler) -> Handler:
        for kind in types:
            FOLDED[kind] = handler
        return handler

    return register


def apply(state: RunState, position: int, e: ev.Event, artifacts: Mapping[str, bytes]) -> None:
    """Mutate `state` by one event (the fold's step)."""
    state.cache.clear()
    state.length = max(state.length, position)
    state.last_at = e.at
    state.run_id = e.run_id
    handler = FOLDED.get(type(e))
    if handler is not None:
        handler(state, position, e, artifacts)


@_folds(ev.RunStarted)
def _started(state: RunState, _: int, e: ev.RunStarted, __: Mapping[str, bytes]) -> None:
    state.started = e


@_folds(ev.TestFilesDiscovered)
def _discovered(
    state: RunState, _: int, e: ev.TestFilesDiscovered, __: Mapping[str, bytes]
) -> None:
    state.discovered = True
    state.files = tuple(e.files)
    state.missing_at_base = tuple(e.missing_at_base)
    state.removed_at_head = tuple(e.removed_at_head)
    state.renamed_at_head = dict(e.renamed_at_head)
    if e.harness_changed is not None:
        state.harness_changed = tuple(e.harness_changed)
    state.discovered_sizes = dict(e.sizes)
    state.discovered_tests = dict(e.test_functions)
    state.discovered_items = dict(e.collected_items)
    state.order = tuple(e.order)


@_folds(ev.FileMeasured)
def _measured(state: RunState, _: int, e: ev.FileMeasured, __: Mapping[str, bytes]) -> None:
    state.measure_failures.pop(e.file, None)  # measured after all (a retried failure)
    state.measured[e.file] = (e.rss_mb, e.seconds, None)
    _note_cost(state, e.file, e)
    if e.holds_no_test:
        state.empty_files.add(e.file)


@_folds(ev.MeasurementReused)
def _measurement_reused(
    state: RunState, _: int, e: ev.MeasurementReused, __: Mapping[str, bytes]
) -> None:
    state.measured[e.file] = (e.rss_mb, e.seconds, e.from_run)
    _note_cost(state, e.file, e)


@_folds(ev.MeasurementFailed)
def _measurement_failed(
    state: RunState, _: int, e: ev.MeasurementFailed, __: Mapping[str, bytes]
) -> None:
    state.measure_failures[e.file] = e
    if blames_executor(e.failure_kind, e.infrastructure_failure):
        state.measure_retries[e.file] = state.measure_retries.get(e.file, 0) + 1


@_folds(ev.ShardsPlanned)
def _planned(state: RunState, _: int, e: ev.ShardsPlanned, __: Mapping[str, bytes]) -> None:
    state.plan = e
    for planned in e.shards:
        state.shards[planned.id] = ShardView(planned.id, tuple(planned.files))


@_folds(ev.ShardSplit)
def _split(state: RunState, _: int, e: ev.ShardSplit, __: Mapping[str, bytes]) -> None:
    parent = state.shards.get(e.parent)
    if parent is not None:
        parent.children = tuple(c.id for c in e.children)
        parent.split_reason = e.reason
    for child in e.children:
        state.shards[child.id] = ShardView(child.id, tuple(child.files), parent=e.parent)


@_folds(ev.ShardAttemptRecorded, ev.BaselineReused)
def _attempt(
    state: RunState,
    position: int,
    e: ev.ShardAttemptRecorded | ev.BaselineReused,
    artifacts: Mapping[str, bytes],
) -> None:
    shard = state.shards.get(e.shard)
    if shard is None:
        return
    if isinstance(e, ev.BaselineReused) and e.per_file:
        _apply_reused_files(state, shard, position, e, artifacts)
        return
    view = _attempt_view(e, position, artifacts, state.memo)
    if view.revision == BASE and shard.reused:
        view = _with_reused(state, shard, view)
    shard.attempts[view.revision].append(view)


@_folds(ev.IsolationRecorded)
def _isolated(
    state: RunState, position: int, e: ev.IsolationRecorded, artifacts: Mapping[str, bytes]
) -> None:
    state.isolations[(e.file, e.revision)] = _isolation_view(e, position, artifacts, state.memo)


@_folds(ev.InOrderRecorded)
def _in_order(
    state: RunState, position: int, e: ev.InOrderRecorded, artifacts: Mapping[str, bytes]
) -> None:
    assessment = _assess_stored(
        exit_code=e.exit_code, signal=e.signal, timed_out=e.timed_out, oom=e.oom,
        infrastructure_failure=e.infrastructure_failure, infrastructure_detail="",
        kind=e.failure_kind, report_hash=e.report_hash, log_tail_hash=e.log_tail_hash,
        files=e.files, artifacts=artifacts, report_too_large=e.report_too_large,
        memo=state.memo,
    )  # fmt: skip
    view = InOrderView(e.revision, tuple(e.files), tuple(e.confirms), assessment, position)
    for file in e.confirms:
        state.in_order[(file, e.revision)] = view


@_folds(ev.SourceRejected)
def _source_rejected(
    state: RunState, _: int, e: ev.SourceRejected, __: Mapping[str, bytes]
) -> None:
    """The revision's attempts made in the rejected source stop counting, and so do the base
    results the result cache gave for it (`reused_dropped`): its shards are run again (their
    attempt numbers go on) in the next source, every file of theirs."""
    state.rejected_sources.setdefault(e.revision, []).append(e)
    dropped = set(e.reused_dropped)
    for shard in state.shards.values():
        made = shard.attempts[e.revision]
        if made:
            shard.superseded.setdefault(e.revision, []).extend(made)
            shard.attempts[e.revision] = []
        for file in dropped & set(shard.reused):  # cached in that source: run again
            del shard.reused[file]


@_folds(ev.AttributionRecorded)
def _attributed(
    state: RunState, position: int, e: ev.AttributionRecorded, artifacts: Mapping[str, bytes]
) -> None:
    assessment = None
    if not e.environment_error:
        assessment = _assess_stored(
            exit_code=e.exit_code, signal=e.signal, timed_out=e.timed_out, oom=False,
            infrastructure_failure=e.failure_reason, infrastructure_detail="",
            kind=e.failure_kind, report_hash=e.report_hash, log_tail_hash=e.log_tail_hash,
            files=e.files, artifacts=artifacts, report_too_large=e.report_too_large,
            memo=state.memo,
        )  # fmt: skip
    state.attribution = AttributionView(
        tuple(e.tests), tuple(e.moved), assessment, e.environment_error, position
    )


@_folds(ev.ExonerationsLookedUp)
def _looked_up(
    state: RunState, _: int, e: ev.ExonerationsLookedUp, __: Mapping[str, bytes]
) -> None:
    state.looked_up = (*(state.looked_up or ()), *e.tests)


@_folds(ev.FailureExonerated)
def _exonerated(
    state: RunState, position: int, e: ev.FailureExonerated, _: Mapping[str, bytes]
) -> None:
    state.exonerations[e.test] = ExonerationView(e.test, e.reason, tuple(e.proof), position)


@_folds(ev.PoolMeasured)
def _pool(state: RunState, _: int, e: ev.PoolMeasured, __: Mapping[str, bytes]) -> None:
    state.pool_rounds.append(e)


@_folds(ev.ShardPlaced)
def _placed(state: RunState, _: int, e: ev.ShardPlaced, __: Mapping[str, bytes]) -> None:
    state.placements.append(e)


@_folds(ev.PodFailed)
def _pod_failed(state: RunState, position: int, e: ev.PodFailed, _: Mapping[str, bytes]) -> None:
    state.pod_failures.append((position, e))


@_folds(ev.EnvironmentPrepared)
def _environment(
    state: RunState, _: int, e: ev.EnvironmentPrepared, __: Mapping[str, bytes]
) -> None:
    state.environments[(e.revision, e.where)] = e


@_folds(ev.DistributionsBuilt)
def _distributions(
    state: RunState, position: int, e: ev.DistributionsBuilt, _: Mapping[str, bytes]
) -> None:
    state.distributions[e.revision] = (position, e)


@_folds(ev.UpgradeChecked)
def _upgrade(state: RunState, position: int, e: ev.UpgradeChecked, _: Mapping[str, bytes]) -> None:
    state.upgrade = (position, e)


# A question's life (`domain/lifecycles.QUESTION_STEPS`): asked or assumed, then answered,
# expired, taken or parked.


@_folds(*QUESTION_STEPS)
def _question_step(state: RunState, position: int, e: Any, _: Mapping[str, bytes]) -> None:
    step = QUESTION_STEPS[type(e)]
    known = state.questions.get(e.question_id)
    if not step.moves(known.state if known is not None else None):
        return
    if step.new:
        recommended = e.choice if isinstance(e, ev.AssumptionMade) else e.recommended
        deadline = e.deadline if isinstance(e, ev.QuestionAsked) else None
        q = QuestionView(
            e.question_id, e.topic, e.text, tuple(e.options), recommended, e.impact,
            deadline, tuple(e.subject), e.at, position, history=[(position, e.kind)],
        )  # fmt: skip
        state.questions[e.question_id] = q
    else:
        assert known is not None  # `moves` holds only for a known question
        q = known
        q.history.append((position, e.kind))
    if step.to in LISTED:
        q.state = step.to
        return
    by = {ASSUMED: "policy", TAKEN: "recommendation"}.get(step.to, getattr(e, "by", None))
    _question_decided(q, position, e.at, e.choice, step.to, by=by)
    if isinstance(e, ev.QuestionAnswered):
        q.late = e.late


@_folds(ev.CheckRecorded)
def _check(state: RunState, position: int, e: ev.CheckRecorded, _: Mapping[str, bytes]) -> None:
    state.checks[e.name] = (position, e)


@_folds(ev.ApprovalIssued)
def _approval(state: RunState, position: int, e: ev.ApprovalIssued, _: Mapping[str, bytes]) -> None:
    state.approvals.append((position, e))


# The run's life after its start (`domain/lifecycles.RUN_STEPS`): interrupted and resumed,
# completed.


@_folds(ev.RunInterrupted, ev.RunResumed, ev.RunCompleted)
def _run_step(state: RunState, position: int, e: ev.Event, _: Mapping[str, bytes]) -> None:
    to = RUN_STEPS[type(e)]
    if to == COMPLETED:
        state.completed = True
        state.completed_position = position
    else:
        state.interrupted = to == INTERRUPTED


def matrix_labels(started: ev.RunStarted | None) -> tuple[str, ...]:
    """The interpreters a run was started on (`3.11`, `3.12`, ...), in order; empty for a run
    on the gate's own interpreter."""
    if started is None:
        return ()
    recorded = started.options.get("interpreters") or ()
    return tuple(
        str(item["label"]) for item in recorded if isinstance(item, dict) and item.get("label")
    )


def lane(state: RunState, interpreter: str) -> RunState:
    """One interpreter's state of a matrix run (the run's own state otherwise)."""
    return state.matrix.get(interpreter, state) if interpreter else state


def fold(
    events: Iterable[tuple[int, ev.Event]] | Sequence[ev.Event],
    artifacts: Mapping[str, bytes],
    memo: AssessmentMemo | None = None,
) -> RunState:
    """The run's state from its events, in ledger order (positions from 1 when not given).
    With a `memo`, assessments it knows are taken from it and those made are added to it.

    A matrix run is folded once per interpreter: each state holds the run's shared facts
    (discovery, questions, lifecycle) and that interpreter's own (`OnInterpreter` events),
    so every rule, retry and bisection decides per interpreter exactly as for one. The first
    interpreter's state is returned, carrying all of them in `matrix`."""
    items = [
        item if isinstance(item, tuple) else (index, item)
        for index, item in enumerate(events, start=1)
    ]
    started = next((e for _, e in items if isinstance(e, ev.RunStarted)), None)
    labels = matrix_labels(started)
    if len(labels) <= 1:
        state = _fold_items(items, artifacts, memo)
        state.interpreter = labels[0] if labels else ""
        return state
    lanes: dict[str, RunState] = {}
    for label in labels:
        own = [item for item in items if getattr(item[1], "interpreter", "") in ("", label)]
        state = _fold_items(own, artifacts, memo)
        state.interpreter = label
        # The stream's own length and last time: appends are checked against the whole run.
        state.length = max((p for p, _ in items), default=0)
        state.last_at = items[-1][1].at if items else None
        lanes[label] = state
    first = lanes[labels[0]]
    first.matrix = lanes
    return first


def _fold_items(
    items: Iterable[tuple[int, ev.Event]],
    artifacts: Mapping[str, bytes],
    memo: AssessmentMemo | None,
) -> RunState:
    state = RunState(memo=memo)
    for position, event in items:
        apply(state, position, event, artifacts)
    return state

