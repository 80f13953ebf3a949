"""The approval report's metrics: each a small pure function of recorded evidence.

A metric is `pass` / `fail` / `unmeasured` with its value, why, and the ledger events that
decided it. The built-in release checks are registered in `BUILTIN_CHECKS` (one entry each, in
report order); each reads only an `Evidence` — the run's folded state, its verdict, its
`ReleaseInspected` event and the artifacts those reference — never the clock, disk or network.
To add one (e.g. `dependencies` from the per-revision environments): write
`def my_check(evidence: Evidence) -> Metric` here and add one line to `BUILTIN_CHECKS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain import events as ev
from domain.run_state import RunState
from domain.verdict import Verdict

GATE = "gate"
RUNTIME_PIN = "runtime-pin"
GATE_VERDICTS = {"passed": "pass", "failed": "fail"}  # unmeasured, awaiting, parked: unmeasured


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
    name: str  # as shown (a recorded check's display name, e.g. "installation files")
    value: str
    verdict: str  # pass, fail, unmeasured
    events: tuple[Deciding, ...] = ()
    why: str = ""
    key: str = ""  # the safe key (`installation-files`); empty: the name is the key

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key or self.name,
            "name": self.name,
            "value": self.value,
            "verdict": self.verdict,
            "why": self.why,
            "events": [d.as_dict() for d in self.events],
        }


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


class Index:
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


def gate_metric_v1(state: RunState, verdict: Verdict, index: Index) -> Metric:
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


def pin_metric(state: RunState, index: Index) -> Metric:
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


# --- the current checks: one pure function of `Evidence` each ------------------------------------

CHANGELOG = "changelog"
KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def check_key(name: str) -> str:
    """The safe key of a check's display name: lower case, runs of anything but letters,
    digits, '.', '_' and '-' made one '-' (`Installation files` -> `installation-files`)."""
    return re.sub(r"[^a-z0-9._-]+", "-", name.strip().lower()).strip("-._")


@dataclass(frozen=True)
class Evidence:
    """Everything a built-in check may read: recorded facts only."""

    state: RunState
    verdict: Verdict
    index: Index
    release: ev.ReleaseInspected | None
    release_position: int | None
    artifacts: Mapping[str, bytes]

    def release_events(self, note: str = "") -> tuple[Deciding, ...]:
        return tuple(self.index.at(self.release_position, note))


def _some(items: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def gate_value(verdict: Verdict) -> str:
    """The gate's value, naming what decided it: introduced tests, flaky and skipped-at-head
    counts, the unmeasured files."""
    parts = []
    if verdict.introduced:
        parts.append(f"{len(verdict.introduced)} introduced: {_some(verdict.introduced)}")
    unmeasured = sorted({f for u in verdict.unmeasured for f in (u.culprits or u.files)})
    if unmeasured:
        parts.append(f"unmeasured: {_some(unmeasured)}")
    if verdict.flaky:
        parts.append(f"{len(verdict.flaky)} flaky")
    if verdict.skipped_at_head:
        parts.append(f"{len(verdict.skipped_at_head)} skipped at head")
    if verdict.preexisting:
        parts.append(f"{len(verdict.preexisting)} preexisting")
    if verdict.fixed:
        parts.append(f"{len(verdict.fixed)} fixed")
    if verdict.open_questions:
        parts.append("awaiting " + ", ".join(verdict.open_questions))
    tests = verdict.tests.get("head")
    counted = f"{tests} tests at head" if tests is not None else ""
    return f"{verdict.status}: " + "; ".join(p for p in [counted, *parts] if p)


def gate_check(evidence: Evidence) -> Metric:
    metric = gate_metric_v1(evidence.state, evidence.verdict, evidence.index)
    return Metric(metric.name, gate_value(evidence.verdict), metric.verdict, metric.events,
                  metric.why)  # fmt: skip


def runtime_pin_check(evidence: Evidence) -> Metric:
    return pin_metric(evidence.state, evidence.index)


def names_version(text: str, version: str) -> bool:
    """Does the text name this exact version (`1.2.0`, `v1.2.0`; not `1.2.0rc1` or `11.2.0`)?"""
    pattern = r"(?<![0-9A-Za-z.])v?" + re.escape(version) + r"(?![0-9A-Za-z]|\.[0-9]|-[0-9A-Za-z])"
    return re.search(pattern, text) is not None


def changelog_check(evidence: Evidence) -> Metric:
    """A changelog file at head names the version being released (towncrier fragments left
    unbuilt mean it was not compiled)."""
    r = evidence.release
    if r is None:
        why = "no ReleaseInspected event: head's tree was never read for this run"
        return Metric(CHANGELOG, "not inspected", "unmeasured", (), why)
    if not r.version:
        why = "head's version could not be read (no [project] version, no version tag)"
        return Metric(CHANGELOG, "version unknown", "unmeasured", evidence.release_events(), why)
    version = r.version
    named, unread = [], []
    for f in r.changelog_files:
        data = evidence.artifacts.get(f.sha256)
        if data is None:
            unread.append(f.path)
        elif names_version(data.decode("utf-8", "replace"), version):
            named.append(f.path)
    paths = [f.path for f in r.changelog_files]
    fragments = list(r.fragments)
    left = f"{len(fragments)} towncrier fragments not built ({_some(fragments)})"
    if named:
        value = f"{named[0]} names {version}"
        why = f"{', '.join(named)} at head name {version}"
        if fragments:
            value += f"; {left}"
            why += f"; {left}, for a later release"
        return Metric(CHANGELOG, value, "pass", evidence.release_events(named[0]), why)
    if unread:
        why = f"{', '.join(unread)} missing from the ledger's artifacts"
        return Metric(CHANGELOG, "unreadable", "unmeasured", evidence.release_events(), why)
    if fragments:
        value = f"{version} not in {', '.join(paths) or 'any changelog'}; {left}"
        why = f"run `towncrier build --version {version}` and commit before tagging"
        return Metric(CHANGELOG, value, "fail", evidence.release_events(), why)
    if paths:
        value = f"{', '.join(paths)} do not name {version}"
        why = f"no changelog file at head mentions {version}"
        return Metric(CHANGELOG, value, "fail", evidence.release_events(), why)
    why = (
        "no changelog at head (CHANGES, CHANGELOG, HISTORY or NEWS, with .md, .rst or .txt) "
        "and no towncrier fragments"
    )
    return Metric(CHANGELOG, "no changelog file", "unmeasured", evidence.release_events(), why)


Check = Callable[[Evidence], Metric]

# The built-in checks, in report order. Adding one is one function above and one line here.
BUILTIN_CHECKS: dict[str, Check] = {
    GATE: gate_check,
    RUNTIME_PIN: runtime_pin_check,
    CHANGELOG: changelog_check,
}
