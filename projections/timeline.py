"""The timeline of a run for a postmortem: one readable line per event, in ledger order.

Pure: the lines are derived from the events (and the stored reports they reference) only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain import events as ev
from domain.junit import Report, read_report, test_id
from domain.run_state import fold
from domain.verdict import classify

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


def _exit(code: int | None, signal: int | None, timed_out: bool = False, oom: bool = False) -> str:
    if timed_out:
        return "timed out"
    if oom:
        return "killed: over its memory limit"
    if signal is not None:
        return f"killed by signal {signal}"
    return f"exit {code}" if code is not None else "no exit code"


def _run_started(e: ev.RunStarted, _: Mapping[str, bytes]) -> str:
    return (
        f"gate started: head {e.head_ref} ({_short(e.head)}) against base {e.base_ref} "
        f"({_short(e.base)}), rule {e.rule}, executor {e.executor}"
    )


def _discovered(e: ev.TestFilesDiscovered, _: Mapping[str, bytes]) -> str:
    text = f"discovered {len(e.files)} test files at head"
    if e.missing_at_base:
        text += f"; new at head (absent at base): {_files(e.missing_at_base)}"
    return text


def _measured(e: ev.FileMeasured, _: Mapping[str, bytes]) -> str:
    return f"measured {e.file}: {e.rss_mb:.0f} MB peak, {e.seconds:.2f} s"


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
    return f"planned {len(e.shards)} shards under {e.budget_mb:.0f} MB: " + " ".join(parts)


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
        f"{_exit(e.exit_code, e.signal, e.timed_out, e.oom)}, {e.seconds:.1f} s, {e.rss_mb:.0f} MB"
    )
    if e.infrastructure_failure:
        text += f", infrastructure failure {e.infrastructure_failure}"
    return text + _report_summary(e.report_hash, e.files, artifacts)


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
        f"{e.file} alone at {e.revision}: {_exit(e.exit_code, e.signal, e.timed_out)}"
        + _report_summary(e.report_hash, [e.file], artifacts)
    )


def _baseline(e: ev.BaselineReused, _: Mapping[str, bytes]) -> str:
    return f"{e.shard}: base result reused from run {e.from_run[:8]} at {_short(e.base)}"


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


def _approval(e: ev.ApprovalIssued, _: Mapping[str, bytes]) -> str:
    required = f", required checks: {', '.join(e.required)}" if e.required else ""
    return (
        f"approval issued: {e.outcome} under rule {e.rule} v{e.rule_version} "
        f"(report sha256 {e.report_sha256[:12]}{required})"
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
    ev.BaselineReused: _baseline,
    ev.QuestionAsked: _asked,
    ev.QuestionAnswered: _answered,
    ev.AssumptionMade: _assumed,
    ev.QuestionExpired: _expired,
    ev.RecommendationTaken: _taken,
    ev.QuestionParked: _parked,
    ev.CheckRecorded: _check,
    ev.ApprovalIssued: _approval,
    ev.RunInterrupted: _interrupted,
    ev.RunResumed: _resumed,
    ev.RunCompleted: _completed,
}


def describe(event: ev.Event, artifacts: Mapping[str, bytes]) -> str:
    describer = DESCRIBERS.get(type(event))
    return describer(event, artifacts) if describer else event.kind


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


def _findings(events: Sequence[tuple[int, ev.Event]], artifacts: Mapping[str, bytes]) -> str:
    """What every rule agrees on at completion and a postmortem must not miss: lost coverage
    and a head where no test was measured."""
    basis = classify(fold(events, artifacts))
    text = ""
    lost = basis.skipped_at_head
    if lost:
        text += (
            f"; {len(lost)} tests skipped-at-head (passed at base, skipped or gone at head): "
            + _files(lost, 5)
        )
    if not basis.head and not basis.unmeasured:
        text += "; no test was measured at head (no-tests)"
    return text
