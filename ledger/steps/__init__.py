"""The gate's steps: one handler per kind of step `projections.next_step` asks for, each in
the module named after it. `GateProcess` (`ledger/gate.py`) looks the handler up here.

A handler gets the lane's `StepContext`, the lane's state the step was decided from, and the
step; it runs what the step names and appends what it observed (nothing else decides).
"""

from __future__ import annotations

from collections.abc import Callable

from release_ledger.domain.run_state import RunState
from release_ledger.ledger.steps.attribute import attribute
from release_ledger.ledger.steps.context import StepContext
from release_ledger.ledger.steps.discover import discover
from release_ledger.ledger.steps.exonerate import exonerate
from release_ledger.ledger.steps.in_order import in_order
from release_ledger.ledger.steps.isolate import isolate
from release_ledger.ledger.steps.measure import measure
from release_ledger.ledger.steps.plan import plan
from release_ledger.ledger.steps.reject_source import reject
from release_ledger.ledger.steps.run import run
from release_ledger.ledger.steps.split import split
from release_ledger.projections.next_step import Step, StepKind

Handler = Callable[[StepContext, RunState, Step], None]

HANDLERS: dict[StepKind, Handler] = {
    "discover": discover,
    "measure": measure,
    "plan": plan,
    "run": run,
    "split": split,
    "isolate": isolate,
    "exonerate": exonerate,
    "attribute": attribute,
    "reject-source": reject,
    "in-order": in_order,
}
