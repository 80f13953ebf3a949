"""The approval report: one table of metrics, each with the events that decided it.

Pure: the report is derived from a prefix of the run's events (and the artifacts they
reference), a rule, the required check names and — for the first format — the repository's
rollback template, so the same inputs always give the same bytes — which is what
`ledger audit` checks by sha256.

Six formats, all kept so every issued report still derives: format 1 (the gate, recorded
checks, the runtime pin; rollback text read from the repository), format 2 (titled by the
release's version, one-line `approved: n/n` summary, the built-in checks gate, runtime-pin and
changelog, rollback commands from the recorded `ReleaseInspected`; every metric shown decides),
format 3 (also dependencies, distributions and upgrade; only the *required* metrics decide
the outcome and are counted in the summary, the others are shown, marked not required),
format 4 (the gate's why also names the tests skipped at both revisions for a missing module,
with the setting that would bring them in; never a verdict), format 5 (led by the introduced
failures' causes) and format 6 (a version head's tree does not name is its built wheel's).

Which metrics are required (format 3): `[tool.release-ledger] required-checks` at head, or
every built-in check when the list is absent or empty; `gate` always; plus `--require`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from release_ledger.domain import events as ev
from release_ledger.domain.clusters import Cluster, headline
from release_ledger.domain.run_state import RunState, fold
from release_ledger.domain.text import markdown_code, markdown_text
from release_ledger.domain.verdict import Verdict
from release_ledger.projections.built_release import as_built
from release_ledger.projections.checks import (
    BUILTIN_CHECKS,
    CHECKS_OF_FORMAT,
    GATE,
    Evidence,
    Index,
    Metric,
    check_key,
    gate_metric_v1,
    gate_value,
    pin_metric,
    pin_satisfied,
)
from release_ledger.projections.environment_skips import environment_skips

__all__ = ["ApprovalReport", "approval_report", "outcome_of", "pin_satisfied", "render_rollback"]

RESERVED = tuple(BUILTIN_CHECKS)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
OUTCOME_EXIT = {"ok": 0, "failed": 1, "unmeasured": 3}
CURRENT_FORMAT = 6
# From this format on, the gate's why also names the tests a missing module kept out at both
# revisions and the setting that would bring them in (information: its verdict is unchanged).
TELLS_ENVIRONMENT_SKIPS = 4
# From this format on, the gate's value leads with the introduced failures' causes and the
# report lists each cause with its tests (`domain/clusters.py`).
TELLS_CAUSES = 5
# From this format on, a version head's tree does not name (setuptools_scm, hatch-vcs, flit's
# `__version__`) is the one its built wheel states (`projections/built_release.py`).
TAKES_THE_BUILT_VERSION = 6

# The default rollback of a Python project's release, one command a line ({placeholders}
# without a recorded value are left for the reader to fill).
DEFAULT_ROLLBACK_COMMANDS = (
    "# hide the GitHub release and delete its tag (the tag push is what publishes)",
    "gh release edit {tag} --draft",
    "git push --delete origin {tag} && git tag --delete {tag}",
    "# PyPI files cannot be replaced: yank {version} so installers skip it",
    "#   https://pypi.org/manage/project/{project}/release/{version}/",
    "# users go back to the previous release",
    "python -m pip install '{project}=={base_version}'",
    "# revert the candidate's commits on the release branch",
    "git revert --no-edit {base}..{head}",
    "# the evidence: ledger show {run}",
)

DEFAULT_ROLLBACK = (
    "Keep or redeploy the previous release `{base_ref}` (commit `{base}`) instead of the "
    "candidate `{head_ref}` (commit `{head}`). The candidate's evidence stays in run `{run_id}`: "
    "`ledger show {run_id}` tells its story."
)


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
    report_format: int = 1
    title: str = ""
    summary: str = ""
    version: str | None = None
    tag: str | None = None
    clusters: tuple[Cluster, ...] = ()  # the introduced failures by cause (format 5)

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
            "report_format": self.report_format,
            "title": self.title,
            "summary": self.summary,
            "version": self.version,
            "tag": self.tag,
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


def _check_metrics(
    state: RunState, index: Index, events: Sequence[tuple[int, ev.Event]], required: Sequence[str]
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


# --- questions, waivers, rollback -----------------------------------------------------------------


def _story(state: RunState) -> tuple[list[str], list[str], list[str]]:
    waivers, without, still_open = [], [], []
    for q in sorted(state.questions.values(), key=lambda q: q.position):
        at = q.decided_at.isoformat() if q.decided_at else ""
        if q.choice == "waive-culprits" and q.topic == "unmeasured":
            late = " late" if q.late else ""
            waivers.append(
                f"{', '.join(markdown_code(f) for f in q.subject)} waived by "
                f"{markdown_text(q.by or '')} "
                f"({q.id}, answered{late} at {at}, position {q.decided_position})"
            )
        if q.state == "taken":
            without.append(
                f"{q.id}: deadline passed unanswered, recommendation "
                f"{markdown_code(q.choice or '')} taken at {at} (position {q.decided_position})"
                f" — {markdown_text(q.text)}"
            )
        elif q.state == "assumed":
            without.append(
                f"{q.id}: {markdown_code(q.choice or '')} assumed without asking "
                f"(position {q.position}) — {markdown_text(q.text)}"
            )
        elif not q.decided:
            deadline = q.deadline.isoformat() if q.deadline else "none"
            still_open.append(
                f"{q.id} [{q.impact}] {q.state}, deadline {deadline} (asked at position "
                f"{q.position}) — {markdown_text(q.text)}"
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
    return markdown_text(text)


def _markdown(
    state: RunState, report: dict[str, Any], metrics: Sequence[Metric], index: Index
) -> str:
    started = state.started
    assert started is not None
    failing = [m.name for m in metrics if m.verdict == "fail"]
    unmeasured = [m.name for m in metrics if m.verdict == "unmeasured"]
    outcome = report["outcome"]
    if outcome == "ok":
        headline = "every metric passes"
    elif outcome == "failed":
        headline = "failing: " + ", ".join(map(markdown_text, failing))
    else:
        headline = "not measured: " + ", ".join(map(markdown_text, unmeasured))
    lines = [
        f"# Approval report: run `{state.run_id}`",
        "",
        f"**Outcome: {outcome}** — {headline}.",
        "",
        f"Candidate {markdown_code(started.head_ref)} ({markdown_code(started.head[:12])}) "
        f"against base {markdown_code(started.base_ref)} ({markdown_code(started.base[:12])}) "
        f"in {markdown_code(started.repo)}; rule {markdown_code(report['rule'])} "
        f"v{report['rule_version']}; ledger positions 1–{report['through']}.",
        "",
        "| # | metric | value | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for number, m in enumerate(metrics, start=1):
        lines.append(f"| {number} | {_cell(m.name)} | {_cell(m.value)} | {m.verdict} |")
    lines += ["", "## Why", ""]
    for number, m in enumerate(metrics, start=1):
        lines.append(f"{number}. **{_cell(m.name)}** — {m.verdict}: {markdown_text(m.why)}.")
        if not m.events:
            lines.append("   - no event in the ledger decides it")
        for d in m.events:
            note = f" — {markdown_text(d.note)}" if d.note else ""
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
    report_format: int = CURRENT_FORMAT,
) -> ApprovalReport:
    """The report from the run's events up to now (earlier `ApprovalIssued` events ignored).

    `rollback_template` is read by format 1 only; format 2 reads the recorded evidence."""
    if report_format == 1:
        return _report_v1(events, artifacts, decide, required, rollback_template)
    if report_format in CHECKS_OF_FORMAT:
        return _report_v2(events, artifacts, decide, required, report_format)
    raise ValueError(f"unknown report format {report_format}")


def _rollback_values(state: RunState, verdict: Verdict, outcome: str) -> dict[str, str]:
    """The placeholders every rollback template may use (both report formats)."""
    started = state.started
    assert started is not None
    return {
        "run_id": state.run_id,
        "head": started.head,
        "head_ref": started.head_ref,
        "base": started.base,
        "base_ref": started.base_ref,
        "repo": started.repo,
        "rule": verdict.rule,
        "outcome": outcome,
    }


def judged(
    events: Sequence[tuple[int, ev.Event]],
    artifacts: Mapping[str, bytes],
    decide: Callable[[RunState], Verdict],
) -> tuple[list[tuple[int, ev.Event]], RunState, ev.RunStarted, Verdict]:
    """The run's facts (every event but issued approvals, which a report never judges), their
    folded state, its `RunStarted` and the verdict under the rule."""
    facts = [(p, e) for p, e in events if not isinstance(e, ev.ApprovalIssued)]
    state = fold(facts, artifacts)
    if state.started is None:
        raise ValueError("the events hold no RunStarted")
    return facts, state, state.started, decide(state)


def _report_v1(
    events: Sequence[tuple[int, ev.Event]],
    artifacts: Mapping[str, bytes],
    decide: Callable[[RunState], Verdict],
    required: Sequence[str],
    rollback_template: str | None,
) -> ApprovalReport:
    facts, state, _, verdict = judged(events, artifacts, decide)
    index = Index(facts)
    metrics = [gate_metric_v1(state, verdict, index)]
    metrics += _check_metrics(state, index, facts, required)
    metrics.append(pin_metric(state, index))
    outcome = outcome_of(m.verdict for m in metrics)
    waivers, without, still_open = _story(state)
    through = max((p for p, _ in events), default=0)
    rollback = render_rollback(rollback_template, _rollback_values(state, verdict, outcome))
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


# --- format 2 ------------------------------------------------------------------------------------


def _recorded_metrics(
    state: RunState,
    index: Index,
    facts: Sequence[tuple[int, ev.Event]],
    required: Sequence[str],
    builtin: Sequence[str],
) -> list[Metric]:
    """Recorded checks by key (a later one supersedes), then required ones never recorded;
    `builtin`: the built-in checks' keys of the report's format."""
    metrics = []
    latest: dict[str, tuple[int, ev.CheckRecorded]] = {}
    earlier: dict[str, list[int]] = {}
    for position, e in facts:
        if isinstance(e, ev.CheckRecorded):
            key = check_key(e.name)
            if key in latest:
                earlier.setdefault(key, []).append(latest[key][0])
            latest[key] = (position, e)
    for key in sorted(latest):
        position, check = latest[key]
        name = check.display_name or check.name
        shown_key = key
        if key in builtin:  # recorded before the name became a built-in check
            name, shown_key = f"{name} (recorded)", f"{key}-recorded"
        why = f"recorded {check.verdict}" + (f" by {check.by}" if check.by else "")
        if earlier.get(key):
            why += "; supersedes the check at position " + ", ".join(map(str, earlier[key]))
        note = f"by {check.by}" if check.by else ""
        metrics.append(
            Metric(name, check.value or check.verdict, check.verdict,
                   tuple(index.at(position, note)), why, key=shown_key)
        )  # fmt: skip
    for key in sorted(set(required) - set(latest) - set(builtin)):
        why = "required, but no check of this name was recorded"
        metrics.append(Metric(key, "missing", "unmeasured", (), why, key=key))
    return metrics


def _telling_environment_skips(metric: Metric, state: RunState) -> Metric:
    """The gate metric with the tests skipped at head and base for a missing module, and what
    would bring them in, added to its why (format 4); any other metric as it is."""
    skips = environment_skips(state)
    if metric.name != GATE or metric.key or not skips:
        return metric
    told = "; ".join(skip.line() for skip in skips)
    return dataclasses.replace(metric, why=f"{metric.why}; told, not judged: {told}")


def _leading_with_causes(metric: Metric, verdict: Verdict) -> Metric:
    """The gate metric's value led by the causes of the introduced failures, with removed
    test files and resource regressions (format 5)."""
    told = (verdict.clusters or verdict.removed_at_head or verdict.heavier or verdict.slower
            or verdict.hangs or verdict.out_of_memory or verdict.harness_changed
            or verdict.figures_not_believed)  # fmt: skip
    if metric.name != GATE or metric.key or not told:
        return metric
    return dataclasses.replace(metric, value=gate_value(verdict, causes=True))


def _causes_markdown(clusters: Sequence[Cluster]) -> list[str]:
    """`## Failures by cause`: one line per cause, its tests folded under it."""
    lines = ["", "## Failures by cause", "", f"{markdown_text(headline(tuple(clusters)))}.", ""]
    for one in clusters:
        count = f"{len(one.tests)} test{'s' if len(one.tests) != 1 else ''}"
        lines.append(f"- {markdown_code(one.signature)} — {count}")
        lines.append(f"  <details><summary>{count}</summary>")
        lines += ["", *(f"  - {markdown_code(test)}" for test in one.tests), "", "  </details>"]
    return lines


def summary_line(outcome: str, metrics: Sequence[Metric]) -> str:
    """`approved: 6/6` or `blocked: 5/6 (changelog unmeasured)` (format 2: every metric)."""
    passing = sum(1 for m in metrics if m.verdict == "pass")
    counted = f"{passing}/{len(metrics)}"
    if outcome == "ok":
        return f"approved: {counted}"
    others = [f"{m.name} {m.verdict}" for m in metrics if m.verdict != "pass"]
    return f"blocked: {counted} ({', '.join(others)})"


def required_summary(outcome: str, metrics: Sequence[Metric], required: Iterable[str]) -> str:
    """Format 3: the required metrics counted and named (`approved: 6/6`, `blocked: 5/6
    (distributions unmeasured)`); a metric shown but not required that does not pass is
    named after them (`approved: 4/4; not required: upgrade fail`)."""
    wanted = set(required)
    deciding = [m for m in metrics if (m.key or m.name) in wanted]
    others = [m for m in metrics if (m.key or m.name) not in wanted and m.verdict != "pass"]
    text = summary_line(outcome, deciding)
    if others:
        text += "; not required: " + ", ".join(f"{m.name} {m.verdict}" for m in others)
    return text


def required_checks(release: ev.ReleaseInspected | None, required: Iterable[str]) -> list[str]:
    """The keys of the metrics that decide a format-3 report: `[tool.release-ledger]
    required-checks` at head (every built-in check when absent or empty), `gate` always,
    and `--require`."""
    configured = {check_key(n) for n in (release.required_checks if release else ())}
    wanted = configured or set(BUILTIN_CHECKS)
    return sorted(wanted | {GATE} | {check_key(n) for n in required})


def _fence(lines: Sequence[str]) -> list[str]:
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}sh", *lines, fence]


def _markdown_v2(
    state: RunState, release: ev.ReleaseInspected | None, report: ApprovalReport
) -> str:
    started = state.started
    assert started is not None
    where = f"`{started.repo}`"
    if release is not None and release.project:
        where = f"`{release.project}` in {where}"
    lines = [
        f"# {report.title}",
        "",
        f"**{report.summary}** — run `{state.run_id}`, rule `{report.rule}` "
        f"v{report.rule_version}, ledger positions 1–{report.through}.",
        "",
        f"Candidate `{started.head_ref}` (`{started.head[:12]}`) of {where} against base "
        f"`{started.base_ref}` (`{started.base[:12]}`).",
    ]
    if release is not None and release.version:
        tag = f"; tag `{release.tag}`" if release.tag else ""
        if release.tag and release.tag not in release.tags_at_head:
            tag += " (not at head when the gate started)"
        lines[-1] += f" Version {release.version} from {release.version_source}{tag}."
    for problem in release.problems if release is not None else ():
        lines += ["", f"> {' '.join(problem.split())}"]
    marked = report.report_format >= 3  # a `required` column; not-required metrics say so
    required = set(report.required)

    def is_required(m: Metric) -> bool:
        return (m.key or m.name) in required

    if marked:
        lines += ["", "| # | metric | value | verdict | required |"]
        lines += ["| --- | --- | --- | --- | --- |"]
    else:
        lines += ["", "| # | metric | value | verdict |", "| --- | --- | --- | --- |"]
    for number, m in enumerate(report.metrics, start=1):
        row = f"| {number} | {_cell(m.name)} | {_cell(m.value)} | {m.verdict} |"
        if marked:
            row += " yes |" if is_required(m) else " no |"
        lines.append(row)
    lines += ["", "## Why", ""]
    for number, m in enumerate(report.metrics, start=1):
        shown = m.verdict if not marked or is_required(m) else f"{m.verdict} (not required)"
        lines.append(f"{number}. **{_cell(m.name)}** — {shown}: {_cell(m.why)}.")
        if not m.events:
            lines.append("   - no event in the ledger decides it")
        for d in m.events:
            note = f" — {_cell(d.note)}" if d.note else ""
            lines.append(f"   - {d.kind} at {d.at}, position {d.position}{note}")
    if report.clusters:
        lines += _causes_markdown(report.clusters)
    for heading, items in (
        ("Waivers", report.waivers),
        ("Decided without the owner", report.without_owner),
        ("Open questions", report.open_questions),
    ):
        lines += ["", f"## {heading}", ""]
        lines += [f"- {item}" for item in items] or ["- none"]  # escaped by _story
    lines += ["", "## Rollback", "", *_fence(report.rollback.split("\n")), ""]
    return "\n".join(lines)


def _report_v2(
    events: Sequence[tuple[int, ev.Event]],
    artifacts: Mapping[str, bytes],
    decide: Callable[[RunState], Verdict],
    required: Sequence[str],
    report_format: int,
) -> ApprovalReport:
    """Formats 2 and 3 (format 3: more built-in checks, and only the required ones decide)."""
    facts, state, started, verdict = judged(events, artifacts, decide)
    index = Index(facts)
    release_position, release = None, None
    for position, e in facts:
        if isinstance(e, ev.ReleaseInspected):
            release_position, release = position, e
    if report_format >= TAKES_THE_BUILT_VERSION:
        release = as_built(release, facts)
    evidence = Evidence(state, verdict, index, release, release_position, artifacts)
    builtin = CHECKS_OF_FORMAT[report_format]
    if report_format == 2:
        wanted = {check_key(n) for n in required}
        wanted |= {check_key(n) for n in (release.required_checks if release else ())}
    else:
        wanted = set(required_checks(release, required))
    metrics = [BUILTIN_CHECKS[name](evidence) for name in builtin]
    if report_format >= TELLS_ENVIRONMENT_SKIPS:
        metrics = [_telling_environment_skips(m, state) for m in metrics]
    if report_format >= TELLS_CAUSES:
        metrics = [_leading_with_causes(m, verdict) for m in metrics]
    metrics += _recorded_metrics(state, index, facts, sorted(wanted), builtin)
    if report_format == 2:  # every metric shown decides
        outcome = outcome_of(m.verdict for m in metrics)
        summary = summary_line(outcome, metrics)
    else:
        outcome = outcome_of(m.verdict for m in metrics if (m.key or m.name) in wanted)
        summary = required_summary(outcome, metrics, wanted)
    waivers, without, still_open = _story(state)
    through = max((p for p, _ in events), default=0)
    values = {"run": state.run_id, **_rollback_values(state, verdict, outcome)}
    version = release.version if release else None
    tag = release.tag if release else None
    for name, known in (
        ("version", version),
        ("tag", tag),
        ("project", release.project if release else None),
        ("base_version", release.base_version if release else None),
    ):
        if known:
            values[name] = known
    template = release.rollback if release and release.rollback else DEFAULT_ROLLBACK_COMMANDS
    rollback = "\n".join(render_rollback(line, values) if line.strip() else ""
                         for line in template)  # fmt: skip
    title = f"v{version} approval" if version else f"{started.head_ref} approval (version unknown)"
    report = ApprovalReport(
        run_id=state.run_id,
        rule=verdict.rule,
        rule_version=verdict.rule_version,
        outcome=outcome,
        metrics=tuple(metrics),
        required=tuple(sorted(wanted)),
        through=through,
        waivers=tuple(waivers),
        without_owner=tuple(without),
        open_questions=tuple(still_open),
        rollback=rollback,
        markdown="",
        report_format=report_format,
        title=title,
        summary=summary,
        version=version,
        tag=tag,
        clusters=verdict.clusters if report_format >= TELLS_CAUSES else (),
    )
    return dataclasses.replace(report, markdown=_markdown_v2(state, release, report))
