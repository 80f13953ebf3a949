"""The gate's own metrics: the gate's verdict as a release check (`gate`, with the value
naming what decided it) and the runtime pin (`runtime-pin`: does the Python the tests ran on
satisfy the release's `requires-python`); the report formats before checks read `Evidence`
use `gate_metric_v1` and `pin_metric`."""

from __future__ import annotations

import re
from collections.abc import Callable

from release_ledger.domain import events as ev
from release_ledger.domain.clusters import headline
from release_ledger.domain.run_state import RunState
from release_ledger.domain.text import some
from release_ledger.domain.verdict import Verdict
from release_ledger.projections.check_model import (
    Deciding,
    Evidence,
    Index,
    Metric,
    padded,
    release_numbers,
)

GATE = "gate"
RUNTIME_PIN = "runtime-pin"
GATE_VERDICTS = {"passed": "pass", "failed": "fail"}  # unmeasured, awaiting, parked: unmeasured


# --- the runtime pin ----------------------------------------------------------------------------

_CLAUSE = re.compile(r"^\s*(~=|===|==|!=|<=|>=|<|>)?\s*([0-9][0-9A-Za-z.*+!-]*)\s*$")


def _clause_holds(version: tuple[int, ...], op: str, spec: str) -> bool | None:
    if spec.endswith(".*"):
        prefix = release_numbers(spec[:-2])
        if prefix is None or op not in ("==", "!="):
            return None
        same = version[: len(prefix)] == prefix
        return same if op == "==" else not same
    target = release_numbers(spec)
    if target is None:
        return None
    n = max(len(version), len(target))
    v, t = padded(version, n), padded(target, n)
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
    version = release_numbers(python_version)
    if version is None or not pin.strip():
        return None
    text = pin.strip()
    if not any(c in text for c in "<>=!~,"):
        bare = re.sub(r"^[A-Za-z]+-?", "", text)  # cpython-3.11, python3.11
        target = release_numbers(bare)
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


def gate_metric_v1(state: RunState, verdict: Verdict, index: Index) -> Metric:
    assert state.started is not None
    decided: list[Deciding] = []
    first = min(index.by_position) if index.by_position else 1
    decided += index.at(first, f"rule {verdict.rule} v{verdict.rule_version}")
    introduced_files = {t.split("::", 1)[0] for t in verdict.introduced}
    unmeasured_shards = {(u.shard, u.revision) for u in verdict.unmeasured}
    for u in verdict.unmeasured:
        if u.shard == "measure" or u.shard.endswith("/measure"):
            for file in u.files:
                decided += index.at(index.measure_failed.get(file), f"{file}: {u.reason}")
    waived = {f: w for w in verdict.waivers for f in w["files"]}
    for file in sorted(waived):
        decided += index.at(index.measure_failed.get(file), f"{file}: waived")
    # A matrix names each interpreter's shards `3.12/s01` (as `combine` does).
    for label, lane in state.matrix.items() or [("", state)]:
        prefix = f"{label}/" if state.matrix else ""
        for shard in sorted(lane.leaves(), key=lambda s: s.id):
            for revision in ("head", "base"):
                latest = shard.latest(revision)
                if latest is None:
                    continue
                name = prefix + shard.id
                if (name, revision) in unmeasured_shards:
                    decided += index.at(latest.position, f"{name} at {revision}: unmeasured")
                elif not latest.assessment.measured and set(shard.files) <= set(waived):
                    decided += index.at(latest.position, f"{name} at {revision}: waived")
                elif verdict.status == "passed" or (
                    revision == "head" and introduced_files & set(shard.files)
                ):
                    decided += index.at(latest.position, f"{name} at {revision}")
        for (file, revision), iso in sorted(lane.isolations.items()):
            if file in introduced_files or any(t.startswith(f"{file}::") for t in verdict.flaky):
                decided += index.at(iso.position, f"{file} alone at {revision}")
        for x in sorted(lane.exonerations.values(), key=lambda x: x.position):
            proof = ", ".join(f"{p.run_id[:8]}@{p.position}" for p in x.proof[:3])
            decided += index.at(x.position, f"{x.test} exonerated ({x.reason}; proof {proof})")
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
    unconfined = [p for p, e in index.by_position.items()
                  if isinstance(e, ev.ShardAttemptRecorded) and e.sandbox == "none"]  # fmt: skip
    if unconfined:
        why += (f"; {len(unconfined)} shard attempts ran without a sandbox (no bubblewrap: "
                "the suite had the gate's rights)")  # fmt: skip
    by_uid = [p for p, e in index.by_position.items()
              if isinstance(e, ev.ShardAttemptRecorded) and e.sandbox == "uid"]  # fmt: skip
    if by_uid:
        why += (f"; {len(by_uid)} shard attempts ran as a separate user, not in bubblewrap "
                "(no private /tmp, no PID namespace)")  # fmt: skip
    unique = {d.position: d for d in decided}
    return Metric(
        GATE,
        value,
        GATE_VERDICTS.get(verdict.status, "unmeasured"),
        tuple(unique[p] for p in sorted(unique)),
        why,
    )


def pin_metric(state: RunState, index: Index) -> Metric:
    started = state.started
    assert started is not None
    first = min(index.by_position) if index.by_position else 1
    # A matrix ran each interpreter's tests: every one of them is held against the pin.
    versions = [
        str(i.get("version") or "")
        for i in started.options.get("interpreters") or ()
        if isinstance(i, dict)
    ] or [started.python_version]
    ran = ", ".join(v or "unknown" for v in versions)
    if not started.runtime_pin:
        why = "the repository pins no Python (.python-version or requires-python) at head"
        return Metric(
            RUNTIME_PIN, f"python {ran}, no pin", "unmeasured", tuple(index.at(first)), why
        )
    held = [pin_satisfied(version, started.runtime_pin) for version in versions]
    value = f"python {ran} against {started.runtime_pin}"
    if None in held:
        verdict, why = "unmeasured", "the version or the pin could not be read"
    elif all(held):
        verdict = "pass"
        why = "the gate ran under the pinned Python" + (
            f" ({len(versions)} interpreters, each within the pin)" if len(versions) > 1 else ""
        )
    else:
        verdict, why = "fail", "the gate ran under another Python than the repository pins"
        if len(versions) > 1:
            outside = [v for v, ok in zip(versions, held, strict=True) if not ok]
            why += f" ({', '.join(outside)} outside it)"
    return Metric(RUNTIME_PIN, value, verdict, tuple(index.at(first, value)), why)


def gate_value(verdict: Verdict, *, causes: bool = False) -> str:
    """The gate's value, naming what decided it: introduced tests, flaky and skipped-at-head
    counts, the unmeasured files; from report format 5 (`causes`) led by the introduced
    failures' causes, with removed test files and heavier or slower files."""
    lead = headline(verdict.clusters) if causes else ""
    parts = []
    if verdict.introduced:
        parts.append(f"{len(verdict.introduced)} introduced: {some(verdict.introduced)}")
    by_dependencies = sorted(t for t, c in verdict.causes.items() if c == "dependencies")
    if by_dependencies:
        moved = f" ({some(list(verdict.moved))})" if verdict.moved else ""
        parts.append(f"{len(by_dependencies)} introduced by the dependency change{moved}")
    if verdict.introduced_by_dependencies:
        parts.append(f"{len(verdict.introduced_by_dependencies)} reported, not failed on")
    unmeasured = sorted({f for u in verdict.unmeasured for f in (u.culprits or u.files)})
    if unmeasured:
        parts.append(f"unmeasured: {some(unmeasured)}")
    if verdict.flaky:
        parts.append(f"{len(verdict.flaky)} flaky")
    if verdict.skipped_at_head:
        parts.append(f"{len(verdict.skipped_at_head)} skipped at head")
    if causes and verdict.removed_at_head:
        parts.append(f"{len(verdict.removed_at_head)} test files removed at head: "
                     f"{some(verdict.removed_at_head)}")  # fmt: skip
    if causes and verdict.out_of_memory:
        lines = [o.line() for o in verdict.out_of_memory]
        parts.append(f"{len(lines)} out of memory: {some(lines, 2)}")
    if causes and verdict.hangs:
        parts.append(f"{len(verdict.hangs)} hung: {some([h.line() for h in verdict.hangs], 2)}")
    if causes and verdict.harness_changed:
        parts.append(f"harness changed: {some(list(verdict.harness_changed), 2)}")
    if causes and verdict.figures_not_believed:
        doubted = [d.line() for d in verdict.figures_not_believed]
        parts.append(f"figures not believed: {some(doubted, 2)}")
    for what, changes in (("heavier", verdict.heavier), ("slower", verdict.slower)):
        if causes and changes:
            parts.append(f"{len(changes)} {what}: {some([c.line() for c in changes], 2)}")
    if verdict.preexisting:
        parts.append(f"{len(verdict.preexisting)} preexisting")
    if verdict.fixed:
        parts.append(f"{len(verdict.fixed)} fixed")
    if verdict.open_questions:
        parts.append("awaiting " + ", ".join(verdict.open_questions))
    tests = verdict.tests.get("head")
    counted = f"{tests} tests at head" if tests is not None else ""
    status = verdict.status
    if verdict.interpreters:  # a matrix: each interpreter's own status first
        status += " (" + ", ".join(f"{label} {v.status}" for label, v in verdict.interpreters)
        status += ")"
    return f"{status}: " + "; ".join(p for p in [lead, counted, *parts] if p)


def gate_check(evidence: Evidence) -> Metric:
    metric = gate_metric_v1(evidence.state, evidence.verdict, evidence.index)
    return Metric(metric.name, gate_value(evidence.verdict), metric.verdict, metric.events,
                  metric.why)  # fmt: skip


def runtime_pin_check(evidence: Evidence) -> Metric:
    return pin_metric(evidence.state, evidence.index)
