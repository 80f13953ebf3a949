"""What every step of the gate works with: one run's lane, its ports and what it remembers
between steps (placement's reservations, the environments and content keys already seen).

`GateProcess` (`ledger/gate.py`) makes one per lane and hands it to each step's handler
(`ledger/steps/`); a step reads the run from the ledger and appends what it observed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from release_ledger.adapters.executors import Capabilities, Executor
from release_ledger.adapters.executors.collection import Collector
from release_ledger.adapters.workspace import Workspace
from release_ledger.domain import events as ev
from release_ledger.domain.execution import ShardRun
from release_ledger.domain.run_state import BASE, HEAD, RunState, lane
from release_ledger.domain.timing import file_limits, known_seconds, shard_timeout
from release_ledger.ledger.hooks import Observer
from release_ledger.ledger.options import GateOptions
from release_ledger.ledger.read_side import project
from release_ledger.ledger.result_cache import ContentKeys
from release_ledger.ledger.service import Ledger

# Builds an executor like a lane's whose environments install a given frozen package set
# (head's introduced failures run with base's packages: `ledger/steps/attribute.py`).
PinnedExecutor = Callable[[str], Executor]


@dataclass
class StepContext:
    """One lane of one run (an interpreter of the matrix, or "" for the gate's own)."""

    ledger: Ledger  # labelled with the lane's interpreter: its facts carry the label
    run_id: str
    started: ev.RunStarted
    options: GateOptions
    interpreter: str
    python_version: str  # what this lane's results are keyed by
    executor: Executor
    measuring: Executor  # measures and isolates files (the executor, or a local one)
    capabilities: Capabilities
    workspace: Workspace
    collector: Collector  # the test files the declared invocation collects (`discover`)
    observer: Observer
    pinned_executor: PinnedExecutor | None = None
    # shard -> MB a pool could place it with, if less than it asked for
    reserved: dict[str, int] = field(default_factory=dict)
    # (revision, where, key, status) of environments already recorded in this run
    environments: set[tuple[str, str, str, str]] = field(default_factory=set)
    # revision (and the sources passed by, if any) -> its content keys (`steps/keys.py`)
    content_keys: dict[str, ContentKeys | None] = field(default_factory=dict)
    measure_keys: dict[str, tuple[str, str]] | None = None  # file -> (blob, key)
    # Declared sources rejected at each revision (`reject_source.py`), passed by every run.
    skips: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def state(self) -> RunState:
        """This lane's state as the ledger holds it now."""
        return lane(project(self.ledger, self.run_id), self.interpreter)

    def commit(self, revision: str) -> str:
        return {HEAD: self.started.head, BASE: self.started.base}[revision]

    def limits(self, files: Sequence[str], known: dict[str, float]) -> dict[str, Any]:
        """A run's time limits: each file's from what it is known to take (`known`), the
        shard's from them (`domain/timing.py`); `--timeout` where nothing is known."""
        limits = file_limits(
            files, known, timeout_s=self.options.timeout_s,
            factor=self.options.time_factor, floor_s=self.options.time_floor_s,
        )  # fmt: skip
        return {"file_limits": limits,
                "timeout_s": shard_timeout(files, limits, self.options.timeout_s)}  # fmt: skip

    def alone(
        self,
        shard_id: str,
        revision: str,
        files: tuple[str, ...],
        known: dict[str, float] | None = None,
    ) -> ShardRun:
        """A run outside the plan (an isolation, an attribution): one attempt, with the room a
        file alone gets (`isolation_budget_mb`) and the time its files are known to take."""
        return ShardRun(
            run_id=self.run_id,
            shard_id=shard_id,
            attempt=1,
            revision=revision,  # type: ignore[arg-type]
            commit=self.commit(revision),
            files=files,
            command=tuple(self.started.command),
            memory_limit_mb=int(self.options.isolation_budget_mb),
            skip_sources=self.skips.get(revision, ()),
            **self.limits(files, known if known is not None else known_seconds(self.state())),
        )

    def cancel_all(self) -> None:
        """Kill every child of this lane's executors (interrupted, or the run taken over)."""
        self.executor.cancel_all()
        if self.measuring is not self.executor:
            self.measuring.cancel_all()
