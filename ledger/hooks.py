"""What the gate's step hooks (release builds, the owner's questions) get from its process: a
narrow context, not the process itself, so a hook reads the run and appends events without
reaching into (or importing) the gate's process manager.

A hook is called after the built-in steps have nothing left to do and before the run
completes; it returns True when it appended events, or raises `GateSuspended` to stop
without completing the run. Its work may start earlier (`EarlyWork`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from release_ledger.domain import events as ev
from release_ledger.domain.run_state import RunState
from release_ledger.ledger.options import GateOptions
from release_ledger.ledger.service import Ledger


class GateSuspended(Exception):
    """Raised by a hook: stop without `RunCompleted` (owner questions open, nobody waits)."""


class Observer(Protocol):
    """What the command line shows while the gate works (progress, notices)."""

    def notice(self, message: str) -> None: ...

    def begin(self, label: str, total: int) -> None: ...

    def advance(self, label: str, detail: str = "") -> None: ...

    def end(self, label: str) -> None: ...


class QuietObserver:
    def notice(self, message: str) -> None:
        pass

    def begin(self, label: str, total: int) -> None:
        pass

    def advance(self, label: str, detail: str = "") -> None:
        pass

    def end(self, label: str) -> None:
        pass


@dataclass
class HookContext:
    """The run a hook works on, how it was asked to run, and where to say what it does."""

    ledger: Ledger
    run_id: str
    started: ev.RunStarted
    options: GateOptions
    observer: Observer
    told: set[str] = field(default_factory=set)  # questions already announced to the user
    # The interpreter the lane's executor makes environments from on this machine (None where
    # it does not run here): what the release builds may start from before head's is made.
    interpreter: str | None = None


StepHook = Callable[[HookContext, RunState], bool]


class EarlyWork(Protocol):
    """Work a step hook does at the end that can start before it (the release builds while
    the shards run): `begin` is called before each step with the run so far, in the gate's
    thread (it starts its work in one of its own, once what it needs exists); `cancel` when
    the gate stops without reaching its hooks (Ctrl-C, the run taken over, an error): what
    it runs ends and nothing of it is recorded."""

    def begin(self, process: HookContext, state: RunState) -> None: ...

    def cancel(self) -> None: ...
