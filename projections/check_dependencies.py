"""The `dependencies` check: the package set head's tests ran in, against base's (what moved,
named one by one up to `LISTED`); a change never fails by itself."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from release_ledger.domain import events as ev
from release_ledger.domain.text import some
from release_ledger.projections.check_model import (
    Evidence,
    Metric,
    padded,
    release_numbers,
)

# --- dependencies: the set head's tests ran in, against base's ----------------------------------

DEPENDENCIES = "dependencies"
LISTED = 20  # changes named one by one in a metric's why


def normal_name(name: str) -> str:
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
            found[normal_name(pinned.group(1))] = pinned.group(2)
            continue
        direct = _DIRECT.match(line)
        if direct:
            found[normal_name(direct.group(1))] = f"@ {direct.group(2)}"
    return found


def _older(a: str, b: str) -> bool:
    """Is version `b` a lower release than `a` (release numbers only; unknown: no)?"""
    left, right = release_numbers(a), release_numbers(b)
    if left is None or right is None:
        return False
    n = max(len(left), len(right))
    return padded(right, n) < padded(left, n)


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
