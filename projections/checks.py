"""The approval report's metrics: each a small pure function of recorded evidence.

A metric is `pass` / `fail` / `unmeasured` with its value, why, and the ledger events that
decided it. The built-in release checks are registered in `BUILTIN_CHECKS` (one entry each, in
report order); each reads only an `Evidence` — the run's folded state, its verdict, its
`ReleaseInspected`, `EnvironmentPrepared`, `DistributionsBuilt` and `UpgradeChecked` events
and the artifacts those reference — never the clock, disk or network. To add one: write
`def my_check(evidence: Evidence) -> Metric` here and add one line to `BUILTIN_CHECKS` (a new
check changes the report's table, so it comes with a new report format: see
`projections.approval`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from release_ledger.domain import events as ev
from release_ledger.domain.clusters import headline
from release_ledger.domain.run_state import RunState
from release_ledger.domain.text import some
from release_ledger.domain.verdict import Verdict

GATE = "gate"
RUNTIME_PIN = "runtime-pin"
GATE_VERDICTS = {"passed": "pass", "failed": "fail"}  # unmeasured, awaiting, parked: unmeasured
E = TypeVar("E", bound=ev.Event)


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

    def of_kind(self, kind: type[E]) -> list[tuple[int, E]]:
        """Every recorded event of one kind, with its ledger position, in ledger order."""
        return [(p, e) for p, e in sorted(self.index.by_position.items()) if isinstance(e, kind)]



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
    left = f"{len(fragments)} towncrier fragments not built ({some(fragments)})"
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


# --- dependencies: the set head's tests ran in, against base's ----------------------------------

DEPENDENCIES = "dependencies"
DISTRIBUTIONS = "distributions"
UPGRADE = "upgrade"
LISTED = 20  # changes named one by one in a metric's why


def _normal_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*===?\s*([^\s;#]+)")
_DIRECT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*@\s*(\S+)")


def packages_of(frozen: str) -> dict[str, str]:
    """A frozen package list (`pip freeze` / `uv pip freeze`) as normalised name -> version
    (a direct reference keeps its URL as `@ URL`); options and comments are left out."""
    found: dict[str, str] = {}
    for raw in frozen.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "-")):
            continue
        pinned = _PINNED.match(line)
        if pinned:
            found[_normal_name(pinned.group(1))] = pinned.group(2)
            continue
        direct = _DIRECT.match(line)
        if direct:
            found[_normal_name(direct.group(1))] = f"@ {direct.group(2)}"
    return found


def _older(a: str, b: str) -> bool:
    """Is version `b` a lower release than `a` (release numbers only; unknown: no)?"""
    left, right = _release(a), _release(b)
    if left is None or right is None:
        return False
    n = max(len(left), len(right))
    return _pad(right, n) < _pad(left, n)


@dataclass(frozen=True)
class DependencyChanges:
    added: tuple[str, ...]  # "name version"
    removed: tuple[str, ...]
    changed: tuple[str, ...]  # "name old -> new", downgrades marked
    downgraded: int

    @property
    def none(self) -> bool:
        return not (self.added or self.removed or self.changed)


def dependency_changes(base: Mapping[str, str], head: Mapping[str, str]) -> DependencyChanges:
    """What changed from base's package set to head's: added, removed, version changed."""
    added = tuple(f"{n} {head[n]}" for n in sorted(set(head) - set(base)))
    removed = tuple(f"{n} {base[n]}" for n in sorted(set(base) - set(head)))
    changed, downgraded = [], 0
    for name in sorted(set(base) & set(head)):
        if base[name] != head[name]:
            down = _older(base[name], head[name])
            downgraded += down
            changed.append(
                f"{name} {base[name]} -> {head[name]}" + (" (downgrade)" if down else "")
            )
    return DependencyChanges(added, removed, tuple(changed), downgraded)


def _latest_environments(
    evidence: Evidence, revision: str
) -> dict[str, tuple[int, ev.EnvironmentPrepared]]:
    """The latest `EnvironmentPrepared` of a revision on each machine."""
    latest: dict[str, tuple[int, ev.EnvironmentPrepared]] = {}
    for position, e in evidence.of_kind(ev.EnvironmentPrepared):
        if e.revision == revision:  # a matrix: one environment per machine and interpreter
            latest[_environment_name(e)] = (position, e)
    return latest


def _environment_name(e: ev.EnvironmentPrepared) -> str:
    """Where an environment ran: the machine, and in a matrix its interpreter too."""
    return e.where + (f" Python {e.interpreter}" if e.interpreter else "")


def _package_set(
    evidence: Evidence, revision: str
) -> tuple[dict[str, str] | None, list[tuple[int, ev.EnvironmentPrepared]], str]:
    """A revision's recorded package set (None when there is none), the events it comes from,
    and why there is none."""
    envs = sorted(_latest_environments(evidence, revision).values(), key=lambda pe: pe[0])
    if not envs:
        return None, [], f"no EnvironmentPrepared event at {revision}: no shard prepared one"
    ready = [(p, e) for p, e in envs if e.status == "ready"]
    if not ready:
        errors = "; ".join(f"{_environment_name(e)}: {e.error or 'see its log'}" for _, e in envs)
        return None, envs, f"{revision}'s environment failed ({errors})"
    listed = [(p, e) for p, e in ready if e.packages_hash]
    if not listed:
        how = ready[-1][1].how
        if how == "none":
            why = (f"the run used --env none: {revision}'s tests ran with the interpreter given "
                   "and no package list was recorded")  # fmt: skip
        elif how == "gate-interpreter":
            why = (f"{revision} is not an installable Python project: its tests ran with the "
                   "gate's interpreter and no package list was recorded")  # fmt: skip
        else:
            why = f"{revision}'s environment ({how}) recorded no package list"
        return None, ready, why
    sets: list[dict[str, str]] = []
    for _, e in listed:
        data = evidence.artifacts.get(e.packages_hash or "")
        if data is None:
            return None, listed, f"{revision}'s package list {e.packages_hash} is not in the ledger"
        sets.append(packages_of(data.decode("utf-8", "replace")))
    merged: dict[str, str] = {}
    for one in sets:
        for name, version in one.items():
            merged[name] = version if name not in merged or merged[name] == version else (
                f"{merged[name]} | {version}")  # fmt: skip
    return merged, listed, ""


def dependencies_check(evidence: Evidence) -> Metric:
    """The dependency set head's tests ran in (from its `EnvironmentPrepared` package lists)
    and what changed against base's: added, removed, version changed.

    `pass` when head's environment was prepared and its package list recorded; `unmeasured`
    when none was (`--env none`, not an installable project, a failed setup). A change is
    never `fail` by itself: the gate's tests at head already ran against exactly this set, so
    they decided whether it breaks anything; the value names every kind of change (and
    downgrades) so the owner sees them at a glance, the why lists them."""
    head, head_events, why_not = _package_set(evidence, "head")
    if head is None:
        decided = tuple(d for p, _ in head_events for d in evidence.index.at(p))
        value = "not recorded" if not head_events else "no package list at head"
        return Metric(DEPENDENCIES, value, "unmeasured", decided, why_not)
    base, base_events, base_why = _package_set(evidence, "base")
    notes = {p: f"{_environment_name(e)}: {e.packages} packages, {e.how}" for p, e in head_events}
    notes |= {p: f"{_environment_name(e)} at base: {e.packages} packages" for p, e in base_events}
    decided = tuple(d for p in sorted(notes) for d in evidence.index.at(p, notes[p]))
    machines = {_environment_name(e) for _, e in head_events}
    differs = sorted(n for n, v in head.items() if " | " in v)
    value = f"{len(head)} packages at head"
    why = f"head's tests ran with {len(head)} packages"
    if len(machines) > 1:
        why += f" on {len(machines)} machines ({', '.join(sorted(machines))})"
    if differs:
        value += f"; {len(differs)} differ between machines"
        why += f"; versions differ between machines: {some(differs, LISTED)}"
    if base is None:
        value += "; base not recorded"
        why += f"; no comparison with base: {base_why}"
        return Metric(DEPENDENCIES, value, "pass", decided, why)
    changes = dependency_changes(base, head)
    if changes.none:
        value += "; same as base"
        why += ", the same set as base's"
    else:
        parts = []
        for label, items in (("added", changes.added), ("removed", changes.removed),
                             ("changed", changes.changed)):  # fmt: skip
            if items:
                parts.append(f"{len(items)} {label} ({some(list(items), 2)})")
                why += f"; {label}: {some(list(items), LISTED)}"
        value += "; against base: " + ", ".join(parts)
        if changes.downgraded:
            value += f"; {changes.downgraded} downgraded"
    why += "; a change never fails by itself: the gate's tests at head ran against this set"
    return Metric(DEPENDENCIES, value, "pass", decided, why)


# --- distributions: head's sdist and wheel ------------------------------------------------------


def normal_version(text: str) -> str:
    """A version in a comparable form: `v1.2` = `1.2.0`, `1.2.0-RC1` = `1.2.0rc1`,
    `1.0-1` = `1.0.post1` (PEP 440 normalisation of the common spellings)."""
    v = text.strip().lower()
    v = v[1:] if v.startswith("v") else v
    v = re.sub(r"[-_.]?(alpha|a)[-_.]?(?=\d|$)", "a", v)
    v = re.sub(r"[-_.]?(beta|b)[-_.]?(?=\d|$)", "b", v)
    v = re.sub(r"[-_.]?(rc|c|pre|preview)[-_.]?(?=\d|$)", "rc", v)
    v = re.sub(r"[-_.]?(post|rev|r)[-_.]?(?=\d|$)", ".post", v)
    v = re.sub(r"-(\d+)$", r".post\1", v)
    v = re.sub(r"[-_.]?dev[-_.]?(?=\d|$)", ".dev", v)
    match = re.match(r"^(\d+(?:\.\d+)*)(.*)$", v)
    if match is None:
        return v
    release = [int(x) for x in match.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return ".".join(map(str, release)) + match.group(2)


def _not_built_why(evidence: Evidence) -> str:
    started = evidence.state.started
    assert started is not None
    builds = started.options.get("release_builds")
    if builds is None:
        return ("the run was recorded before the gate built release files (no "
                "DistributionsBuilt event)")  # fmt: skip
    if builds is False:
        return "the gate ran with --no-release-builds"
    if not evidence.state.completed:
        return "not built yet: they are built once the tests are done"
    return "no DistributionsBuilt event at head: the run completed without release builds"


def _head_build(evidence: Evidence) -> tuple[int, ev.DistributionsBuilt] | None:
    builds = [(p, e) for p, e in evidence.of_kind(ev.DistributionsBuilt) if e.revision == "head"]
    return builds[-1] if builds else None


def _build_problems(
    built: ev.DistributionsBuilt, release: ev.ReleaseInspected | None
) -> tuple[list[str], list[str], list[str]]:
    """(what fails, what is unmeasured, notes) about head's built files."""
    fails: list[str] = []
    unknown: list[str] = []
    notes: list[str] = []
    sdists = [f for f in built.files if f.type == "sdist"]
    wheels = [f for f in built.files if f.type == "wheel"]
    if len(sdists) != 1 or len(wheels) != 1:
        fails.append(f"{len(sdists)} sdists and {len(wheels)} wheels, not one of each")
    for f in built.files:
        if not f.name or not f.version:
            fails.append(f"{f.filename} has no name or version in its metadata")
    names = sorted({_normal_name(f.name) for f in built.files if f.name})
    versions = sorted({f.version for f in built.files if f.version})
    if len(names) > 1:
        fails.append(f"the files name different projects ({', '.join(names)})")
    if len({normal_version(v) for v in versions}) > 1:
        fails.append(f"the files carry different versions ({', '.join(versions)})")
    project = release.project if release is not None else None
    if project and names and any(n != _normal_name(project) for n in names):
        fails.append(f"the files are named {names[0]}, the project {project}")
    wanted = release.version if release is not None else None
    if not wanted:
        unknown.append("the version being released is unknown (no [project] version, no "
                       "version tag), so the files' version could not be compared")  # fmt: skip
    elif versions and any(normal_version(v) != normal_version(wanted) for v in versions):
        fails.append(f"version mismatch: the files say {', '.join(versions)}, the release is "
                     f"{wanted}")  # fmt: skip
    for f in built.files:
        if f.name and not f.description:
            fails.append(f"{f.filename} has no README (long description) in its metadata")
        elif f.readme == "failed":
            fails.append(f"{f.filename}: the README does not render ({built.readme_check})")
        elif f.readme == "warned":
            notes.append(f"{f.filename}: {built.readme_check} warned")
        elif not f.readme and f.description:
            why = built.readme_error or "not checked"
            unknown.append(f"{f.filename}: the README was not checked ({why})")
    return fails, unknown, notes


def distributions_check(evidence: Evidence) -> Metric:
    """Head's sdist and wheel built from a clean checkout, with one name, the version being
    released, and a README that renders (`twine check`); both files' sha256 in the why."""
    found = _head_build(evidence)
    if found is None:
        return Metric(DISTRIBUTIONS, "not built", "unmeasured", (), _not_built_why(evidence))
    position, built = found
    if built.status == "not-packaged":
        why = f"head is not a packaged Python project ({built.error}): there is nothing to build"
        return Metric(DISTRIBUTIONS, "not packaged", "unmeasured",
                      tuple(evidence.index.at(position)), why)  # fmt: skip
    if built.status == "error":
        why = f"the gate could not build head's distributions (its own failure): {built.error}"
        return Metric(DISTRIBUTIONS, "not built (gate error)", "unmeasured",
                      tuple(evidence.index.at(position, built.error)), why)  # fmt: skip
    if built.status == "failed":
        log = (
            f"; the build log's end is artifact {built.log_tail_hash}"
            if built.log_tail_hash
            else ""
        )
        return Metric(
            DISTRIBUTIONS,
            f"build failed: {built.error}",
            "fail",
            tuple(evidence.index.at(position, built.error)),
            f"head's sdist and wheel did not build ({built.how or 'PEP 517'}){log}",
        )
    fails, unknown, notes = _build_problems(built, evidence.release)
    names = ", ".join(f.filename for f in built.files)
    hashes = "; ".join(f"{f.filename} sha256 {f.sha256}" for f in built.files)
    made = "reused from the build cache" if built.reused else f"built in {built.seconds:.1f}s"
    how = f"{built.how}, Python {built.python_version}, {made}"
    decided = tuple(evidence.index.at(position, names))
    if fails:
        value = "; ".join(fails[:2]) + (f" (+{len(fails) - 2} more)" if len(fails) > 2 else "")
        why = "; ".join(fails + unknown) + f" — {names} ({how}); {hashes}"
        if built.check_output_hash:
            why += f"; {built.readme_check} output is artifact {built.check_output_hash}"
        return Metric(DISTRIBUTIONS, value, "fail", decided, why)
    version = next((f.version for f in built.files if f.version), "")
    project = next((f.name for f in built.files if f.name), "")
    readme = f"README renders ({built.readme_check})" if built.readme_check else "README"
    if unknown:
        return Metric(
            DISTRIBUTIONS,
            f"{project} {version}: {names}; {'; '.join(unknown)}",
            "unmeasured",
            decided,
            "; ".join(unknown) + f" — {how}; {hashes}",
        )
    value = f"{project} {version}: {names}; {readme}" + "".join(f"; {n}" for n in notes)
    why = (f"one sdist and one wheel of {project} {version}, the version being released, "
           f"whose {readme} ({how}); {hashes}")  # fmt: skip
    if built.check_output_hash:
        why += f"; {built.readme_check} output is artifact {built.check_output_hash}"
    return Metric(DISTRIBUTIONS, value, "pass", decided, why)


# --- upgrade: base's wheel, then head's ---------------------------------------------------------


def upgrade_check(evidence: Evidence) -> Metric:
    """Base's wheel installed, then head's over it, in a fresh environment: head's packages
    import and the installed version is head's."""
    head = _head_build(evidence)
    upgrades = evidence.of_kind(ev.UpgradeChecked)
    if not upgrades:
        if head is None:
            return Metric(UPGRADE, "not tried", "unmeasured", (), _not_built_why(evidence))
        position, built = head
        decided = tuple(evidence.index.at(position))
        if built.status == "not-packaged":
            why = "head is not a packaged Python project: there is no wheel to upgrade to"
            return Metric(UPGRADE, "not packaged", "unmeasured", decided, why)
        if built.status in ("failed", "error"):
            why = "head's distributions did not build: there is no wheel to upgrade to"
            return Metric(UPGRADE, "no head wheel", "unmeasured", decided, why)
        return Metric(UPGRADE, "not tried", "unmeasured", decided, _not_built_why(evidence))
    position, u = upgrades[-1]
    base_builds = [(p, e) for p, e in evidence.of_kind(ev.DistributionsBuilt)
                   if e.revision == "base"]  # fmt: skip
    positions = [position] + ([base_builds[-1][0]] if base_builds else [])
    positions += [head[0]] if head is not None else []
    decided = tuple(d for p in sorted(positions) for d in evidence.index.at(p))
    if u.skipped:
        return Metric(UPGRADE, "not tried", "unmeasured", decided, u.skipped)
    steps = {s.step: s for s in u.steps}
    log = f"; the log's end is artifact {u.log_tail_hash}" if u.log_tail_hash else ""
    base_step = steps.get("install base")
    if base_step is None or base_step.exit_code != 0:
        error = base_step.error if base_step else "not run"
        why = f"base's wheel {u.base_wheel} did not install ({error}): nothing to upgrade{log}"
        return Metric(UPGRADE, "base did not install", "unmeasured", decided, why)
    wanted = ""
    if head is not None:
        wanted = next((f.version for f in head[1].files if f.type == "wheel"), "")
    before = u.version_before or "?"
    after = u.version_after or "?"
    project = u.project or "the project"
    fails: list[str] = []
    up = steps.get("upgrade to head")
    if up is None or up.exit_code != 0:
        fails.append(
            f"installing head's wheel over base's failed ({up.error if up else 'not run'})"
        )
    else:
        if u.version_after is None:
            fails.append(f"{project} is not installed after the upgrade")
        elif wanted and normal_version(u.version_after) != normal_version(wanted):
            fails.append(f"{project} {u.version_after} installed, not head's {wanted}")
        broken = sorted(f"{m}: {r}" for m, r in u.imports.items() if r != "ok")
        if broken:
            fails.append("import failed: " + some(broken, 3))
        check = steps.get("pip check")
        if check is not None and check.exit_code != 0:
            fails.append(f"pip check reports broken requirements ({check.error})")
    how = f"{u.how}, Python {u.python_version}" + (", reused" if u.reused else "")
    if head is not None:
        recorded = next((f.sha256 for f in head[1].files if f.type == "wheel"), "")
        if recorded and u.head_wheel_sha256 and recorded != u.head_wheel_sha256:
            how += "; head's wheel was rebuilt for it (its sha256 differs from the one recorded)"
    if fails:
        value = f"{project} {before} -> {after}: " + "; ".join(fails)
        return Metric(
            UPGRADE,
            value,
            "fail",
            decided,
            "; ".join(fails) + f" ({u.base_wheel} then {u.head_wheel}; {how}){log}",
        )
    imported = ", ".join(sorted(u.imports)) or "no top-level package"
    value = f"{project} {before} -> {after}; imports {imported}"
    why = (
        f"{u.base_wheel} installed, then {u.head_wheel} over it, in a fresh environment "
        f"({how}): {project} {after} installed, {imported} imported, pip check clean"
    )
    return Metric(UPGRADE, value, "pass", decided, why)


Check = Callable[[Evidence], Metric]

# The built-in checks, in report order (format 3). Adding one is one function above, one line
# here, and a new report format in `projections.approval` (issued reports keep theirs).
BUILTIN_CHECKS: dict[str, Check] = {
    GATE: gate_check,
    RUNTIME_PIN: runtime_pin_check,
    DEPENDENCIES: dependencies_check,
    DISTRIBUTIONS: distributions_check,
    UPGRADE: upgrade_check,
    CHANGELOG: changelog_check,
}

# The checks of each report format that has built-in checks (issued reports re-derive by it).
CHECKS_OF_FORMAT: dict[int, tuple[str, ...]] = {
    2: (GATE, RUNTIME_PIN, CHANGELOG),
    3: tuple(BUILTIN_CHECKS),
    4: tuple(BUILTIN_CHECKS),  # the gate's why also tells skips for a missing module
    5: tuple(BUILTIN_CHECKS),  # the gate's value leads with the failures' causes
    6: tuple(BUILTIN_CHECKS),  # a dynamic version is the built wheel's
}
