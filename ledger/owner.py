"""The owner's use cases: pending questions, answers, recorded checks, approval, audit.

Every write validates first and appends with the length it read (`expected_length`), so a
bad answer writes nothing and two writers racing on one run never contradict each other.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release_ledger.adapters import git
from release_ledger.adapters.store_errors import ConcurrencyConflict
from release_ledger.adapters.store_records import Recorded
from release_ledger.domain import events as ev
from release_ledger.domain.errors import BadInput
from release_ledger.domain.rules import get_rule
from release_ledger.domain.run_state import QuestionView, RunState
from release_ledger.ledger import read_side
from release_ledger.ledger.clarify import expiry_events
from release_ledger.ledger.read_side import project
from release_ledger.ledger.release import release_event
from release_ledger.ledger.service import Ledger
from release_ledger.projections.approval import (
    CURRENT_FORMAT,
    RESERVED,
    ApprovalReport,
    approval_report,
)
from release_ledger.projections.checks import KEY_PATTERN, check_key
from release_ledger.projections.verdict_view import verdict_document

ATTEMPTS = 20  # optimistic appends retried after another writer got in first
ANSWERABLE = ("open", "expired", "parked", "taken")


# --- questions ----------------------------------------------------------------------------------

pending_questions = read_side.pending_questions  # the read side answers it (index or fold)


def answer(
    ledger: Ledger, run_prefix: str, question_id: str, choice: str, by: str
) -> dict[str, Any]:
    """Record the owner's choice (late when the deadline passed) and re-derive the verdict.

    Unknown question, a choice not offered, an assumed question or a second answer: BadInput,
    nothing written. A passed deadline not yet observed is recorded first (expired, then
    taken or parked), in the same append as the answer.
    """
    run_id = ledger.resolve(run_prefix)
    by = by.strip()
    if not by:
        raise BadInput("--by must name who answers")
    for _ in range(ATTEMPTS):
        state = project(ledger, run_id)
        q = _answerable(state, run_id, question_id, choice)
        now = ledger.clock.now()
        expiry = expiry_events(ledger, run_id, state, now)
        late = q.state != "open" or (q.deadline is not None and now >= q.deadline)
        answered = ledger.make(
            ev.QuestionAnswered, run_id, question_id=q.id, choice=choice, by=by, late=late
        )
        try:
            ledger.append(run_id, [*expiry, answered], expected_length=state.length)
        except ConcurrencyConflict:
            continue
        after = project(ledger, run_id)
        document = verdict_document(run_id, after, get_rule(_rule(after)).decide(after))
        return {
            "run_id": run_id,
            "question": q.id,
            "choice": choice,
            "by": by,
            "late": late,
            "observed": [e.kind for e in expiry],
            "resume": not after.completed and not any(v.state == "open" for v in _qs(after)),
            "verdict": document,
        }
    raise BadInput(f"run {run_id} keeps changing under the answer; try again")


def _qs(state: RunState) -> list[QuestionView]:
    return list(state.questions.values())


def _rule(state: RunState) -> str:
    return state.started.rule if state.started else "default"


def _answerable(state: RunState, run_id: str, question_id: str, choice: str) -> QuestionView:
    q = state.questions.get(question_id)
    if q is None:
        known = ", ".join(sorted(state.questions)) or "none"
        raise BadInput(f"run {run_id[:12]} has no question {question_id!r} (questions: {known})")
    if q.state == "assumed":
        raise BadInput(f"{q.id} was never asked: {q.choice!r} was assumed ({q.impact} impact)")
    if q.state == "answered":
        raise BadInput(f"{q.id} is already answered: {q.choice!r} by {q.by}")
    if q.state not in ANSWERABLE:
        raise BadInput(f"{q.id} cannot be answered in state {q.state}")
    if choice not in q.options:
        raise BadInput(f"{choice!r} is not an option of {q.id}; options: {', '.join(q.options)}")
    return q


# --- checks ------------------------------------------------------------------------------------


def check_name(name: str) -> str:
    """The safe key of a check name (as typed, e.g. "installation files"); BadInput when it
    has no usable key or names a built-in check."""
    key = check_key(name)
    if not KEY_PATTERN.match(key) or len(name.strip()) > 120 or not name.isprintable():
        raise BadInput(
            f"bad check name {name!r}: at most 120 printable characters, with letters or "
            "digits (the key keeps letters, digits, '.', '_' and '-')"
        )
    if key in RESERVED:
        raise BadInput(f"{key!r} is a built-in metric; name the check differently")
    return key


def record_check(
    ledger: Ledger, run_prefix: str, name: str, verdict: str, value: str, by: str
) -> dict[str, Any]:
    """Append a `CheckRecorded` under the name's safe key (the name as typed is its display
    name); a later one of the same key supersedes it in reports."""
    run_id = ledger.resolve(run_prefix)
    key = check_name(name)
    display = " ".join(name.split())
    if verdict not in ("pass", "fail", "unmeasured"):
        raise BadInput(f"--verdict must be pass, fail or unmeasured, got {verdict!r}")
    records = ledger.read(run_id)
    if not records or not isinstance(records[0].event, ev.RunStarted):
        raise BadInput(f"run {run_id} has no RunStarted event")
    earlier = [
        r.position
        for r in records
        if isinstance(r.event, ev.CheckRecorded) and check_key(r.event.name) == key
    ]
    event = ledger.record(
        run_id,
        ev.CheckRecorded,
        name=key,
        display_name=display if display != key else "",
        verdict=verdict,
        value=value,
        by=by,
    )
    return {
        "run_id": run_id,
        "key": key,
        "name": display,
        "verdict": verdict,
        "value": value,
        "by": by,
        "at": event.at.isoformat(),
        "supersedes": earlier[-1] if earlier else None,
    }


# --- approval ----------------------------------------------------------------------------------


def rollback_template(started: ev.RunStarted) -> str | None:
    """`[tool.release-ledger] rollback` from the repository's pyproject.toml at head."""
    try:
        data = git.read_file_at_commit(Path(started.repo), started.head, "pyproject.toml")
        if data is None:
            return None
        document = tomllib.loads(data.decode("utf-8", "replace"))
    except (BadInput, OSError, tomllib.TOMLDecodeError, ValueError, RuntimeError):
        return None
    tool = document.get("tool", {})
    section = tool.get("release-ledger", {}) if isinstance(tool, dict) else {}
    template = section.get("rollback") if isinstance(section, dict) else None
    return template if isinstance(template, str) and template.strip() else None


def derive_report(
    ledger: Ledger,
    records: list[Recorded],
    rule: str,
    required: list[str],
    report_format: int = CURRENT_FORMAT,
) -> ApprovalReport:
    """The approval report from these records (a prefix of a run's stream). Format 1 reads
    its rollback template from the repository; later formats only from the ledger."""
    events = [r.event for r in records]
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is None:
        raise BadInput("the run has no RunStarted event")
    try:
        return approval_report(
            [(r.position, r.event) for r in records],
            ledger.artifacts_for(events),
            get_rule(rule).decide,
            required=required,
            rollback_template=rollback_template(started) if report_format == 1 else None,
            report_format=report_format,
        )
    except ValueError as error:
        raise BadInput(str(error)) from None


def _inspect_if_missing(ledger: Ledger, run_id: str) -> None:
    """Runs started before `ReleaseInspected` existed: read head's tree now and record it."""
    for _ in range(ATTEMPTS):
        records = ledger.read(run_id)
        if any(isinstance(r.event, ev.ReleaseInspected) for r in records):
            return
        started = ledger.started(run_id)
        if not Path(started.repo).is_dir():
            return  # the report says the evidence is missing
        try:
            event, artifacts = release_event(ledger, started)
        except (OSError, RuntimeError, BadInput):
            return
        try:
            ledger.append(run_id, [event], artifacts=artifacts, expected_length=len(records))
            return
        except ConcurrencyConflict:
            continue


def _required_key(name: str) -> str:
    key = check_key(name)
    if not KEY_PATTERN.match(key):
        raise BadInput(f"bad --require name {name!r}: it needs letters or digits")
    return key


def approve(
    ledger: Ledger, run_prefix: str, required: list[str], rule: str | None = None
) -> ApprovalReport:
    """Derive the report, store its Markdown, append `ApprovalIssued` (outcome, rule, sha256)."""
    run_id = ledger.resolve(run_prefix)
    required = sorted({_required_key(n) for n in required})
    _inspect_if_missing(ledger, run_id)
    for _ in range(ATTEMPTS):
        records = ledger.read(run_id)
        started = ledger.started(run_id)
        name = rule or started.rule
        report = derive_report(ledger, records, name, required)
        markdown = report.markdown.encode("utf-8")
        event = ledger.make(
            ev.ApprovalIssued,
            run_id,
            outcome=report.outcome,
            rule=report.rule,
            rule_version=report.rule_version,
            report_sha256=report.sha256,
            required=required,
            report_format=report.report_format,
        )
        try:
            ledger.append(
                run_id, [event], artifacts={report.sha256: markdown}, expected_length=len(records)
            )
        except ConcurrencyConflict:
            continue
        return report
    raise BadInput(f"run {run_id} keeps changing under the approval; try again")


# --- audit -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditEntry:
    position: int
    at: str
    outcome: str
    rule: str
    rule_version: int
    issued_sha256: str
    derived_sha256: str | None
    derives: bool
    problem: str = ""
    diff: tuple[str, ...] = ()
    compared: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "at": self.at,
            "outcome": self.outcome,
            "rule": self.rule,
            "rule_version": self.rule_version,
            "issued_sha256": self.issued_sha256,
            "derived_sha256": self.derived_sha256,
            "derives": self.derives,
            "problem": self.problem,
            "diff": list(self.diff),
            "under_rule": self.compared,
        }


def _differences(before: ApprovalReport, after: ApprovalReport) -> dict[str, Any]:
    old = {m.name: m for m in before.metrics}
    changed = []
    for m in after.metrics:
        was = old.get(m.name)
        if was is None or (was.value, was.verdict) != (m.value, m.verdict):
            changed.append(
                {
                    "name": m.name,
                    "from": {"value": was.value, "verdict": was.verdict} if was else None,
                    "to": {"value": m.value, "verdict": m.verdict},
                }
            )
    return {
        "rule": after.rule,
        "rule_version": after.rule_version,
        "outcome": after.outcome,
        "outcome_changes": after.outcome != before.outcome,
        "metrics_changed": changed,
        "report_sha256": after.sha256,
    }


def audit(ledger: Ledger, run_prefix: str, rule: str | None = None) -> dict[str, Any]:
    """For every `ApprovalIssued`: does the same report still derive, byte for byte, from the
    events before it? With `rule`, also what that report would say under another rule."""
    run_id = ledger.resolve(run_prefix)
    if rule is not None:
        get_rule(rule)
    records = ledger.read(run_id)
    entries = []
    for index, record in enumerate(records):
        issued = record.event
        if not isinstance(issued, ev.ApprovalIssued):
            continue
        prefix = records[:index]
        base: dict[str, Any] = {
            "position": record.position,
            "at": issued.at.isoformat(),
            "outcome": issued.outcome,
            "rule": issued.rule,
            "rule_version": issued.rule_version,
            "issued_sha256": issued.report_sha256,
        }
        try:
            derived = derive_report(
                ledger, prefix, issued.rule, list(issued.required), issued.report_format
            )
        except BadInput as error:
            entries.append(
                AuditEntry(**base, derived_sha256=None, derives=False, problem=str(error))
            )
            continue
        derives = derived.sha256 == issued.report_sha256
        problem, diff = "", tuple[str, ...]()
        if not derives:
            current = get_rule(issued.rule).version
            repo = Path(ledger.started(run_id).repo)
            if current != issued.rule_version:
                problem = (
                    f"rule {issued.rule} is now v{current} (issued under v{issued.rule_version})"
                )
            elif not repo.is_dir() and issued.report_format == 1:
                problem = f"repository {repo} is gone: its rollback template cannot be re-read"
            else:
                problem = "the same events and rule no longer give the same report"
            stored = ledger.artifact(issued.report_sha256)
            if stored is not None:
                diff = tuple(
                    difflib.unified_diff(
                        stored.decode("utf-8", "replace").splitlines(),
                        derived.markdown.splitlines(),
                        "issued",
                        "derived now",
                        lineterm="",
                    )
                )
        compared = None
        if rule is not None:
            other = derive_report(ledger, prefix, rule, list(issued.required), issued.report_format)
            compared = _differences(derived, other)
        entries.append(
            AuditEntry(
                **base,
                derived_sha256=derived.sha256,
                derives=derives,
                problem=problem,
                diff=diff,
                compared=compared,
            )
        )
    attestations = [
        {
            "position": r.position,
            "at": r.event.at.isoformat(),
            "envelopes": len(r.event.envelope_sha256),
            "key_id": r.event.key_id,
            "verification_result": r.event.verification_result,
        }
        for r in records
        if isinstance(r.event, ev.AttestationIssued)
    ]
    return {
        "run_id": run_id,
        "approvals": [e.as_dict() for e in entries],
        "attestations": attestations,
        "ok": all(e.derives for e in entries),
    }
