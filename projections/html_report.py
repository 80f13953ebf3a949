"""The run as one self-contained HTML page: verdict banner, timeline, bisection tree, tables.

Pure: the page is derived from the run's events, the artifacts they reference and a rule —
no clock, disk or network; the same inputs give the same bytes. The page needs nothing
else: inline CSS, server-side SVG (hover titles are SVG `<title>`s), no script, no external
asset or link. Every text from the suite or the ledger is escaped with `html.escape`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from release_ledger.domain import events as ev
from release_ledger.domain.attribution import CAUSE_WORDS
from release_ledger.domain.clusters import Cluster, headline
from release_ledger.domain.run_state import RunState, ShardView
from release_ledger.domain.text import one_line
from release_ledger.domain.verdict import Verdict
from release_ledger.projections.approval import ApprovalReport, approval_report, judged

LABEL_W = 190  # px of lane labels left of the plot
PLOT_W = 900
LANE_H = 22
AXIS_H = 26

OUTCOME_COLOURS = {
    "passed": "#2e7d32",  # measured, no failing test
    "failed tests": "#ef6c00",  # measured, failing tests
    "oom": "#6a1b9a",
    "timeout": "#b8860b",
    "signal": "#c62828",
    "infrastructure": "#78909c",
    "unmeasured": "#37474f",  # no report, invalid report, contradicting exit code, ...
    "reused": "#90caf9",
}
STATUS_COLOURS = {
    "passed": ("#1b5e20", "#e8f5e9"),
    "failed": ("#b71c1c", "#ffebee"),
    "unmeasured": ("#8d6e00", "#fff8e1"),
    "awaiting": ("#4a148c", "#f3e5f5"),
    "parked": ("#4a148c", "#f3e5f5"),
}
VERDICT_COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "unmeasured": "#8d6e00"}


def _e(text: object) -> str:
    """Text from the suite as HTML text: markup escaped, and every control or format character
    (bidi overrides that reorder what is read, zero-width ones) shown as an escape; line
    breaks are kept for `<pre>` blocks."""
    lines = str(text).split("\n")
    return html.escape("\n".join(one_line(line) for line in lines), quote=True)


@dataclass(frozen=True)
class Bar:
    """One attempt on the timeline."""

    kind: str  # shard, measure, isolate
    label: str
    member: str
    start: float  # seconds since the first bar began
    end: float
    outcome: str
    detail: str


def _outcome(e: Any, measured: bool | None) -> str:
    if getattr(e, "infrastructure_failure", None):
        return "infrastructure"
    if getattr(e, "oom", False):
        return "oom"
    if getattr(e, "timed_out", False):
        return "timeout"
    if e.signal is not None:
        return "signal"
    if measured is False:
        return "unmeasured"
    if e.exit_code == 0:
        return "passed"
    if e.exit_code == 1:
        return "failed tests"
    if e.exit_code == 5:
        return "passed"  # collected no test: measured as such
    return "unmeasured"


def _bars(state: RunState, events: Sequence[tuple[int, ev.Event]]) -> list[Bar]:
    measured_at = {
        a.position: a.assessment.measured
        for lane in state.matrix.values() or [state]
        for s in lane.shards.values()
        for attempts in s.attempts.values()
        for a in attempts
    }
    rounds: dict[str, int] = {}
    raw: list[tuple[datetime, float, str, str, str, str, str]] = []
    for position, e in events:
        if isinstance(e, ev.ShardAttemptRecorded):
            outcome = _outcome(e, measured_at.get(position))
            label = f"{e.shard} {e.revision} #{e.attempt}"
            detail = (
                f"{e.shard} at {e.revision}, attempt {e.attempt} on {e.member}: {outcome}, "
                f"exit {e.exit_code}, {e.seconds:.1f} s, {e.rss_mb:.0f} MB, "
                f"{len(e.files)} files (position {position})"
            )
            if e.infrastructure_failure:
                detail += f"; {e.infrastructure_failure} {e.infrastructure_detail}".rstrip()
            member = e.member + (f" · Python {e.interpreter}" if e.interpreter else "")
            if e.interpreter:
                label, detail = f"{e.interpreter} {label}", f"Python {e.interpreter}: {detail}"
            raw.append((e.at, e.seconds, "shard", label, member, outcome, detail))
            rounds[e.shard] = max(rounds.get(e.shard, 0), e.attempt)
        elif isinstance(e, ev.FileMeasured) and e.source == "shard":
            continue  # measured inside a shard attempt: that attempt is the bar
        elif isinstance(e, ev.FileMeasured | ev.MeasurementFailed):
            failed = isinstance(e, ev.MeasurementFailed)
            outcome = "unmeasured" if failed else "passed"
            if isinstance(e, ev.MeasurementFailed):
                outcome = {"oom": "oom", "timeout": "timeout", "signal": "signal"}.get(
                    e.reason, "infrastructure" if e.infrastructure_failure else "unmeasured"
                )
            detail = (
                f"measured {e.file} alone: {outcome if failed else 'measured'}, "
                f"{e.seconds:.1f} s, {e.rss_mb:.0f} MB (position {position})"
            )
            raw.append((e.at, e.seconds, "measure", e.file, "measuring", outcome, detail))
        elif isinstance(e, ev.IsolationRecorded):
            outcome = _outcome(e, None)
            detail = (
                f"{e.file} alone at {e.revision}: {outcome}, exit {e.exit_code}, "
                f"{e.seconds:.1f} s (position {position})"
            )
            raw.append((e.at, e.seconds, "isolate", f"{e.file} {e.revision}", "isolating",
                        outcome, detail))  # fmt: skip
    if not raw:
        return []
    starts = [at.timestamp() - max(seconds, 0.0) for at, seconds, *_ in raw]
    origin = min(starts)
    bars = []
    for (at, _seconds, kind, label, member, outcome, detail), start in zip(
        raw, starts, strict=True
    ):
        bars.append(
            Bar(kind, label, member, start - origin, at.timestamp() - origin, outcome, detail)
        )
    return bars


def _lanes(bars: Sequence[Bar]) -> list[tuple[str, list[Bar]]]:
    """One lane per executor slot: bars of one member packed greedily by start time."""
    lanes: list[tuple[str, list[Bar]]] = []
    order = ["measuring", *sorted({b.member for b in bars} - {"measuring", "isolating"})]
    order.append("isolating")
    for member in order:
        slots: list[list[Bar]] = []
        for bar in sorted((b for b in bars if b.member == member), key=lambda b: (b.start, b.end)):
            for slot in slots:
                if slot[-1].end <= bar.start + 1e-3:
                    slot.append(bar)
                    break
            else:
                slots.append([bar])
        for number, slot in enumerate(slots, start=1):
            lanes.append((f"{member} · slot {number}", slot))
    return lanes


def _ticks(span: float) -> list[float]:
    for step in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200):
        if span / step <= 10:
            return [i * step for i in range(int(span / step) + 1)]
    step = span / 10
    return [i * step for i in range(11)]


def _clock(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:g} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if rest else f"{minutes} min"


def timeline_svg(bars: Sequence[Bar]) -> str:
    if not bars:
        return '<p class="none">No attempt was recorded.</p>'
    lanes = _lanes(bars)
    span = max(max(b.end for b in bars), 1e-3)
    scale = PLOT_W / span
    height = AXIS_H + LANE_H * len(lanes) + 6
    width = LABEL_W + PLOT_W + 10
    parts = [
        f'<svg class="timeline" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="timeline of {len(bars)} attempts in {len(lanes)} lanes">'
    ]
    for tick in _ticks(span):
        x = LABEL_W + tick * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="{AXIS_H - 6}" x2="{x:.1f}" y2="{height}" class="grid"/>'
            f'<text x="{x:.1f}" y="{AXIS_H - 10}" class="tick">{_e(_clock(tick))}</text>'
        )
    for row, (name, lane) in enumerate(lanes):
        y = AXIS_H + row * LANE_H
        if row % 2:
            parts.append(f'<rect x="0" y="{y}" width="{width}" height="{LANE_H}" class="stripe"/>')
        parts.append(f'<text x="4" y="{y + 15}" class="lane">{_e(name)}</text>')
        for bar in lane:
            x = LABEL_W + bar.start * scale
            w = max((bar.end - bar.start) * scale, 2.0)
            colour = OUTCOME_COLOURS.get(bar.outcome, "#000")
            parts.append(
                f'<g><title>{_e(bar.detail)}</title><rect x="{x:.1f}" y="{y + 3}" '
                f'width="{w:.1f}" height="{LANE_H - 6}" rx="2" fill="{colour}"/>'
            )
            if w > 7 * len(bar.label) + 6:
                parts.append(
                    f'<text x="{x + 3:.1f}" y="{y + 15}" class="bar">{_e(bar.label)}</text>'
                )
            parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def legend() -> str:
    items = "".join(
        f'<span class="key"><span class="swatch" style="background:{colour}"></span>'
        f"{_e(name)}</span>"
        for name, colour in OUTCOME_COLOURS.items()
        if name != "reused"
    )
    return f'<p class="legend">{items}</p>'


# --- the bisection tree ---------------------------------------------------------------------


def _shard_outcome(shard: ShardView) -> str:
    latest = [a for a in (shard.latest("head"), shard.latest("base")) if a is not None]
    if shard.children:
        return "split"
    if not latest:
        return "not run"
    bad = [a for a in latest if not a.assessment.measured]
    if bad:
        return bad[0].assessment.reason or "unmeasured"
    return "measured"


def _layout(
    state: RunState, root: ShardView, step: float
) -> tuple[dict[str, tuple[float, int]], int]:
    """x (leaves side by side, parents centred over their children) and depth of each node."""
    positions: dict[str, tuple[float, int]] = {}
    leaves = 0

    def place(shard: ShardView, depth: int) -> float:
        nonlocal leaves
        kids = [state.shards[c] for c in shard.children if c in state.shards]
        x: float
        if not kids:
            x = leaves * step
            leaves += 1
        else:
            xs = [place(k, depth + 1) for k in kids]
            x = (min(xs) + max(xs)) / 2
        positions[shard.id] = (x, depth)
        return x

    place(root, 0)
    return positions, leaves


def bisection_svg(state: RunState) -> str:
    """Each split shard's tree (every interpreter's, in a matrix)."""
    if state.matrix:
        return "\n".join(
            f"<h3>Python {_e(label)}</h3>{_bisection_svg(lane)}"
            for label, lane in state.matrix.items()
        )
    return _bisection_svg(state)


def interpreters_html(verdict: Verdict) -> str:
    """A matrix gate's table: each interpreter's status and what decided it."""
    if not verdict.interpreters:
        return ""
    rows = "".join(
        f"<tr><td>Python {_e(label)}</td><td>{_e(v.status)}</td>"
        f"<td>{len(v.introduced)}</td><td>{len(v.flaky)}</td><td>{len(v.unmeasured)}</td>"
        f"<td>{_e('; '.join(v.reasons) or '-')}</td></tr>"
        for label, v in verdict.interpreters
    )
    return (
        "<h2>Interpreters</h2><table><thead><tr><th>interpreter</th><th>verdict</th>"
        "<th>introduced</th><th>flaky</th><th>unmeasured</th><th>why</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _bisection_svg(state: RunState) -> str:
    roots = [s for s in state.shards.values() if s.parent is None and s.children]
    if not roots:
        return '<p class="none">No shard was split.</p>'
    node_w, node_h, gap_x, gap_y = 150, 40, 12, 34
    svgs = []
    for root in sorted(roots, key=lambda s: s.id):
        positions, leaves = _layout(state, root, node_w + gap_x)
        depth = max(d for _, d in positions.values())
        width = leaves * (node_w + gap_x)
        height = (depth + 1) * (node_h + gap_y)
        parts = [
            f'<svg class="tree" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="bisection of {_e(root.id)}">'
        ]
        for shard_id, (x, d) in positions.items():
            shard = state.shards[shard_id]
            for child in shard.children:
                if child in positions:
                    cx, cd = positions[child]
                    parts.append(
                        f'<line x1="{x + node_w / 2:.1f}" y1="{d * (node_h + gap_y) + node_h}" '
                        f'x2="{cx + node_w / 2:.1f}" y2="{cd * (node_h + gap_y)}" class="edge"/>'
                    )
        for shard_id, (x, d) in sorted(positions.items()):
            shard = state.shards[shard_id]
            outcome = _shard_outcome(shard)
            y = d * (node_h + gap_y)
            fill = {"measured": "#e8f5e9", "split": "#eceff1", "not run": "#ffffff"}.get(
                outcome, "#ffebee"
            )
            why = f"split: {shard.split_reason}" if shard.children else outcome
            files = ", ".join(shard.files[:6]) + (" …" if len(shard.files) > 6 else "")
            parts.append(
                f"<g><title>{_e(shard.id)}: {_e(why)}; {len(shard.files)} files: {_e(files)}"
                f'</title><rect x="{x:.1f}" y="{y}" width="{node_w}" height="{node_h}" rx="4" '
                f'fill="{fill}" class="node"/>'
                f'<text x="{x + 6:.1f}" y="{y + 16}" class="node-id">{_e(shard.id)} '
                f"({len(shard.files)} files)</text>"
                f'<text x="{x + 6:.1f}" y="{y + 31}" class="node-why">{_e(why[:24])}</text></g>'
            )
        parts.append("</svg>")
        svgs.append("".join(parts))
    return "".join(f'<div class="tree-box">{s}</div>' for s in svgs)


# --- tables ---------------------------------------------------------------------------------


def _tests_table(title: str, tests: Sequence[str], css: str, note: str) -> str:
    rows = "".join(f"<tr><td><code>{_e(t)}</code></td></tr>" for t in tests)
    body = (
        f'<table class="tests {css}"><tbody>{rows}</tbody></table>'
        if tests
        else '<p class="none">none</p>'
    )
    return f"<h3>{_e(title)} <span class=\"count\">{len(tests)}</span></h3>" \
           f'<p class="note">{_e(note)}</p>{body}'  # fmt: skip


def _causes_html(clusters: tuple[Cluster, ...]) -> str:
    """The introduced failures by cause, first: one line each, its tests folded under it."""
    items = "".join(
        f"<details><summary><code>{_e(one.signature)}</code> "
        f'<span class="count">{len(one.tests)}</span></summary>'
        f'<table class="tests bad"><tbody>'
        + "".join(f"<tr><td>{_e(test)}</td></tr>" for test in one.tests)
        + "</tbody></table></details>"
        for one in clusters
    )
    return (
        f'<h3>causes <span class="count">{len(clusters)}</span></h3>'
        f'<p class="note">{_e(headline(clusters))}</p>{items}'
    )


def _findings_html(verdict: Verdict) -> list[str]:
    """Test files removed at head, and files heavier or slower than at base, with figures."""
    out = []
    if verdict.removed_at_head:
        out.append(_tests_table("removed at head", verdict.removed_at_head, "bad",
                                "test files base has and head deleted (not renamed)"))  # fmt: skip
    if verdict.out_of_memory:
        blown = tuple(o.line() for o in verdict.out_of_memory)
        out.append(_tests_table("out of memory at head", blown, "bad",
                                "killed over their limit alone at head, not at base"))  # fmt: skip
    if verdict.hangs:
        out.append(_tests_table("hung", tuple(h.line() for h in verdict.hangs), "bad",
                                "ended at their file's time limit, confirmed alone"))  # fmt: skip
    if verdict.harness_changed:
        note = ("conftest, pytest configuration or test invocation differ between base and "
                "head: head changed how it is judged")  # fmt: skip
        out.append(_tests_table("harness changed", verdict.harness_changed, "bad", note))
    if verdict.figures_not_believed:
        doubted = tuple(d.line() for d in verdict.figures_not_believed)
        out.append(_tests_table("figures not believed", doubted, "bad",
                                "what the suite reported, belied by the supervisor's own "
                                "figures: no evidence for slower or hung"))  # fmt: skip
    for what, changes in (("heavier", verdict.heavier), ("slower", verdict.slower)):
        if not changes:
            continue
        rows = "".join(
            f"<tr><td>{_e(c.file)}</td><td>{c.base:g} {c.unit}</td><td>{c.head:g} {c.unit}</td>"
            f"<td>x{(c.head / c.base if c.base else float('inf')):.1f}</td></tr>"
            for c in changes
        )
        out.append(
            f'<h3>{what} at head <span class="count">{len(changes)}</span></h3>'
            '<table class="grid"><thead><tr><th>file</th><th>base</th><th>head</th><th>ratio</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>"
        )
    return out


def classification_html(verdict: Verdict) -> str:
    skipped_at_head: tuple[str, ...] = getattr(verdict, "skipped_at_head", ())
    sections = [
        ("introduced", verdict.introduced, "bad", "fail at head, did not fail at base"),
        ("preexisting", verdict.preexisting, "", "fail at head and at base"),
        ("fixed", verdict.fixed, "good", "failed at base, pass at head"),
        ("flaky", verdict.flaky, "", "failed in a shard, passed when their file ran alone"),
        ("skipped at head", skipped_at_head, "", "passed at base, skipped or gone at head"),
    ]
    out = [_causes_html(verdict.clusters)] if verdict.clusters else []
    out += [_tests_table(*s) for s in sections]
    out += _findings_html(verdict)
    causes: dict[str, str] = getattr(verdict, "causes", {})
    if causes:
        rows = "".join(
            f"<tr><td>{_e(test)}</td><td>{_e(CAUSE_WORDS.get(cause, cause))}</td></tr>"
            for test, cause in sorted(causes.items())
        )
        moved = ", ".join(getattr(verdict, "moved", ()))
        out.append(
            f'<h3>introduced by <span class="count">{len(causes)}</span></h3>'
            f'<p class="note">run again at head with base\'s package set; moved: {_e(moved)}</p>'
            f'<table class="grid"><thead><tr><th>test</th><th>change</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
        )
    exonerated: dict[str, dict[str, Any]] = getattr(verdict, "exonerated", {})
    if exonerated:
        rows = "".join(
            f"<tr><td>{_e(test)}</td><td>{_e(x['reason'])}</td><td>"
            + _e(", ".join(f"{p['run_id'][:8]}@{p['position']}" for p in x["proof"]))
            + "</td></tr>"
            for test, x in sorted(exonerated.items())
        )
        fails = set(exonerated) & set(verdict.introduced)
        out.append(
            f'<h3>exonerated <span class="count">{len(exonerated)}</span></h3>'
            f'<p class="note">would be introduced; not blamed on head for the reason shown '
            f"(the proving events as run@position); rule {_e(verdict.rule)} "
            f"{'still fails on them' if fails else 'lists them'}"
            "</p><table class=\"grid\"><thead><tr><th>test</th><th>reason</th><th>proof</th>"
            f"</tr></thead><tbody>{rows}</tbody></table>"
        )
    if verdict.unmeasured:
        rows = "".join(
            f"<tr><td>{_e(u.shard)}</td><td>{_e(u.revision or '-')}</td><td>{_e(u.reason)}</td>"
            f"<td>{_e(', '.join(u.culprits) or '-')}</td><td>{_e(u.detail)}</td></tr>"
            for u in verdict.unmeasured
        )
        out.append(
            f'<h3>unmeasured <span class="count">{len(verdict.unmeasured)}</span></h3>'
            '<table class="grid"><thead><tr><th>shard</th><th>revision</th><th>reason</th>'
            f"<th>culprits</th><th>detail</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    return "".join(out)


def metrics_html(report: ApprovalReport) -> str:
    rows = "".join(
        f"<tr><td>{number}</td><td>{_e(m.name)}</td><td>{_e(m.value)}</td>"
        f'<td><span class="verdict" style="background:{VERDICT_COLOURS.get(m.verdict, "#555")}">'
        f"{_e(m.verdict)}</span></td><td>{_e(m.why)}</td></tr>"
        for number, m in enumerate(report.metrics, start=1)
    )
    return (
        '<table class="grid metrics"><thead><tr><th>#</th><th>metric</th><th>value</th>'
        f"<th>verdict</th><th>why</th></tr></thead><tbody>{rows}</tbody></table>"
    )


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#212121;
background:#fafafa}
main{max-width:1140px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:14px 0 4px}.count{color:#757575;font-weight:normal}
.banner{border-radius:6px;padding:14px 18px;border-left:10px solid;margin:10px 0}
.banner .status{font-size:26px;font-weight:700;text-transform:uppercase}
.banner .summary{font-size:16px;margin-top:2px}
.meta{color:#555}code{font:12px ui-monospace,Menlo,Consolas,monospace}
table{border-collapse:collapse;margin:4px 0}td,th{padding:3px 8px;text-align:left;
vertical-align:top}table.grid td,table.grid th{border:1px solid #ddd}
table.grid th{background:#eee}.tests td{border-bottom:1px solid #eee}
.tests.bad code{color:#b71c1c}.tests.good code{color:#1b5e20}
.verdict{color:#fff;border-radius:3px;padding:1px 6px;font-weight:600}
.none,.note{color:#757575;margin:2px 0}.legend .key{margin-right:14px;white-space:nowrap}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;
vertical-align:-1px}
.scroll{overflow-x:auto;background:#fff;border:1px solid #e0e0e0;border-radius:4px}
svg text{font:11px system-ui,sans-serif}svg .tick{fill:#757575}svg .lane{fill:#424242}
svg .bar{fill:#fff}svg .grid{stroke:#e0e0e0}svg .stripe{fill:#f5f5f5}
svg .edge{stroke:#90a4ae;stroke-width:1.5}svg .node{stroke:#90a4ae}
svg .node-id{font-weight:600;fill:#263238}svg .node-why{fill:#546e7a}
.tree-box{display:inline-block;margin:6px 12px 6px 0;padding:6px;background:#fff;
border:1px solid #e0e0e0;border-radius:4px}
pre{background:#263238;color:#eceff1;padding:10px;border-radius:4px;overflow-x:auto}
"""


def html_report(
    events: Sequence[tuple[int, ev.Event]],
    artifacts: Mapping[str, bytes],
    decide: Callable[[RunState], Verdict],
) -> str:
    """The whole page (UTF-8 text), from the run's events under a rule."""
    _, state, started, verdict = judged(events, artifacts, decide)
    report = approval_report(events, artifacts, decide)
    fg, bg = STATUS_COLOURS.get(verdict.status, ("#212121", "#eeeeee"))
    bars = _bars(state, events)
    shards = [b for b in bars if b.kind == "shard"]
    reasons = "".join(f"<li>{_e(r)}</li>" for r in verdict.reasons)
    approvals = "".join(
        f"<li>position {p}: {_e(a.outcome)} under {_e(a.rule)} v{a.rule_version}, report sha256 "
        f"<code>{_e(a.report_sha256[:16])}</code></li>"
        for p, a in state.approvals
    )
    rollback = _e(report.rollback)
    title = f"{report.title} — run {state.run_id[:12]}"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(title)}</title><style>{STYLE}</style></head><body><main>",
            f"<h1>{_e(report.title)}</h1>",
            f'<div class="banner" style="border-color:{fg};background:{bg};color:{fg}">'
            f'<div class="status">{_e(verdict.status)}</div>'
            f'<div class="summary">{_e(report.summary)} · gate under rule {_e(verdict.rule)} '
            f"v{verdict.rule_version}</div></div>",
            f'<p class="meta">Run <code>{_e(state.run_id)}</code>: candidate '
            f"<code>{_e(started.head_ref)}</code> ({_e(started.head[:12])}) against base "
            f"<code>{_e(started.base_ref)}</code> ({_e(started.base[:12])}) in "
            f"<code>{_e(started.repo)}</code>; executor {_e(started.executor)}; "
            f"{len(events)} events; {len(shards)} shard attempts.</p>",
            f"<ul>{reasons}</ul>" if reasons else "",
            interpreters_html(verdict),
            "<h2>Timeline</h2>",
            '<p class="note">One lane per executor slot or pool member; one bar per attempt '
            "(shard, revision, attempt), coloured by outcome. Hover a bar for its details.</p>",
            legend(),
            f'<div class="scroll">{timeline_svg(bars)}</div>',
            "<h2>Bisection</h2>",
            bisection_svg(state),
            "<h2>Tests</h2>",
            classification_html(verdict),
            "<h2>Approval metrics</h2>",
            metrics_html(report),
            f"<h3>Issued approvals</h3><ul>{approvals}</ul>" if approvals else "",
            "<h2>Rollback</h2>",
            f"<pre>{rollback}</pre>",
            "</main></body></html>",
            "",
        ]
    )
