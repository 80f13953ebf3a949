"""Live progress on stderr with `rich`: one bar per phase, notices above the bars."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from release_ledger.ledger.vocabulary import one_line


class RichObserver:
    """Implements `ledger.gate.Observer` for a terminal (or a quiet log when not a TTY)."""

    def __init__(self, quiet: bool = False) -> None:
        self.console = Console(stderr=True, quiet=quiet)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[detail]}", markup=False),
            console=self.console,
            transient=False,
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> RichObserver:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def notice(self, message: str) -> None:
        from rich.text import Text

        line = Text("• ", style="dim")
        line.append(one_line(message), style="")  # data: never markup, never a line break
        self.progress.console.print(line, highlight=False)

    def begin(self, label: str, total: int) -> None:
        self.tasks[label] = self.progress.add_task(label, total=total, detail="")

    def advance(self, label: str, detail: str = "") -> None:
        task = self.tasks.get(label)
        if task is not None:
            self.progress.update(task, advance=1, detail=detail)

    def end(self, label: str) -> None:
        task = self.tasks.pop(label, None)
        if task is not None:
            self.progress.update(task, detail="done")
