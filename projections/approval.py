"""The approval report: one table of metrics, each with the events that decided it.

Pure: the report is derived from a prefix of the run's events (and the artifacts they
reference), a rule, the required check names and the repository's rollback template, so the
same inputs always give the same bytes — which is what `ledger audit` checks by sha256.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain import events as ev
from domain.run_state import RunState, fold
from domain.verdict import Verdict

GATE = "gate"
RUNTIME_PIN = "runtime-pin"
RESERVED = (GATE, RUNTIME_PIN)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
GATE_VERDICTS = {"passed": "pass", "failed": "fail"}  # unmeasured, awaiting, parked: unmeasured
OUTCOME_EXIT = {"ok": 0, "failed": 1, "unmeasured": 3}

DEFAULT_ROLLBACK = (
    "Keep or redeploy the previous release `{base_ref}` (commit `{base}`) instead of the "
    "candidate `{head_ref}` (commit `{head}`). The candidate's evidence stays in run `{run_id}`: "
    "`ledger show {run_id}` tells its story."
)


@dataclass(frozen=True)
class Deciding:
    """An event that decided a metric: its ledger position, kind, time and what it says."""

    position: int
    kind: str
    at: str
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"position": self.position, "kind": self.kind, "at": self.at, "note": self.note}


@dataclass(frozen=True)
class Metric:
    name: str
    value: str
    verdict: str  # pass, fail, unmeasured
    events: tuple[Deciding, ...] = ()
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "verdict": self.verdict,
            "why": self.why,
            "events": [d.as_dict() for d in self.events],
        }


@dataclass(frozen=True)
class ApprovalReport:
    run_id: str
    rule: str
    rule_version: int
    outcome: str  # ok, failed, unmeasured
    metrics: tuple[Metric, ...]
    required: tuple[str, ...]
    through: int  # the last ledger position the report reads
    waivers: tuple[str, ...]
    without_owner: tuple[str, ...]
    open_questions: tuple[str, ...]
    rollback: str
    markdown: str = field(repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.markdown.encode("utf-8")).hexdigest()

    @property
    def exit_code(self) -> int:
        return OUTCOME_EXIT[self.outcome]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "outcome": self.outcome,
            "rule": self.rule,
            "rule_version": self.rule_version,
            "required": list(self.required),
            "through_position": self.through,
            "metrics": [m.as_dict() for m in self.metrics],
            "waivers": list(self.waivers),
            "decided_without_owner": list(self.without_owner),
            "open_questions": list(self.open_questions),
            "rollback": self.rollback,
            "report_sha256": self.sha256,
            "markdown": self.markdown,
        }


def outcome_of(verdicts: Iterable[str]) -> str:
    """`ok` only when every metric passes; any failure fails; else unmeasured."""
    seen = list(verdicts)
    if "fail" in seen:
        return "failed"
    if any(v != "pass" for v in seen):
        return "unmeasured"
    return "ok"


# --- the runtime pin ----------------------------------------------------------------------------

_CLAUSE = re.compile(r"^\s*(~=|===|==|!=|<=|>=|<|>)?\s*([0-9][0-9A-Za-z.*+!-]*)\s*$")


def _release(text: str) -> tuple[int, ...] | None:
    parts = []
    for piece in text.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            return None
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break  # 3.12.0rc1: compare the release numbers only
    return tuple(parts)


def _pad(v: tuple[int, ...], n: int) -> tuple[int, ...]:
    return v + (0,) * (n - len(v))


def _clause_holds(version: tuple[int, ...], op: str, spec: str) -> bool | None:
    if spec.endswith(".*"):
        prefix = _release(spec[:-2])
        if prefix is None or op not in ("==", "!="):
            return None
        same = version[: len(prefix)] == prefix
        return same if op == "==" else not same
    target = _release(spec)
    if target is None:
        return None
    n = max(len(version), len(target))
    v, t = _pad(version, n), _pad(target, n)
    if op == "~=":
        return None if len(target) < 2 else v >= t and version[: len(target) - 1] == target[:-1]
    compare: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
        "==": lambda a, b: a == b,
        "===": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        ">=": lambda a, b: a >= b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        "<": lambda a, b: a < b,
    }
    return compare[op](v, t) if op in compare else None


def pin_satisfied(python_version: str, pin: str) -> bool | None:
    """Does the Python the gate ran under satisfy the pin? None when it cannot be read.

    `.python-version` style pins (`3.11`, `3.11.4`, `cpython-3.11`) match by prefix;
    `requires-python` style specifiers (`>=3.10,<3.13`, `~=3.11`, `==3.11.*`) are compared
    on release numbers.
    """
    version = _release(python_version)
    if version is None or not pin.strip():
        return None
    text = pin.strip()
    if not any(c in text for c in "<>=!~,"):
        bare = re.sub(r"^[A-Za-z]+-?", "", text)  # cpython-3.11, python3.11
        target = _release(bare)
        if target is None:
            return None
        return version[: len(target)] == target
    results = []
    for clause in text.split(","):
        if not clause.strip():
            continue
        match = _CLAUSE.match(clause)
        if match is None:
            return None
        held = _clause_holds(version, match.group(1) or "==", match.group(2))
        if held is None:
            return None
        results.append(held)
    return all(results) if results else None


# --- metrics ------------------------------------------------------------------------------------


def _deciding(position: int, e: ev.Event, note: str = "") -> Deciding:
    return Deciding(position, e.kind, e.at.isoformat(), note)


class _Events:
    """Position lookups over the report's events."""

    def __init__(self, events: Sequence[tuple[int, ev.Event]]) -> None:
        self.by_position = dict(events)
        self.measure_failed: dict[str, int] = {}
        for position, e in events:
            if isinstance(e, ev.MeasurementFailed):
                self.measure_failed[e.file] = position

    def at(self, position: int | None, note: str = "") -> list[Deciding]:
        if position is None or position not in self.by_position:
            return []
        return [_deciding(position, self.by_position[position], note)]


def _gate_metric(state: RunState, verdict: Verdict, index: _Events) -> Metric:
    assert state.started is not None
    decided: list[Deciding] = []
    first = min(index.by_position) if index.by_position else 1
    decided += index.at(first, f"rule {verdict.rule} v{verdict.rule_version}")
    introduced_files = {t.split("::", 1)[0] for t in verdict.introduced}
    unmeasured_shards = {(u.shard, u.revision) for u in verdict.unmeasured}
    for u in verdict.unmeasured:
        if u.shard == "measure":
            for file in u.files:
                decided += index.at(index.measure_failed.get(file), f"{file}: {u.reason}")
    waived = {f: w for w in verdict.waivers for f in w["files"]}
    for file in sorted(waived):
        decided += index.at(index.measure_failed.get(file), f"{file}: waived")
    for shard in sorted(state.leaves(), key=lambda s: s.id):
        for revision in ("head", "base"):
            latest = shard.latest(revision)
            if latest is None:
                continue
            if (shard.id, revision) in unmeasured_shards:
                decided += index.at(latest.position, f"{shard.id} at {revision}: unmeasured")
            elif not latest.assessment.measured and set(shard.files) <= set(waived):
                decided += index.at(latest.position, f"{shard.id} at {revision}: waived")
            elif verdict.status == "passed" or (
                revision == "head" and introduced_files & set(shard.files)
            ):
                decided += index.at(latest.position, f"{shard.id} at {revision}")
    for (file, revision), iso in sorted(state.isolations.items()):
        if file in introduced_files or any(t.startswith(f"{file}::") for t in verdict.flaky):
            decided += index.at(iso.position, f"{file} alone at {revision}")
    for q in sorted(state.questions.values(), key=lambda q: q.position):
        for position, _kind in q.history:
            decided += index.at(position, q.id)
    decided += index.at(state.completed_position)
    value = verdict.status
    measured = "every shard measured at head and base" + (
        " but the waived files" if verdict.waivers else ""
    )
    why = "; ".join(verdict.reasons) or f"{measured}, nothing introduced"
    lost = verdict.skipped_at_head
    if lost:
        shown = ", ".join(lost[:5]) + (f" (+{len(lost) - 5} more)" if len(lost) > 5 else "")
        why += f"; skipped-at-head (passed at base, skipped or gone at head): {shown}"
    for w in verdict.waivers:
        why += f"; {', '.join(w['files'])} waived by {w['by']} ({w['question']})"
    unique = {d.position: d for d in decided}
    return Metric(
        GATE,
        value,
        GATE_VERDICTS.get(verdict.status, "unmeasured"),
        tuple(unique[p] for p in sorted(unique)),
        why,
    )


def _check_metrics(
    state: RunState, index: _Events, events: Sequence[tuple[int, ev.Event]], required: Sequence[str]
) -> list[Metric]:
    metrics = []
    for name in sorted(state.checks):
        position, check = state.checks[name]
        earlier = [
            p
            for p, e in events
            if isinstance(e, ev.CheckRecorded) and e.name == name and p != position
        ]
        note = f"by {check.by}" if check.by else ""
        why = f"recorded {check.verdict}" + (f" by {check.by}" if check.by else "")
        if earlier:
            why += "; supersedes the check at position " + ", ".join(str(p) for p in earlier)
        metrics.append(
            Metric(
                name,
                check.value or check.verdict,
                check.verdict,
                tuple(index.at(position, note)),
                why,
            )
        )
    for name in sorted(set(required) - set(state.checks)):
        metrics.append(
            Metric(
                name,
                "missing",
                "unmeasured",
                (),
                "required, but no check of this name was recorded",
            )
        )
    return metrics


def _pin_metric(state: RunState, index: _Events) -> Metric:
    started = state.started
    assert started is not None
    first = min(index.by_position) if index.by_position else 1
    ran = started.python_version or "unknown"
    if not started.runtime_pin:
        why = "the repository pins no Python (.python-version or requires-python) at head"
        return Metric(
            RUNTIME_PIN, f"python {ran}, no pin", "unmeasured", tuple(index.at(first)), why
        )
    held = pin_satisfied(started.python_version, started.runtime_pin)
    value = f"python {ran} against {started.runtime_pin}"
    if held is None:
        verdict, why = "unmeasured", "the version or the pin could not be read"
    elif held:
        verdict, why = "pass", "the gate ran under the pinned Python"
    else:
        verdict, why = "fail", "the gate ran under another Python than the repository pins"
    return Metric(RUNTIME_PIN, value, verdict, tuple(index.at(first, value)), why)


# --- questions, waivers, rollback -----------------------------------------------------------------


def _story(state: RunState) -> tuple[list[str], list[str], list[str]]:
    waivers, without, still_open = [], [], []
    for q in sorted(state.questions.values(), key=lambda q: q.position):
        at = q.decided_at.isoformat() if q.decided_at else ""
        if q.choice == "waive-culprits" and q.topic == "unmeasured":
            late = " late" if q.late else ""
            waivers.append(
                f"{', '.join(f'`{f}`' for f in q.subject)} waived by {q.by} "
                f"({q.id}, answered{late} at {at}, position {q.decided_position})"
            )
        if q.state == "taken":
            without.append(
                f"{q.id}: deadline passed unanswered, recommendation `{q.choice}` taken "
                f"at {at} (position {q.decided_position}) — {q.text}"
            )
        elif q.state == "assumed":
            without.append(
                f"{q.id}: `{q.choice}` assumed without asking (position {q.position}) — {q.text}"
            )
        elif not q.decided:
            deadline = q.deadline.isoformat() if q.deadline else "none"
            still_open.append(
                f"{q.id} [{q.impact}] {q.state}, deadline {deadline} (asked at position "
                f"{q.position}) — {q.text}"
            )
    return waivers, without, still_open


class _Keep(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def render_rollback(template: str | None, values: Mapping[str, str]) -> str:
    """The repository's rollback template with the run's values; unknown fields kept as is."""
    text = template if template and template.strip() else DEFAULT_ROLLBACK
    try:
        return text.strip().format_map(_Keep(values))
    except (ValueError, IndexError, AttributeError):
        return text.strip()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _markdown(
    state: RunState, report: dict[str, Any], metrics: Sequence[Metric], index: _Events
) -> str:
    started = state.started
    assert started is not None
    failing = [m.name for m in metrics if m.verdict == "fail"]
    unmeasured = [m.name for m in metrics if m.verdict == "unmeasured"]
    outcome = report["outcome"]
    if outcome == "ok":
        headline = "every metric passes"
    elif outcome == "failed":
        headline = "failing: " + ", ".join(failing)
    else:
        headline = "not measured: " + ", ".join(unmeasured)
    lines = [
        f"# Approval report: run `{state.run_id}`",
        "",
        f"**Outcome: {outcome}** — {headline}.",
        "",
        f"Candidate `{started.head_ref}` (`{started.head[:12]}`) against base "
        f"`{started.base_ref}` (`{started.base[:12]}`) in `{started.repo}`; rule "
        f"`{report['rule']}` v{report['rule_version']}; ledger positions 1–{report['through']}.",
        "",
        "| # | metric | value | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for number, m in enumerate(metrics, start=1):
        lines.append(f"| {number} | {_cell(m.name)} | {_cell(m.value)} | {m.verdict} |")
    lines += ["", "## Why", ""]
    for number, m in enumerate(metrics, start=1):
        lines.append(f"{number}. **{_cell(m.name)}** — {m.verdict}: {m.why}.")
        if not m.events:
            lines.append("   - no event in the ledger decides it")
        for d in m.events:
            note = f" — {d.note}" if d.note else ""
            lines.append(f"   - {d.kind} at {d.at}, position {d.position}{note}")
    lines += ["", "## Waivers", ""]
    lines += [f"- {w}" for w in report["waivers"]] or ["- none"]
    lines += ["", "## Decided without the owner", ""]
    lines += [f"- {w}" for w in report["without_owner"]] or ["- none"]
    if report["open_questions"]:
        lines += ["", "## Open questions", ""]
        lines += [f"- {q}" for q in report["open_questions"]]
    lines += ["", "## Rollback", "", report["rollback"], ""]
    return "\n".join(lines)


def approval_report(
    events: Sequence[tuple[int, ev.Event]],
    artifacts: Mapping[str, bytes],
    decide: Callable[[RunState], Verdict],
    *,
    required: Sequence[str] = (),
    rollback_template: str | None = None,
) -> ApprovalReport:
    """The report from the run's events up to now (earlier `ApprovalIssued` events ignored)."""
    facts = [(p, e) for p, e in events if not isinstance(e, ev.ApprovalIssued)]
    state = fold(facts, artifacts)
    if state.started is None:
        raise ValueError("the events hold no RunStarted")
    verdict = decide(state)
    index = _Events(facts)
    metrics = [_gate_metric(state, verdict, index)]
    metrics += _check_metrics(state, index, facts, required)
    metrics.append(_pin_metric(state, index))
    outcome = outcome_of(m.verdict for m in metrics)
    waivers, without, still_open = _story(state)
    started = state.started
    through = max((p for p, _ in events), default=0)
    rollback = render_rollback(
        rollback_template,
        {
            "run_id": state.run_id,
            "head": started.head,
            "head_ref": started.head_ref,
            "base": started.base,
            "base_ref": started.base_ref,
            "repo": started.repo,
            "rule": verdict.rule,
            "outcome": outcome,
        },
    )
    summary = {
        "outcome": outcome,
        "rule": verdict.rule,
        "rule_version": verdict.rule_version,
        "through": through,
        "waivers": waivers,
        "without_owner": without,
        "open_questions": still_open,
        "rollback": rollback,
    }
    return ApprovalReport(
        run_id=state.run_id,
        rule=verdict.rule,
        rule_version=verdict.rule_version,
        outcome=outcome,
        metrics=tuple(metrics),
        required=tuple(sorted(set(required))),
        through=through,
        waivers=tuple(waivers),
        without_owner=tuple(without),
        open_questions=tuple(still_open),
        rollback=rollback,
        markdown=_markdown(state, summary, metrics, index),
    )
