"""Running totals of the views (`projections.read_models.Summary`), kept as run rows come and
go: the shares of the rows a write adds are added, those of the rows it deletes taken off.
Both views stores (SQLite and PostgreSQL) gather the changes here and write them in their own
dialect, so a total read anywhere is the one a rebuild would give.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

Row = tuple[Any, ...]


class SourceSpec(Protocol):
    @property
    def name(self) -> str: ...


class SummarySpec(Protocol):
    """What a store needs of a summary table besides its columns (`TableSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> SourceSpec: ...

    @property
    def key(self) -> tuple[str, ...]: ...

    @property
    def totals(self) -> tuple[str, ...]: ...

    @property
    def key_positions(self) -> tuple[int, ...]: ...

    @property
    def share(self) -> Callable[[Row], tuple[int, ...]]: ...


def is_summary(table: object) -> bool:
    return hasattr(table, "share")


class Changes:
    """The change to each summary's totals, by key, from rows written and deleted."""

    def __init__(self, summaries: Sequence[SummarySpec]) -> None:
        self.summaries = tuple(summaries)
        self.by_summary: dict[str, dict[Row, list[int]]] = {s.name: {} for s in summaries}

    def add(self, table: str, rows: Iterable[Row], sign: int = 1) -> None:
        """Count `rows` of `table` in (+1) or out (-1) of every summary of it."""
        fed = [s for s in self.summaries if s.source.name == table]
        if not fed:
            return
        rows = list(rows)
        for summary in fed:
            into = self.by_summary[summary.name]
            positions, share = summary.key_positions, summary.share
            for row in rows:
                key = tuple(row[i] for i in positions)
                if None in key:
                    continue
                shares = share(row)
                held = into.get(key)
                if held is None:
                    into[key] = [sign * x for x in shares]
                else:
                    for i, x in enumerate(shares):
                        held[i] += sign * x

    def rows(self, summary: SummarySpec, *, nonzero: bool) -> list[Row]:
        """(key..., change...) in key order; with `nonzero`, only keys whose totals change."""
        changed = self.by_summary[summary.name]
        return [
            (*key, *totals)
            for key, totals in sorted(changed.items(), key=lambda kv: repr(kv[0]))
            if not nonzero or any(totals)
        ]

    def keys(self, summary: SummarySpec) -> list[Row]:
        return sorted(self.by_summary[summary.name], key=repr)

    def clear(self) -> None:
        for changed in self.by_summary.values():
            changed.clear()
