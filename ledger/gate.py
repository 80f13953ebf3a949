"""The gate's process manager: a loop that asks what to do next and hands each step to its
handler (`ledger/steps/`, one module per kind of step).

Every observation is appended to the ledger as it happens, and every decision about what to
do next comes from `projections.next_step` over the events appended so far — the same fold
an auditor replays. Interrupting the gate loses nothing: `ledger resume RUN` asks the same
question of the same ledger and does only what is missing.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from release_ledger.adapters.executors import Executor, spec_for
from release_ledger.adapters.executors.collection import Collector, ExecutorCollector
from release_ledger.adapters.store_errors import LeaseLost
from release_ledger.adapters.workspace import GitWorkspace, Workspace
from release_ledger.domain import events as ev
from release_ledger.domain.errors import BadInput
from release_ledger.domain.run_state import BASE, HEAD, lane
from release_ledger.domain.verdict import Verdict
from release_ledger.ledger.hooks import (
    EarlyWork,
    GateSuspended,
    HookContext,
    Observer,
    QuietObserver,
    StepHook,
)
from release_ledger.ledger.options import GateOptions, options_from
from release_ledger.ledger.read_side import project, verdict_of
from release_ledger.ledger.service import Ledger
from release_ledger.ledger.steps import HANDLERS
from release_ledger.ledger.steps.context import PinnedExecutor, StepContext
from release_ledger.ledger.steps.reject_source import skipped_sources
from release_ledger.projections.next_step import next_step


def _tool_version() -> str:
    """The installed release-ledger version, recorded in every `RunStarted`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("release-ledger")
    except PackageNotFoundError:
        return "unknown"


TOOL_VERSION = _tool_version()


class GateInterrupted(Exception):
    """Ctrl-C or SIGTERM: children killed, `RunInterrupted` recorded."""


# --- starting -------------------------------------------------------------------------------


def warnings_for(options: GateOptions, workspace: Workspace | None = None) -> list[str]:
    """What the user should know before the gate starts (nothing here stops it)."""
    try:
        workspace = workspace or GitWorkspace(options.repo)
        changed = workspace.uncommitted_changes()
        if not changed:
            return []
        head = workspace.resolve(options.head)
    except BadInput:
        return []  # the gate itself says what is wrong with the repository
    return [
        f"warning: {changed} tracked file(s) in {workspace.repo} have uncommitted changes; "
        f"the gate tests the committed --head {options.head} ({head[:12]}), not the working tree"
    ]


def start(ledger: Ledger, options: GateOptions, workspace: Workspace | None = None) -> str:
    """Resolve revisions and append `RunStarted` (with the release's own facts); returns
    the new run id. The options are validated once, by the composition root."""
    workspace = workspace or GitWorkspace(options.repo)
    repo = workspace.repo
    head = workspace.resolve(options.head)
    base = workspace.resolve(options.base)
    if head == base:
        raise BadInput(
            f"--base {options.base} and --head {options.head} are the same commit {head[:12]}: "
            "nothing to compare"
        )
    run_id = ledger.new_run_id()
    started = ledger.make(
        ev.RunStarted,
        run_id,
        repo=str(repo),
        head_ref=options.head,
        base_ref=options.base,
        head=head,
        base=base,
        rule=options.rule,
        executor=options.executor,
        command=list(options.command),
        options=options.recorded(),
        tool_version=TOOL_VERSION,
        python_version=".".join(str(v) for v in sys.version_info[:3]),
        runtime_pin=workspace.runtime_pin(head),
    )
    facts = workspace.release_facts(head, base, options.head)
    inspected = ledger.make(ev.ReleaseInspected, run_id, **facts.fields)
    ledger.append(run_id, [started, inspected], artifacts=facts.artifacts)
    return run_id


# --- the process manager ----------------------------------------------------------------------


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C in the main thread, so one path handles both."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class GateProcess:
    """Drives one run to its conclusion from whatever its ledger already holds: asks
    `next_step`, hands the step to its handler (`ledger/steps/`), and asks again.

    Everything it needs comes in through the constructor (`ledger/bootstrap/gate.py` wires it):
    the executor, the one that measures and isolates files (the same one unless the
    executor's capabilities say files are measured locally), the workspace (the repository's
    commits), the collector (the files the declared invocation collects; by default the
    executor's), and `hooks` — extra decisions (owner questions, ...) run after the built-in
    steps have nothing to do and before the run completes; each returns True when it
    appended events.
    """

    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        executor: Executor,
        observer: Observer | None = None,
        measuring_executor: Executor | None = None,
        hooks: Sequence[StepHook] = (),
        interpreter: str = "",
        finish: bool = True,
        pinned_executor: PinnedExecutor | None = None,
        workspace: Workspace | None = None,
        collector: Collector | None = None,
        early: Sequence[EarlyWork] = (),
    ) -> None:
        # One interpreter's lane of a matrix gate: its facts carry the label, it decides from
        # its own state, and only the lane that `finish`es runs the hooks and completes the run.
        self.finish = finish
        self.hooks = tuple(hooks)
        self.early = tuple(early)
        state = lane(project(ledger, run_id), interpreter)
        if state.started is None:
            raise BadInput(f"run {run_id} has no RunStarted event")
        started = state.started
        # What this lane's results are keyed by: its interpreter's version (the gate's own
        # when the run has no matrix).
        recorded = {
            str(i.get("label")): str(i.get("version") or "")
            for i in started.options.get("interpreters") or ()
            if isinstance(i, dict)
        }
        lane_ledger = ledger.for_interpreter(interpreter) if interpreter else ledger
        self.step_context = StepContext(
            ledger=lane_ledger,
            run_id=run_id,
            started=started,
            options=options_from(started),
            interpreter=interpreter,
            python_version=recorded.get(interpreter) or started.python_version,
            executor=executor,
            measuring=measuring_executor or executor,
            capabilities=spec_for(started.executor).capabilities,
            workspace=workspace or GitWorkspace(Path(started.repo)),
            collector=collector or ExecutorCollector(executor),
            observer=observer or QuietObserver(),
            pinned_executor=pinned_executor,
            environments={
                (e.revision, e.where, e.key, e.status) for e in state.environments.values()
            },
        )
        ctx = self.step_context
        # What the hooks get of this process (`ledger/hooks.py`).
        self.context = HookContext(
            ctx.ledger, run_id, started, ctx.options, ctx.observer,
            interpreter=getattr(executor, "python", None) if ctx.capabilities.runs_locally
            else None,
        )  # fmt: skip

    def drive(self) -> Verdict:
        ctx = self.step_context
        with _interruptible(), ctx.ledger.driving(ctx.run_id):
            try:
                return self._loop()
            except LeaseLost:
                # Another process took the run over: stop here, appending nothing more.
                ctx.cancel_all()
                self._cancel_early()
                raise
            except BadInput as error:
                # Found only mid-run (e.g. a reused measurement over the budget): the run
                # says why it stopped, so it is not left looking like it is still running.
                self._cancel_early()
                ctx.ledger.record(ctx.run_id, ev.RunInterrupted, reason=f"bad input: {error}")
                raise
            except KeyboardInterrupt:
                ctx.cancel_all()
                self._cancel_early()
                ctx.ledger.record(ctx.run_id, ev.RunInterrupted, reason="interrupted by signal")
                raise GateInterrupted(ctx.run_id) from None
            finally:
                self._cancel_early()  # work its hook did not take (nothing if it did)

    def _cancel_early(self) -> None:
        for work in self.early:
            work.cancel()

    def _loop(self) -> Verdict:
        ctx = self.step_context
        while True:
            run = project(ctx.ledger, ctx.run_id)
            state = lane(run, ctx.interpreter)
            step = next_step(state, rounds=ctx.options.rounds, measure=ctx.options.measure)
            ctx.skips = {r: skipped_sources(state, r) for r in (HEAD, BASE)}
            if step.kind == "complete":
                if not self.finish:
                    return verdict_of(run)  # this lane is done; the matrix goes on
                try:
                    if any(hook(self.context, run) for hook in self.hooks):
                        continue
                except GateSuspended:
                    return verdict_of(project(ctx.ledger, ctx.run_id))
                ctx.ledger.record(ctx.run_id, ev.RunCompleted)
                continue
            if step.kind == "done":
                return verdict_of(run)
            for work in self.early:  # started once what it needs exists
                work.begin(self.context, run)
            HANDLERS[step.kind](ctx, state, step)
