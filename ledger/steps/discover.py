"""The `discover` step: the test files at head (and base's, for lost coverage), recorded as
`TestFilesDiscovered` with what the first plan may know of each without running it: the
files the declared invocation collects where the executor can collect (with the items it
collected in each: a parametrized file's real weight), else the file walk."""

from __future__ import annotations

from collections.abc import Sequence

from release_ledger.adapters.executors.collection import COLLECT_TIMEOUT_S, Collected
from release_ledger.domain import events as ev
from release_ledger.domain.errors import BadInput
from release_ledger.domain.order import collection_order
from release_ledger.domain.run_state import RunState
from release_ledger.ledger.background import Background
from release_ledger.ledger.harness import harness_changes
from release_ledger.ledger.steps.context import StepContext
from release_ledger.projections.next_step import Step


def discover(ctx: StepContext, state: RunState, step: Step) -> None:
    ctx.observer.notice("discovering test files at head")
    started, workspace = ctx.started, ctx.workspace
    patterns = list(ctx.options.discover) or None
    # Base's collection (its environment built first) runs while head's does: the two
    # revisions' environments are made at once, not one after the other.
    at_base = Background(lambda: _collected(ctx, started.base, patterns), "collect-base")
    try:
        files, collected_by, items = _collected(ctx, started.head, patterns)
        if files is None:
            files = workspace.test_files(started.head, patterns)
            starts = workspace.collection_starts(started.head) if patterns is None else ["."]
            order = collection_order(files, starts)
        else:  # the order the declared invocation collected them in
            order, files = files, sorted(files)
        sizes, tests = workspace.nominal_inputs(started.head, files)
        # Test files base has and head has not: lost coverage unless git pairs them
        # with a file at head by content (a rename moves its tests, it removes none).
        base_files = at_base.result().files
        if base_files is None:
            base_files = workspace.test_files(started.base, patterns)
        gone = set(base_files) - set(files)
    finally:
        workspace.release_checkouts()
    if not files:
        raise BadInput(f"no test files found at {started.head_ref} in {workspace.repo}")
    in_base_tree = workspace.files_at(started.base)
    # an installed module (`{site-packages}/...`) is in no tree: base has it if collected
    missing = [f for f in files if f not in in_base_tree and f not in base_files]
    moved = workspace.renames(started.base, started.head) if gone else {}
    renamed = {old: new for old, new in moved.items() if old in gone}
    ctx.ledger.record(
        ctx.run_id,
        ev.TestFilesDiscovered,
        files=files,
        missing_at_base=missing,
        removed_at_head=sorted(gone - set(renamed)),
        renamed_at_head=renamed,
        harness_changed=harness_changes(workspace, started.base, started.head),
        sizes=sizes,
        test_functions=tests,
        order=order,
        collected_by=collected_by,
        collected_items=dict(items),
    )


def _collected(ctx: StepContext, commit: str, patterns: Sequence[str] | None) -> Collected:
    """The test files the revision's declared invocation collects, in its environment
    (the lane's `Collector`), how they were found and the items in each; None: walk the
    files. A collector's plain `(files, how)` pair counts no items."""
    if patterns is None:
        timeout_s = min(ctx.options.timeout_s, COLLECT_TIMEOUT_S)
        return Collected(*ctx.collector.collected(commit, timeout_s, int(ctx.options.budget_mb)))
    return Collected(None, "")
