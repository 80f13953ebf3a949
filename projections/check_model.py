"""What every approval metric is made of: a `Metric` and the events that decided it
(`Deciding`), the position `Index` over the report's events, and the `Evidence` a built-in
check reads (recorded facts only). The checks themselves are in `projections/check_*.py`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from release_ledger.domain import events as ev
from release_ledger.domain.run_state import RunState
from release_ledger.domain.verdict import Verdict

E = TypeVar("E", bound=ev.Event)
KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


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


def release_numbers(text: str) -> tuple[int, ...] | None:
    """A version's release numbers (`3.12.0rc1` -> (3, 12, 0)); None when it starts otherwise."""
    parts = []
    for piece in text.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            return None
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break  # 3.12.0rc1: compare the release numbers only
    return tuple(parts)


def padded(v: tuple[int, ...], n: int) -> tuple[int, ...]:
    return v + (0,) * (n - len(v))
