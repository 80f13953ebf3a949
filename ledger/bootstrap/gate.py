"""The composition root's gate half (`ledger/bootstrap/__init__.py` opens the ledger): a
gate's options checked once, each lane's executors built (and its collector over them), the
workspace made, and the gate's process manager wired with them and the observer the command
line passes in.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, NewType

from release_ledger.adapters.executors import Executor, build_executor, spec_for, validate_options
from release_ledger.adapters.executors.collection import ExecutorCollector
from release_ledger.adapters.executors.env_installer import find_uv
from release_ledger.adapters.executors.local import LocalExecutor
from release_ledger.adapters.interpreters import available
from release_ledger.adapters.machine import memory_mb
from release_ledger.adapters.workspace import GitWorkspace, Workspace
from release_ledger.domain import events as ev
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import EnvironmentRequest
from release_ledger.ledger.clarify import clarify
from release_ledger.ledger.gate import GateProcess, Observer, start
from release_ledger.ledger.options import GateOptions, options_from, validate
from release_ledger.ledger.projection import project
from release_ledger.ledger.release import ReleaseWork
from release_ledger.ledger.replay import verdict_for
from release_ledger.ledger.service import Ledger
from release_ledger.ledger.settings import runs_locally
from release_ledger.ledger.steps.context import PinnedExecutor
from release_ledger.ledger.views import catch_up_after_gate

# --- a gate's options, checked once ------------------------------------------------------------

# Options `checked` has accepted: the repository resolved, every value in range, the
# executor's own options validated, the machine's memory read where shards run here.
Checked = NewType("Checked", GateOptions)


def checked(options: GateOptions) -> Checked:
    """Every value checked before the ledger is even opened (one clear `BadInput` else)."""
    validate(options)
    workspace = GitWorkspace(options.repo)
    recorded = validate_options(options.executor, options.executor_options)
    # Shards and files alone that run here never plan for more memory than this machine has.
    machine = memory_mb() if runs_locally(options.executor) else None
    return Checked(
        dataclasses.replace(
            options, repo=workspace.repo, executor_options=recorded, machine_mb=machine
        )
    )


# --- the gate --------------------------------------------------------------------------------


def run_gate(ledger: Ledger, options: Checked, observer: Observer) -> dict[str, Any]:
    """Start a gate run and drive it to a verdict; returns the verdict document."""
    for said in [*options.told_settings(), *options.lowered()]:
        observer.notice(said)
    workspace = GitWorkspace(options.repo)
    lanes = _lanes(options, ledger, _base_commit(workspace, options.base))  # checked first
    try:
        run_id = start(ledger, options, workspace)
    except BaseException:
        _close(lanes)
        raise
    observer.notice(f"run {run_id}")
    return _drive(ledger, run_id, lanes, observer, workspace)


def resume_gate(ledger: Ledger, run_prefix: str, observer: Observer) -> dict[str, Any]:
    run_id = ledger.resolve(run_prefix)
    state = project(ledger, run_id)
    if state.started is None:
        raise ValueError(f"run {run_id} has no RunStarted event")
    options = options_from(state.started)
    validate(options)  # a run recorded with bad values is refused, not crashed
    with ledger.driving(run_id):  # one driver per run: a live holder is named, nothing appended
        lanes = _lanes(options, ledger, state.started.base)
        if not state.completed:
            ledger.record(run_id, ev.RunResumed)
        return _drive(ledger, run_id, lanes, observer, GitWorkspace(options.repo))


@dataclasses.dataclass
class Lane:
    """One interpreter's executors (the matrix's label, or "" for the gate's interpreter)."""

    interpreter: str
    executor: Executor
    measuring: Executor | None
    pinned: PinnedExecutor | None = None


def _base_commit(workspace: Workspace, base: str) -> str:
    """Base's commit ("" where it cannot be resolved: `start` then says why)."""
    try:
        return workspace.resolve(base)
    except BadInput:
        return ""


def _lanes(options: GateOptions, ledger: Ledger, base: str) -> list[Lane]:
    """An executor (and, for a pool, a local measuring one) per interpreter of the matrix;
    each keeps the ledger's own folder out of the suite's sight, and trusts only `base`'s
    builds with the installers' shared caches (head's get their own)."""
    requests = [("", options.environment_request)]
    if options.interpreters:
        requests = [
            (i["label"], options.lane_request(_located(i, options)))
            for i in options.interpreters
        ]
    hidden = ledger.private_folders()
    trusted = (base,) if base else ()
    requests = [
        (label, r.model_copy(update={"hidden": hidden, "trusted_commits": trusted}))
        for label, r in requests
    ]
    lanes: list[Lane] = []
    try:
        for label, request in requests:
            executor = build_executor(
                options.executor, options.repo, options.executor_options, request
            )
            measuring = None
            if spec_for(options.executor).capabilities.measures_locally:
                # Pool members run shards only; files are measured (and isolated) here.
                measuring = LocalExecutor(
                    options.repo,
                    python=request.python or sys.executable,
                    environment_request=request,
                )
            lanes.append(Lane(label, executor, measuring, _pinned(options, request)))
    except BaseException:
        _close(lanes)
        raise
    return lanes


def _pinned(options: GateOptions, request: EnvironmentRequest) -> PinnedExecutor | None:
    """How this lane builds an executor whose environments install a given package set
    (head with base's packages, for attribution): where the lane runs its isolations."""
    if request.mode != "auto":
        return None

    def build(packages: str) -> Executor:
        pinned = request.model_copy(update={"pinned": packages})
        if spec_for(options.executor).capabilities.measures_locally:
            return LocalExecutor(
                options.repo, python=pinned.python or sys.executable, environment_request=pinned
            )
        return build_executor(options.executor, options.repo, options.executor_options, pinned)

    return build


def _located(interpreter: dict[str, str], options: GateOptions) -> dict[str, str]:
    """A recorded interpreter where this machine has it (a resumed run may be elsewhere)."""
    path = interpreter.get("path", "")
    if not path or os.access(path, os.X_OK) or not runs_locally(options.executor):
        return interpreter
    found = available(find_uv(), wanted=[interpreter["label"]]).get(interpreter["label"])
    if found is None:
        raise BadInput(f"Python {interpreter['label']} of this run is not on this machine")
    return dict(interpreter, path=found.path)


def _close(lanes: list[Lane]) -> None:
    for lane in lanes:
        lane.executor.close()
        if lane.measuring is not None:
            lane.measuring.close()


def _drive(
    ledger: Ledger, run_id: str, lanes: list[Lane], observer: Observer, workspace: Workspace
) -> dict[str, Any]:
    """Wire the gate's process manager (the one place it is wired) and run it to its end:
    each interpreter's lane in turn, the last one finishing the run (hooks, completion)."""
    try:
        for index, lane in enumerate(lanes):
            last = index == len(lanes) - 1
            # The release builds start while the last lane's shards run; its hook waits for them.
            release = ReleaseWork()
            if lane.interpreter and len(lanes) > 1:
                observer.notice(f"Python {lane.interpreter}")
            process = GateProcess(
                ledger,
                run_id,
                lane.executor,
                observer,
                lane.measuring,
                hooks=[release, clarify] if last else [],
                early=[release] if last else [],
                interpreter=lane.interpreter,
                finish=last,
                pinned_executor=lane.pinned,
                workspace=workspace,
                collector=ExecutorCollector(lane.executor),  # collects in the lane's environment
            )
            process.drive()
    finally:
        _close(lanes)
    notice = catch_up_after_gate(ledger)
    if notice:
        observer.notice(notice)
    return verdict_for(ledger, run_id)  # made and kept here: `ledger show` reads it next
