"""What the gate should do next, decided from the run's projected state alone.

The gate's process manager calls this after every batch of appended events. Because the
decision reads only the ledger, a crashed or interrupted run resumes by asking again: work
already recorded is never redone, work missing is done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from release_ledger.domain.assessment import ENV_SETUP, OOM, TIMEOUT, UNPLACED
from release_ledger.domain.failures import blames_executor
from release_ledger.domain.junit import FAILING, test_id
from release_ledger.domain.order import in_order_run
from release_ledger.domain.planning import child_shard_ids, in_project_order, split_in_halves
from release_ledger.domain.run_state import BASE, HEAD, AttemptView, RunState, ShardView
from release_ledger.domain.unrunnable import Unrunnable, is_usage_error, unrunnable
from release_ledger.domain.verdict import classify, shard_unmeasured

StepKind = Literal[
    "discover", "measure", "plan", "run", "split", "isolate", "exonerate", "attribute",
    "reject-source", "in-order", "complete", "done",
]


@dataclass(frozen=True)
class RunRequest:
    shard: str
    revision: str
    files: tuple[str, ...]
    attempt: int
    retry: bool = False


@dataclass(frozen=True)
class SplitRequest:
    parent: str
    children: tuple[tuple[str, tuple[str, ...]], ...]
    reason: str


@dataclass(frozen=True)
class Step:
    kind: StepKind
    files: tuple[str, ...] = ()
    runs: tuple[RunRequest, ...] = ()
    splits: tuple[SplitRequest, ...] = ()
    isolations: tuple[tuple[str, str], ...] = ()
    # `attribute`: the introduced failures to run again; `exonerate`: those to look up
    tests: tuple[str, ...] = ()
    round: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    rejection: Unrunnable | None = None  # `reject-source`: the revision and its source
    # `in-order`: per revision, the files to run in the project's order and those it judges
    in_order: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = ()


def _files_for(state: RunState, shard: ShardView, revision: str) -> tuple[str, ...]:
    """The files to run: at base, those whose results were not reused from the cache."""
    if revision == HEAD:
        return shard.files
    return tuple(f for f in state.base_files_of(shard) if f not in shard.reused)


def pending_runs(state: RunState, rounds: int) -> list[RunRequest]:
    """Leaf shards that still need an attempt at a revision: never run, or retryable."""
    requests = []
    for shard in state.leaves():
        for revision in (HEAD, BASE):
            files = _files_for(state, shard, revision)
            if not files:
                continue
            attempts = shard.attempts[revision]
            earlier = len(shard.superseded.get(revision, ()))  # in a source rejected since
            if not attempts:
                requests.append(RunRequest(shard.id, revision, files, earlier + 1))
                continue
            latest = attempts[-1]
            # Original shards get `rounds` retries; bisection children are run once. A fault
            # the report itself pins on a file is not transient: it is not retried.
            allowed = 1 + rounds if shard.depth == 0 else 1
            if latest.assessment.culprits or latest.killed_test or _timed_out_in(latest):
                allowed = 1  # a file named, or a test ended at its known time: no blind retry
            if is_usage_error(latest):
                allowed = 1  # how pytest was invoked, the same on every try
            if not latest.assessment.measured and len(attempts) < allowed:
                requests.append(
                    RunRequest(shard.id, revision, files, earlier + len(attempts) + 1, retry=True)
                )
    return requests


def _timed_out_in(attempt: AttemptView) -> bool:
    """Killed at the shard's timeout while the plugin says one file was running: running it
    alone tells as much as running the whole shard again, which would cost the whole timeout
    again (on a first gate nothing is known, so a hang is bounded only by `--timeout`)."""
    return attempt.assessment.reason == TIMEOUT and attempt.running is not None


def named_culprits(shard: ShardView) -> tuple[str, ...]:
    """The files the evidence of a shard's latest unmeasured attempts names: a rejection that
    names a file, or the file the gate's pytest plugin says was running when the shard died."""
    named: list[str] = []
    for revision in (HEAD, BASE):
        latest = shard.latest(revision)
        if latest is None or latest.assessment.measured:
            continue
        for file in (*latest.assessment.culprits, *((latest.running,) if latest.running else ())):
            if file in shard.files and file not in named:
                named.append(file)
    return tuple(sorted(named))


def pending_splits(state: RunState) -> list[SplitRequest]:
    """Leaves still unmeasured after their attempts: split off the files the evidence names,
    each alone, from the rest (no bisection of healthy files); otherwise halve them."""
    splits = []
    for shard in state.leaves():
        problem = shard_unmeasured(state, shard)
        if problem is None or problem.reason in ("not-run", UNPLACED, ENV_SETUP):
            continue  # it failed for want of a pool member or an environment, not by its files
        if problem.revision and is_usage_error(shard.latest(problem.revision)):
            continue  # a usage error (exit 4) says how pytest was run, not which file dies
        if len(shard.files) < 2:
            continue
        named = named_culprits(shard)
        if named and len(named) < len(shard.files):
            rest = in_project_order(set(shard.files) - set(named), state.order)
            groups = [[file] for file in named] + [rest]
        else:
            groups = list(split_in_halves(shard.files, state.order))
        ids = child_shard_ids(shard.id, len(groups))
        children = tuple((cid, tuple(files)) for cid, files in zip(ids, groups, strict=True))
        splits.append(SplitRequest(shard.id, children, problem.reason))
    return splits


def files_with_new_failures(state: RunState) -> list[str]:
    """Files whose tests fail at head but did not fail at base: rerun them alone."""
    files: set[str] = set()
    for shard in state.leaves():
        if shard_unmeasured(state, shard) is not None:
            continue
        head = shard.latest(HEAD)
        base = shard.latest(BASE)
        if head is None or head.assessment.report is None:
            continue
        base_failing: set[str] = set()
        if base is not None and base.assessment.report is not None:
            base_failing = {
                test_id(c) for c in base.assessment.report.cases if c.outcome in FAILING
            }
        for case in head.assessment.report.cases:
            if case.outcome in FAILING and test_id(case) not in base_failing:
                files.add(case.file)
    return sorted(files)


def files_ended_at_their_limit(state: RunState) -> list[str]:
    """Files that, run alone at head, were ended at their time limit with a test named, or
    killed over their memory limit: rerun alone at both revisions to confirm a hang or a
    memory blow-up at head (`domain/timing.py`, `domain/resources.py`)."""
    files = set()
    for shard in state.leaves():
        head = shard.latest(HEAD)
        if len(shard.files) != 1 or head is None or head.assessment.measured:
            continue
        if head.killed_test or head.assessment.reason == OOM:
            files.add(shard.files[0])
    return sorted(files)


def pending_isolations(state: RunState) -> list[tuple[str, str]]:
    needed = []
    base_files = state.base_files
    for file in sorted({*files_with_new_failures(state), *files_ended_at_their_limit(state)}):
        for revision in (HEAD, BASE):
            if revision == BASE and file not in base_files:
                continue
            if (file, revision) not in state.isolations:
                needed.append((file, revision))
    return needed


def pending_in_order(state: RunState) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """Files with failures at both revisions whose shards did not run them in the project's
    order, not yet run in it: per revision, (revision, the files to run in order, the files
    judged), one run per revision for all of them (`domain/order.py`)."""
    basis = classify(state)
    files = basis.order_pending
    if not files:
        return ()
    dead = {f for u in basis.unmeasured for f in u.files}
    runs = []
    for revision in (HEAD, BASE):
        wanted = tuple(f for f in files if (f, revision) not in state.in_order)
        if wanted:
            runs.append((revision, in_order_run(state, revision, wanted, dead), wanted))
    return tuple(runs)


def pending_exoneration(state: RunState) -> tuple[str, ...]:
    """Head's introduced failures not yet looked up in the history and quarantine (issue 29),
    in runs that look them up (`quarantine` recorded in `RunStarted`; runs recorded before
    never do). Empty once looked up, whatever was found."""
    if state.started is None or "quarantine" not in state.started.options:
        return ()
    looked_up = set(state.looked_up or ())
    return tuple(t for t in classify(state).introduced if t not in looked_up)


def pending_attribution(state: RunState) -> tuple[str, ...]:
    """Head's introduced failures, to run again at head with base's package set, when the run
    attributes them (`attribution` on in `RunStarted`; runs recorded before never do), makes
    its environments (`--env auto`), both
    revisions' environments recorded a package list and the lists differ, and this lane has
    not attributed yet. Empty otherwise."""
    if state.attribution is not None or not state.option("attribution", False):
        return ()
    if state.option("env", "none") != "auto":
        return ()  # only an environment the gate makes can be made with base's packages
    lists: dict[str, str] = {}
    for (revision, _), e in state.environments.items():
        if e.status != "ready" or not e.packages_hash:
            return ()
        if lists.setdefault(revision, e.packages_hash) != e.packages_hash:
            return ()  # machines that disagree within a revision: no one set to pin
    if len(lists) != 2 or lists[HEAD] == lists[BASE]:
        return ()
    return classify(state).introduced


def _measure_again(state: RunState, file: str, rounds: int) -> bool:
    """A measurement the executor's infrastructure broke gets the retry rounds shards get."""
    failure = state.measure_failures[file]
    blamed = blames_executor(failure.failure_kind, failure.infrastructure_failure)
    return blamed and state.measure_retries.get(file, 0) <= rounds


SOLO_MEASURE_MODES = ("solo", "missing", "always")


def next_step(state: RunState, *, rounds: int, measure: str = "inplace") -> Step:
    if state.started is None:
        return Step("done")
    if not state.discovered:
        return Step("discover")
    unmeasured_files = tuple(
        f
        for f in state.files
        if f not in state.measured
        and (f not in state.measure_failures or _measure_again(state, f, rounds))
    )
    if state.plan is None:
        # Solo modes measure each file alone before planning; in place (the default), the
        # plan starts from reused or nominal costs and the shard runs measure the files.
        if unmeasured_files and measure in SOLO_MEASURE_MODES:
            return Step("measure", files=unmeasured_files)
        return Step("plan")
    rejection = unrunnable(state)
    if rejection is not None:
        return Step("reject-source", rejection=rejection)
    runs = pending_runs(state, rounds)
    if runs:
        round_number = max((r.attempt for r in runs), default=1)
        return Step("run", runs=tuple(runs), round=round_number)
    splits = pending_splits(state)
    if splits:
        return Step("split", splits=tuple(splits))
    isolations = pending_isolations(state)
    if isolations:
        return Step("isolate", isolations=tuple(isolations))
    in_order = pending_in_order(state)
    if in_order:
        return Step("in-order", in_order=in_order)
    exonerate = pending_exoneration(state)
    if exonerate:
        return Step("exonerate", tests=exonerate)
    attribute = pending_attribution(state)
    if attribute:
        files = tuple(sorted({t.split("::", 1)[0] for t in attribute}))
        return Step("attribute", files=files, tests=attribute)
    if not state.completed:
        return Step("complete")
    return Step("done")


ReleaseStep = Literal["distributions", "upgrade"]


def release_step(state: RunState) -> ReleaseStep | None:
    """What of the release's own evidence is still to be recorded once the tests are done
    (runs with release builds on): head's distributions, then — when head's built — the
    upgrade from base's wheel. Work recorded is never redone, so a resumed run picks up
    exactly what is missing."""
    started = state.started
    if started is None or not started.options.get("release_builds", False):
        return None
    head = state.distributions.get(HEAD)
    if head is None:
        return "distributions"
    if head[1].status == "built" and state.upgrade is None:
        return "upgrade"
    return None
