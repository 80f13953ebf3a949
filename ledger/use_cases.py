"""The application's use cases, as the command line calls them."""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters import git
from adapters.executors import Executor, build_executor, spec_for, validate_options
from adapters.executors.local import LocalExecutor
from domain import events as ev
from domain.rules import get_rule
from ledger.clarify import clarify
from ledger.gate import GateOptions, GateProcess, Observer, options_from, start, validate
from ledger.projection import project
from ledger.release import release_builds
from ledger.replay import verdict_for
from ledger.service import Ledger
from ledger.views import catch_up_after_gate


def run_gate(ledger: Ledger, options: GateOptions, observer: Observer) -> dict[str, Any]:
    """Start a gate run and drive it to a verdict; returns the verdict document."""
    validate(options)
    repo = git.repo_root(options.repo)
    recorded = validate_options(options.executor, options.executor_options)
    options = dataclasses.replace(options, repo=repo, executor_options=recorded)
    executor = build_executor(
        options.executor, repo, options.executor_options, options.environment_request
    )
    try:
        run_id = start(ledger, options)
    except BaseException:
        executor.close()
        raise
    observer.notice(f"run {run_id}")
    return _drive(ledger, run_id, executor, observer)


def resume_gate(ledger: Ledger, run_prefix: str, observer: Observer) -> dict[str, Any]:
    run_id = ledger.resolve(run_prefix)
    state = project(ledger, run_id)
    if state.started is None:
        raise ValueError(f"run {run_id} has no RunStarted event")
    options = options_from(state.started)
    validate(options)  # a run recorded with bad values is refused, not crashed
    with ledger.driving(run_id):  # one driver per run: a live holder is named, nothing appended
        executor = build_executor(
            options.executor, options.repo, options.executor_options, options.environment_request
        )
        if not state.completed:
            ledger.record(run_id, ev.RunResumed)
        return _drive(ledger, run_id, executor, observer)


def _drive(ledger: Ledger, run_id: str, executor: Executor, observer: Observer) -> dict[str, Any]:
    """Wire the gate's process manager (the one place it is wired) and run it to its end."""
    state = project(ledger, run_id)
    assert state.started is not None
    options = options_from(state.started)
    measuring = None
    if spec_for(state.started.executor).capabilities.measures_locally:
        # Pool members run shards only; files are measured (and isolated) on this machine.
        measuring = LocalExecutor(options.repo, environment_request=options.environment_request)
    try:
        process = GateProcess(
            ledger, run_id, executor, observer, measuring, hooks=[release_builds, clarify]
        )
        process.drive()
    finally:
        executor.close()
        if measuring is not None:
            measuring.close()
    notice = catch_up_after_gate(ledger)
    if notice:
        observer.notice(notice)
    return verdict_for(ledger, run_id)  # made and kept here: `ledger show` reads it next


def check_rule(name: str) -> None:
    get_rule(name)
