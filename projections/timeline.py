"""The timeline of a run for a postmortem: one readable line per event, in ledger order.

Pure: the lines are derived from the events (and the stored reports they reference) only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from release_ledger.domain import events as ev
from release_ledger.domain.attribution import moves_text
from release_ledger.domain.failures import failure_kind
from release_ledger.domain.junit import Report, read_report, test_id
from release_ledger.domain.run_state import fold
from release_ledger.domain.verdict import classify
from release_ledger.projections.environment_skips import environment_skips, summary

Describer = Callable[[Any, Mapping[str, bytes]], str]


@dataclass(frozen=True)
class TimelineLine:
    position: int
    at: str
    kind: str
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"position": self.position, "at": self.at, "kind": self.kind, "text": self.text}


def _short(sha: str) -> str:
    return sha[:12]


def _files(files: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(files[:limit])
    return shown + (f" (+{len(files) - limit} more)" if len(files) > limit else "")


def _exit(
    code: int | None,
    signal: int | None,
    timed_out: bool = False,
    oom: bool = False,
    killed: tuple[str | None, float | None] = (None, None),
) -> str:
    test, limit = killed
    if test:
        return f"ended at its file's time limit ({limit:g} s) in {test}"
    if timed_out:
        return "timed out"
    if oom:
        return "killed: over its memory limit"
    if signal is not None:
        return f"killed by signal {signal}"
    return f"exit {code}" if code is not None else "no exit code"


def _run_started(e: ev.RunStarted, _: Mapping[str, bytes]) -> str:
    text = (
        f"gate started: head {e.head_ref} ({_short(e.head)}) against base {e.base_ref} "
        f"({_short(e.base)}), rule {e.rule}, executor {e.executor}"
    )
    ignored = e.options.get("head_settings_ignored")
    if isinstance(ignored, dict) and ignored:
        text += f"; head's own policy not applied (read at base): {', '.join(sorted(ignored))}"
    return text


def _discovered(e: ev.TestFilesDiscovered, _: Mapping[str, bytes]) -> str:
    text = f"discovered {len(e.files)} test files at head"
    if e.collected_by:
        text += f" ({e.collected_by})"
    if e.missing_at_base:
        text += f"; new at head (absent at base): {_files(e.missing_at_base)}"
    if e.removed_at_head:
        text += f"; removed at head: {_files(e.removed_at_head)}"
    if e.renamed_at_head:
        moved = [f"{old} -> {new}" for old, new in sorted(e.renamed_at_head.items())]
        text += f"; renamed at head: {_files(moved)}"
    return text


def _environment(e: ev.EnvironmentPrepared, _: Mapping[str, bytes]) -> str:
    """Which environment a revision ran in (or why it could not be made)."""
    where = f"{e.revision} environment" + ("" if e.where == "local" else f" on {e.where}")
    if e.status != "ready":
        failed = f"{where}: setup failed ({e.error or 'see the install log'}); unmeasured"
        return "\n".join([failed, *_sources_tried(e)])
    if e.how in ("none", "gate-interpreter"):
        why = "--env none" if e.how == "none" else "not an installable project"
        return f"{where}: the given interpreter {e.python} ({why})"
    made = "reused" if e.reused else f"built with {e.how} in {e.seconds:.1f}s"
    what = (e.project or "project") + (f"[{e.extra}]" if e.extra else "")
    text = (
        f"{where}: {made}, {what}, {e.packages} packages, "
        f"Python {e.python_version}, key {e.key[:12]}"
    ) + (f", resolved as of {e.exclude_newer}" if e.exclude_newer else "")
    lock = [f"  lock: {e.lock_note}"] if e.lock_note else []
    lines = ["; warning: ".join([text, *e.warnings]), *_sources_tried(e), *lock, *_runs(e)]
    return "\n".join(lines)


def _runs(e: ev.EnvironmentPrepared) -> list[str]:
    """The invocation the revision's tests run with, where one was recorded."""
    return [f"  runs {e.invocation.describe()}"] if e.invocation is not None else []


def _sources_tried(e: ev.EnvironmentPrepared) -> list[str]:
    """One line per declared source tried, in precedence order: which was used and why the
    ones before it were not."""
    lines = []
    for source in e.tried:
        said = f"  {source.source} ({source.detail})"
        if source.outcome == "used":
            lines.append(f"{said}: used")
        else:
            log = f"; log {source.log_tail_hash[:12]}" if source.log_tail_hash else ""
            lines.append(f"{said}: did not install: {source.error}{log}")
    return lines


def _measured(e: ev.FileMeasured, _: Mapping[str, bytes]) -> str:
    where = f" in {e.shard} #{e.attempt}" if e.source == "shard" else ""
    text = f"measured {e.file}{where}: {e.rss_mb:.0f} MB peak, {e.seconds:.2f} s"
    if e.retained_mb is not None and e.transient_mb is not None:
        text += f" (keeps {e.retained_mb:.0f} MB, +{e.transient_mb:.0f} MB transient)"
    return text


def _measure_failed(e: ev.MeasurementFailed, _: Mapping[str, bytes]) -> str:
    return f"measuring {e.file} failed ({e.reason}, {_exit(e.exit_code, e.signal)}): culprit"


def _reused(e: ev.MeasurementReused, _: Mapping[str, bytes]) -> str:
    return (
        f"reused measurement of {e.file} from run {e.from_run[:8]}: "
        f"{e.rss_mb:.0f} MB, {e.seconds:.2f} s"
    )


def _planned(e: ev.ShardsPlanned, _: Mapping[str, bytes]) -> str:
    parts = [
        f"{s.id}[{len(s.files)} files, {s.rss_mb:.0f} MB, {s.seconds:.1f} s]" for s in e.shards
    ]
    shards = "1 shard" if len(e.shards) == 1 else f"{len(e.shards)} shards"
    return f"planned {shards} under {e.budget_mb:.0f} MB: " + " ".join(parts)


def _pool(e: ev.PoolMeasured, _: Mapping[str, bytes]) -> str:
    parts = []
    for m in e.members:
        if m.ready:
            free = sum(m.free_mb_per_node.values())
            parts.append(
                f"{m.member} ready ({m.running} running, {m.pending} pending of {m.capacity}, "
                f"{free:.0f} MB free on {len(m.free_mb_per_node)} nodes)"
            )
        else:
            parts.append(f"{m.member} not usable: {m.reason}")
    return f"round {e.round}: pool measured: " + "; ".join(parts)


def _placed(e: ev.ShardPlaced, _: Mapping[str, bytes]) -> str:
    where = f"{e.member}" + (f"/{e.node}" if e.node else "")
    return f"round {e.round}: {e.shard} placed on {where} ({e.reservation_mb} MB reserved)"


def _attempt(e: ev.ShardAttemptRecorded, artifacts: Mapping[str, bytes]) -> str:
    where = "" if e.member == "local" else f" on {e.member}"
    text = (
        f"{e.shard} attempt {e.attempt} at {e.revision}{where}: "
        f"{_exit(e.exit_code, e.signal, e.timed_out, e.oom, (e.killed_test, e.time_limit_s))}, "
        f"{e.seconds:.1f} s, {e.rss_mb:.0f} MB"
    )
    if e.worker:  # a resident worker's: shards of one worker shared its process
        text += f", worker {e.worker}"
    if e.infrastructure_failure:
        kind = failure_kind(e.failure_kind, e.infrastructure_failure)
        text += f", {kind or 'infrastructure'} failure {e.infrastructure_failure}"
    if e.modified_files:
        text += f", its tests changed tracked files: {_files(e.modified_files)}"
    return text + _report_summary(e.report_hash, e.files, artifacts) + _doubted(e)


def _doubted(e: ev.ShardAttemptRecorded | ev.IsolationRecorded) -> str:
    """A time-limit line the supervisor's figures did not bear out, said as not believed."""
    doubt = e.time_limit_not_believed
    return f"; not believed: {doubt}" if doubt else ""


def _report_summary(
    report_hash: str | None, files: Sequence[str], artifacts: Mapping[str, bytes]
) -> str:
    if not report_hash:
        return ", no report"
    data = artifacts.get(report_hash)
    if data is None:
        return ", report missing from the ledger"
    result = read_report(data, expected_files=list(files) or None)
    if not isinstance(result, Report):
        if result.code == "no-tests":
            return ", no test collected"
        return f", report rejected: {result}"
    failing = [test_id(c) for c in result.cases if c.outcome in ("failed", "error")]
    text = (
        f", {result.tests} tests: {result.failures} failed, {result.errors} errors, "
        f"{result.skipped} skipped"
    )
    if failing:
        text += " — " + _files(failing, 5)
    return text


def _pod_failed(e: ev.PodFailed, _: Mapping[str, bytes]) -> str:
    detail = f": {e.detail}" if e.detail else ""
    return (
        f"pod of {e.shard} attempt {e.attempt} ({e.revision}) failed on {e.member}: "
        f"{e.reason}{detail}"
    )


def _split(e: ev.ShardSplit, _: Mapping[str, bytes]) -> str:
    kids = " ".join(f"{c.id}[{_files(c.files, 2)}]" for c in e.children)
    return f"{e.parent} split ({e.reason}) into {kids}"


def _isolation(e: ev.IsolationRecorded, artifacts: Mapping[str, bytes]) -> str:
    return (
        f"{e.file} alone at {e.revision}: "
        f"{_exit(e.exit_code, e.signal, e.timed_out, killed=(e.killed_test, e.time_limit_s))}"
        + _report_summary(e.report_hash, [e.file], artifacts)
        + _doubted(e)
    )


def _in_order(e: ev.InOrderRecorded, artifacts: Mapping[str, bytes]) -> str:
    return (
        f"{len(e.files)} files in the project's order at {e.revision}, judging "
        f"{_files(e.confirms, 3)}: {_exit(e.exit_code, e.signal, e.timed_out, e.oom)}"
        + _report_summary(e.report_hash, e.files, artifacts)
    )


def _source_rejected(e: ev.SourceRejected, _: Mapping[str, bytes]) -> str:
    said = f": {e.error}" if e.error else ""
    return (
        f"{e.revision} environment from {e.source} ({e.detail or e.source}) rejected: no test "
        f"ran in it in {len(e.stopped_shards)} shards ({e.reason}{said}); the next source is tried"
        + (
            f" (with the {len(e.reused_dropped)} base files the result cache gave)"
            if e.reused_dropped else ""
        )
    )  # fmt: skip


def _attribution(e: ev.AttributionRecorded, artifacts: Mapping[str, bytes]) -> str:
    """`ledger show`'s line for an attribution: what moved, and each rerun failure's cause."""
    moved = moves_text(e.moved)
    head = f"{len(e.tests)} introduced failure(s) run again with base's package set"
    if moved:
        head += f" ({len(moved)} moved: {_files(moved, 3)})"
    if e.environment_error:
        return f"{head}: could not install it ({e.environment_error})"
    data = artifacts.get(e.report_hash or "")
    report = read_report(data, expected_files=e.files) if data is not None else None
    if not isinstance(report, Report):
        return f"{head}: {_exit(e.exit_code, e.signal, e.timed_out)}, no readable report"
    outcomes = {test_id(c): c.outcome for c in report.cases}
    said = {"failed": "fails (code)", "error": "fails (code)", "passed": "passes (dependencies)"}
    parts = [f"{t} {said.get(outcomes.get(t, ''), 'not measured (unknown)')}" for t in e.tests]
    return f"{head}: " + "; ".join(parts)


def _looked_up(e: ev.ExonerationsLookedUp, _: Mapping[str, bytes]) -> str:
    return f"{len(e.tests)} introduced failure(s) looked up in the history and quarantine"


def _exonerated(e: ev.FailureExonerated, _: Mapping[str, bytes]) -> str:
    """`ledger show`'s line for an exoneration: the test, why, and the events that prove it."""
    return f"{e.test} exonerated ({e.reason}): {proof_text(e.proof)}"


def proof_text(proof: Sequence[ev.Proof]) -> str:
    """`run 1a2b3c4d position 12 (base: failed)`, each proving event, the first few."""
    parts = []
    for p in proof[:4]:
        seen = f" ({p.revision}: {p.outcome})" if p.outcome else ""
        parts.append(f"run {p.run_id[:8]} position {p.position}{seen}")
    more = f" and {len(proof) - 4} more" if len(proof) > 4 else ""
    return ", ".join(parts) + more


def _baseline(e: ev.BaselineReused, _: Mapping[str, bytes]) -> str:
    if not e.per_file:
        return f"{e.shard}: base result reused from run {e.from_run[:8]} at {_short(e.base)}"
    where = f"{e.from_revision or 'an'} attempt {e.from_attempt} of {e.from_shard}"
    return (
        f"{e.shard}: base results of {len(e.files)} file(s) at {_short(e.base)} reused from "
        f"run {e.from_run[:8]} ({where}, position {e.from_position})"
    )


def _asked(e: ev.QuestionAsked, _: Mapping[str, bytes]) -> str:
    options = ", ".join(f"{o}{' (recommended)' if o == e.recommended else ''}" for o in e.options)
    return (
        f"asked [{e.impact}] {e.question_id}: {e.text} — options {options}; "
        f"deadline {e.deadline.isoformat()}"
    )


def _answered(e: ev.QuestionAnswered, _: Mapping[str, bytes]) -> str:
    late = " (late)" if e.late else ""
    return f"{e.question_id} answered {e.choice!r} by {e.by}{late}"


def _assumed(e: ev.AssumptionMade, _: Mapping[str, bytes]) -> str:
    return f"assumed {e.choice!r} for {e.question_id} without asking ({e.reason}): {e.text}"


def _expired(e: ev.QuestionExpired, _: Mapping[str, bytes]) -> str:
    return f"{e.question_id} expired unanswered (deadline {e.deadline.isoformat()})"


def _taken(e: ev.RecommendationTaken, _: Mapping[str, bytes]) -> str:
    return f"{e.question_id}: nobody answered in time; recommendation {e.choice!r} taken"


def _parked(e: ev.QuestionParked, _: Mapping[str, bytes]) -> str:
    return f"{e.question_id} is critical and unanswered: run parked until the owner answers"


def _check(e: ev.CheckRecorded, _: Mapping[str, bytes]) -> str:
    value = f" ({e.value})" if e.value else ""
    by = f" by {e.by}" if e.by else ""
    return f"check {e.name}: {e.verdict}{value}{by}"


def _release(e: ev.ReleaseInspected, _: Mapping[str, bytes]) -> str:
    version = f"version {e.version} ({e.version_source})" if e.version else "version unknown"
    if not e.version and e.version_dynamic:
        version = f"version from the build ({e.version_dynamic})"
    changelogs = ", ".join(f.path for f in e.changelog_files) or "no changelog file"
    text = f"release inspected at head: {version}, tag {e.tag or '-'}, {changelogs}"
    if e.fragments:
        text += f", {len(e.fragments)} towncrier fragments"
    if e.required_checks:
        text += f", required checks: {', '.join(e.required_checks)}"
    for problem in e.problems:
        text += f"; {problem}"
    return text


def _distributions(e: ev.DistributionsBuilt, _: Mapping[str, bytes]) -> str:
    at = f"{e.revision} distributions"
    if e.status == "not-packaged":
        return f"{at}: not a packaged Python project ({e.error})"
    if e.status == "error":
        return f"{at}: the gate could not build them: {e.error}"
    if e.status == "failed":
        log = f"; log tail {e.log_tail_hash[:12]}" if e.log_tail_hash else ""
        return f"{at}: build failed with {e.how or 'the PEP 517 backend'}: {e.error}{log}"
    made = f"built with {e.how} in {e.seconds:.1f}s"
    if e.reused:
        made = f"reused from the build cache ({e.how})" if e.how else "reused from the build cache"
    files = ", ".join(
        f"{f.filename} ({f.sha256[:12]}" + (f", README {f.readme}" if f.readme else "") + ")"
        for f in e.files
    )
    text = f"{at}: {made}, Python {e.python_version}: {files}"
    if e.readme_error:
        text += f"; README not checked: {e.readme_error}"
    return text


def _upgrade(e: ev.UpgradeChecked, _: Mapping[str, bytes]) -> str:
    if e.skipped:
        return f"upgrade not tried: {e.skipped}"
    steps = ", ".join(
        f"{s.step}: " + ("ok" if s.exit_code == 0 else s.error or "failed") for s in e.steps
    )
    text = (
        f"upgrade {e.project} {e.version_before or '?'} -> {e.version_after or '?'} "
        f"({e.base_wheel} then {e.head_wheel}, {e.how}" + (", reused" if e.reused else "") + ")"
    )
    text += f": {steps}" if steps else ""
    if e.imports:
        text += "; imports " + ", ".join(f"{m} {r}" for m, r in sorted(e.imports.items()))
    return text


def _approval(e: ev.ApprovalIssued, _: Mapping[str, bytes]) -> str:
    required = f", required checks: {', '.join(e.required)}" if e.required else ""
    return (
        f"approval issued: {e.outcome} under rule {e.rule} v{e.rule_version} "
        f"(report sha256 {e.report_sha256[:12]}{required})"
    )


def _attestation(e: ev.AttestationIssued, _: Mapping[str, bytes]) -> str:
    signed = f"signed by key {e.key_id[:12]}" if e.key_id else "unsigned"
    return (
        f"attestation issued: {len(e.envelope_sha256)} statements, {signed}, "
        f"{e.verification_result} under rule {e.rule} (from position {e.position})"
    )


def _interrupted(e: ev.RunInterrupted, _: Mapping[str, bytes]) -> str:
    return f"run interrupted: {e.reason}"


def _resumed(e: ev.RunResumed, _: Mapping[str, bytes]) -> str:
    return "run resumed"


def _completed(e: ev.RunCompleted, _: Mapping[str, bytes]) -> str:
    return "run completed"


DESCRIBERS: dict[type[ev.Event], Describer] = {
    ev.RunStarted: _run_started,
    ev.TestFilesDiscovered: _discovered,
    ev.EnvironmentPrepared: _environment,
    ev.FileMeasured: _measured,
    ev.MeasurementFailed: _measure_failed,
    ev.MeasurementReused: _reused,
    ev.ShardsPlanned: _planned,
    ev.PoolMeasured: _pool,
    ev.ShardPlaced: _placed,
    ev.ShardAttemptRecorded: _attempt,
    ev.PodFailed: _pod_failed,
    ev.ShardSplit: _split,
    ev.IsolationRecorded: _isolation,
    ev.InOrderRecorded: _in_order,
    ev.SourceRejected: _source_rejected,
    ev.AttributionRecorded: _attribution,
    ev.ExonerationsLookedUp: _looked_up,
    ev.FailureExonerated: _exonerated,
    ev.BaselineReused: _baseline,
    ev.QuestionAsked: _asked,
    ev.QuestionAnswered: _answered,
    ev.AssumptionMade: _assumed,
    ev.QuestionExpired: _expired,
    ev.RecommendationTaken: _taken,
    ev.QuestionParked: _parked,
    ev.CheckRecorded: _check,
    ev.ReleaseInspected: _release,
    ev.DistributionsBuilt: _distributions,
    ev.UpgradeChecked: _upgrade,
    ev.ApprovalIssued: _approval,
    ev.AttestationIssued: _attestation,
    ev.RunInterrupted: _interrupted,
    ev.RunResumed: _resumed,
    ev.RunCompleted: _completed,
}


def describe(event: ev.Event, artifacts: Mapping[str, bytes]) -> str:
    """One line for one event; a matrix lane's fact names its interpreter first."""
    describer = DESCRIBERS.get(type(event))
    text = describer(event, artifacts) if describer else event.kind
    return _on_interpreter(event) + text


def _on_interpreter(event: ev.Event) -> str:
    label = getattr(event, "interpreter", "")
    return f"Python {label}: " if label else ""


def timeline(
    events: Sequence[tuple[int, ev.Event]], artifacts: Mapping[str, bytes]
) -> list[TimelineLine]:
    lines = []
    placed: dict[str, str] = {}  # shard -> member of its last placement
    for position, event in events:
        text = describe(event, artifacts)
        if isinstance(event, ev.ShardPlaced):
            before = placed.get(event.shard)
            if before is not None and before != event.member:
                text += f"; re-placed from {before}"
            placed[event.shard] = event.member
        if isinstance(event, ev.RunCompleted):
            text += _findings([r for r in events if r[0] <= position], artifacts)
        lines.append(TimelineLine(position, event.at.isoformat(), event.kind, text))
    return lines


# --- grouping long runs of one kind (ledger show without --all) ------------------------------

GROUP_AT = 6  # consecutive events of one kind from which `ledger show` prints one summary
NAMED = 8  # attempts that were not clean, named one by one in a group's summary


@dataclass(frozen=True)
class TimelineGroup:
    """Consecutive events of one kind, summarised in one line."""

    first: int
    last: int
    at: str
    kind: str
    count: int
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last, "at": self.at, "kind": self.kind,
                "count": self.count, "text": self.text}  # fmt: skip


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _mb(value: float) -> str:
    return f"{value:.0f} MB"


def _sized(label: str, events: Sequence[ev.FileMeasured | ev.MeasurementReused]) -> str:
    rss = [e.rss_mb for e in events]
    seconds = [e.seconds for e in events]
    slowest = max(events, key=lambda e: (e.seconds, e.file))
    largest = max(events, key=lambda e: (e.rss_mb, e.file))
    return (
        f"{label}: {_mb(_median(rss))} median peak, {_median(seconds):.1f} s median, "
        f"slowest {slowest.file} ({slowest.seconds:.1f} s), largest {largest.file} "
        f"({_mb(largest.rss_mb)})"
    )


def _group_measured(events: Sequence[Any], _: Mapping[str, bytes]) -> str:
    empty = sum(1 for e in events if e.exit_code == 5)
    in_place = all(e.source == "shard" for e in events)
    text = _sized(f"measured {len(events)} files" + (" in place" if in_place else ""), events)
    return text + (f"; {empty} hold no test" if empty else "")


def _group_reused(events: Sequence[Any], _: Mapping[str, bytes]) -> str:
    runs = sorted({e.from_run[:8] for e in events})
    return _sized(f"reused {len(events)} measurements from run {', '.join(runs)}", events)


def _group_failed(events: Sequence[Any], _: Mapping[str, bytes]) -> str:
    reasons: dict[str, int] = {}
    for e in events:
        reasons[e.reason] = reasons.get(e.reason, 0) + 1
    counted = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
    return f"measuring {len(events)} files failed ({counted}): {_files([e.file for e in events])}"


def _group_attempts(events: Sequence[Any], artifacts: Mapping[str, bytes]) -> str:
    revisions = {r: sum(1 for e in events if e.revision == r) for r in ("head", "base")}
    clean = [e for e in events if e.exit_code == 0 and e.signal is None
             and not (e.timed_out or e.oom or e.infrastructure_failure)]  # fmt: skip
    others = [e for e in events if e not in clean]
    slowest = max(events, key=lambda e: (e.seconds, e.shard))
    text = (
        f"{len(events)} shard attempts ({revisions['head']} at head, {revisions['base']} at "
        f"base): {len(clean)} exit 0; slowest {slowest.shard} at {slowest.revision} "
        f"({slowest.seconds:.1f} s), {_mb(_median([e.rss_mb for e in events]))} median peak"
    )
    for e in others[:NAMED]:
        text += f"; {e.shard} at {e.revision}: " + _exit(e.exit_code, e.signal, e.timed_out, e.oom)
        if e.infrastructure_failure:
            text += f" ({e.infrastructure_failure})"
        text += _report_summary(e.report_hash, e.files, artifacts)
    if len(others) > NAMED:
        text += f"; and {len(others) - NAMED} more not clean"
    return text


def _group_isolations(events: Sequence[Any], artifacts: Mapping[str, bytes]) -> str:
    heads = [e for e in events if e.revision == "head"]
    failing = [e for e in heads if e.exit_code != 0]
    text = (
        f"{len(events)} files run alone ({len(heads)} at head, {len(events) - len(heads)} at "
        f"base); {len(failing)} fail alone at head"
    )
    for e in failing[:NAMED]:
        text += f"; {e.file}" + _report_summary(e.report_hash, [e.file], artifacts)
    if len(failing) > NAMED:
        text += f"; and {len(failing) - NAMED} more"
    return text


def _group_placed(events: Sequence[Any], _: Mapping[str, bytes]) -> str:
    members: dict[str, int] = {}
    for e in events:
        members[e.member] = members.get(e.member, 0) + 1
    counted = ", ".join(f"{m} ×{n}" for m, n in sorted(members.items()))
    return f"placed {len(events)} shards: {counted}"


GROUPERS: dict[str, Callable[[Sequence[Any], Mapping[str, bytes]], str]] = {
    "FileMeasured": _group_measured,
    "MeasurementReused": _group_reused,
    "MeasurementFailed": _group_failed,
    "ShardAttemptRecorded": _group_attempts,
    "ShardPlaced": _group_placed,
    "IsolationRecorded": _group_isolations,
}


def grouped_timeline(
    events: Sequence[tuple[int, ev.Event]],
    artifacts: Mapping[str, bytes],
    *,
    at_least: int = GROUP_AT,
    lines: list[TimelineLine] | None = None,
) -> list[TimelineLine | TimelineGroup]:
    """The timeline with every run of `at_least` or more consecutive events of one groupable
    kind (measurements, attempts, placements) summarised in one line; the rest as is.
    `lines`: the timeline of `events`, when the caller made it already."""
    if lines is None:
        lines = timeline(events, artifacts)
    out: list[TimelineLine | TimelineGroup] = []
    index = 0
    while index < len(events):
        kind = events[index][1].kind
        lane = getattr(events[index][1], "interpreter", "")
        end = index
        while (
            end < len(events)
            and events[end][1].kind == kind
            and getattr(events[end][1], "interpreter", "") == lane
        ):
            end += 1
        if kind in GROUPERS and end - index >= at_least:
            chunk = [e for _, e in events[index:end]]
            out.append(
                TimelineGroup(
                    events[index][0],
                    events[end - 1][0],
                    chunk[0].at.isoformat(),
                    kind,
                    len(chunk),
                    _on_interpreter(chunk[0]) + GROUPERS[kind](chunk, artifacts),
                )
            )
        else:
            out.extend(lines[index:end])
        index = end
    return out


def _findings(events: Sequence[tuple[int, ev.Event]], artifacts: Mapping[str, bytes]) -> str:
    """What every rule agrees on at completion and a postmortem must not miss: lost coverage,
    a head where no test was measured, and tests a missing module kept out at both revisions."""
    state = fold(events, artifacts)
    text = ""
    for label, lane in (state.matrix or {"": state}).items():
        basis = classify(lane)
        on = f" on Python {label}" if label else ""
        lost = basis.skipped_at_head
        if lost:
            text += (
                f"; {len(lost)} tests skipped-at-head{on} (passed at base, skipped or gone at "
                "head): " + _files(lost, 5)
            )
        if not basis.head and not basis.unmeasured:
            text += f"; no test was measured at head{on} (no-tests)"
    skips = environment_skips(state)
    if skips:
        text += "; " + summary(skips)
    return text
