"""The `run` step: a round of shard runs, base's and head's in one pool, the longest first, a
head run started as soon as its time limits can be set (`Round`), each recorded as it lands
(`ledger/steps/attempts.py`); base's results reused by content where an earlier run has them,
and, on a pool, the shards placed first (`ledger/steps/placement.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.domain.memory import attempt_limit_mb
from release_ledger.domain.run_state import BASE, HEAD, RunState
from release_ledger.domain.timing import estimated_seconds, known_seconds
from release_ledger.ledger.steps.attempts import record_attempt
from release_ledger.ledger.steps.context import StepContext
from release_ledger.ledger.steps.parallel import run_parallel
from release_ledger.ledger.steps.placement import place_round, pool_detail
from release_ledger.ledger.steps.reuse import reuse_baselines
from release_ledger.projections.next_step import RunRequest, Step


def run(ctx: StepContext, state: RunState, step: Step) -> None:
    requests = reuse_baselines(ctx, list(step.runs))
    if not requests:
        return
    members = _place(ctx, state, requests, step.round)
    # Base first where all else is equal: a head run may wait for its base run (`Round`).
    ordered = sorted(requests, key=lambda r: r.revision != BASE)
    known = known_seconds(state)
    runs = [_shard_run(ctx, state, r, members.get(r.shard), known) for r in ordered]
    if ctx.capabilities.places_on_pool:
        # A pool with no room for a shard this round: an unmeasured attempt, so the
        # retry rounds (and bisection) bound the wait instead of looping on placement.
        unplaced_detail = pool_detail(ctx.state())
        for unplaced in [r for r in runs if r.member is None]:
            record_attempt(
                ctx, unplaced, Observation.failed("unplaced", "unplaced", unplaced_detail)
            )
        runs = [r for r in runs if r.member is not None]
    if not runs:
        return
    ctx.executor.prepare(sorted({r.commit for r in runs}))
    label = f"round {step.round}: shards" if step.round > 1 else "running shards"
    ctx.observer.begin(label, len(runs))
    longest = {id(r): estimated_seconds(state, r.files, known) for r in runs}
    round_ = Round(ctx, runs, known, longest)
    chosen = run_parallel(ctx, ctx.executor, runs, label, first=round_.priority, ready=round_.ready)
    for shard_run, observation in chosen:
        record_attempt(ctx, shard_run, observation)
        round_.recorded(shard_run)
    ctx.observer.end(label)


class Round:
    """Which of a round's runs may start: base runs at once; a head run at once where each of
    its files has a known figure (its limits from them), else once the base runs of this
    round that run any of its files are recorded, its limits then from the figures recorded
    by then (`known_seconds`, as base's figures give them). Except a long pole (`long_poles`):
    a long head run, most of its revision's work, that started after its base run would end
    the round alone, starts at once, its files' limits from what was known before the round
    (none for a file never measured: `--timeout` bounds it, as it bounds base's run). Either
    way a head run's limits depend on what was known, never on when it happened to start. On
    a pool a head run also waits for its own shard's base run: placement reserved the shard
    one slot, not two. Runs start in order of `priority`: the longest path of work each
    begins, so a base run that a long head run waits for is not left behind a shorter run
    that waits for nothing."""

    def __init__(
        self,
        ctx: StepContext,
        runs: Sequence[ShardRun],
        known: dict[str, float],
        estimated: Mapping[int, float] | None = None,
    ):
        self.ctx = ctx
        base = [r for r in runs if r.revision == BASE]
        poles = set()
        if estimated is not None and not ctx.capabilities.places_on_pool:
            poles = long_poles(runs, estimated, ctx.options.jobs)
        self.waits_for: dict[int, set[tuple[str, int]]] = {}
        self.refigured: set[int] = set()  # head runs whose limits wait for base's figures
        for run in runs:
            if run.revision != HEAD:
                continue
            files = set(run.files)
            if not files.issubset(known) and id(run) not in poles:
                self.refigured.add(id(run))
                self.waits_for[id(run)] = {
                    (b.shard_id, b.attempt) for b in base
                    if b.shard_id == run.shard_id or files.intersection(b.files)
                }  # fmt: skip
            elif ctx.capabilities.places_on_pool:
                self.waits_for[id(run)] = {
                    (b.shard_id, b.attempt) for b in base if b.shard_id == run.shard_id
                }  # fmt: skip
        self.done: set[tuple[str, int]] = set()
        self.known: dict[str, float] | None = None  # as of the last base result, once asked
        self.estimated = estimated or {}
        self.unlocks: dict[tuple[str, int], float] = {}  # a base run: the longest run it frees
        for head in runs:
            for key in self.waits_for.get(id(head), ()):
                seconds = self.estimated.get(id(head), 0.0)
                self.unlocks[key] = max(self.unlocks.get(key, 0.0), seconds)

    def priority(self, run: ShardRun) -> float:
        """The run's estimated seconds, and for a base run those of the longest head run
        that waits for it: the work that cannot end before this run's path does (the
        critical path, as list schedulers order by). Base's last small shards then go
        before a ready head run that would otherwise leave their head runs to end the
        round alone."""
        own = self.estimated.get(id(run), 0.0)
        if run.revision != BASE:
            return own
        return own + self.unlocks.get((run.shard_id, run.attempt), 0.0)

    def ready(self, run: ShardRun) -> ShardRun | None:
        if not self.waits_for.get(id(run), set()) <= self.done:
            return None
        if id(run) not in self.refigured:
            return run
        if self.known is None:  # read the ledger once per base result, and only if asked
            self.known = known_seconds(self.ctx.state())
        return run.model_copy(update=self.ctx.limits(run.files, self.known))

    def recorded(self, run: ShardRun) -> None:
        if run.revision == BASE:
            self.done.add((run.shard_id, run.attempt))
            self.known = None


# A head run shorter than this waits for its base run even where that lengthens the round:
# its files' limits from base's figures (a hang named in seconds) are worth that wait.
LONG_POLE_S = 60.0


def long_poles(runs: Sequence[ShardRun], estimated: Mapping[int, float], jobs: int) -> set[int]:
    """The head runs (by id) that must not wait for their base run: a run estimated at a
    minute or more that is most of its revision's work and that, after its base run, would
    pass the round's estimated work per worker, so the round would end with it alone while
    the other workers sit idle (a suite with one dominant file on a first gate: issue 41).
    Base's estimate of a shard is head's: the same files."""
    share = sum(estimated[id(r)] for r in runs) / max(1, jobs)
    heads = sum(estimated[id(r)] for r in runs if r.revision == HEAD)
    return {
        id(r)
        for r in runs
        if r.revision == HEAD
        and estimated[id(r)] >= LONG_POLE_S
        and 2 * estimated[id(r)] > max(share, heads)
    }


def _shard_run(
    ctx: StepContext,
    state: RunState,
    request: RunRequest,
    member: str | None,
    known: dict[str, float],
) -> ShardRun:
    return ShardRun(
        run_id=ctx.run_id,
        shard_id=request.shard,
        attempt=request.attempt,
        revision=request.revision,  # type: ignore[arg-type]
        commit=ctx.commit(request.revision),
        files=request.files,
        command=tuple(ctx.started.command),
        memory_limit_mb=memory_limit(ctx, state, request.shard),
        member=member,
        skip_sources=ctx.skips.get(request.revision, ()),
        **ctx.limits(request.files, known),
    )


def memory_limit(ctx: StepContext, state: RunState, shard_id: str) -> int:
    """One figure for every executor's watchdog and a pool's request and limit."""
    wanted = attempt_limit_mb(
        state, shard_id, ctx.options.budget_mb, ctx.options.isolation_budget_mb
    )
    return min(wanted, ctx.reserved.get(shard_id, wanted))


def _place(
    ctx: StepContext, state: RunState, requests: Sequence[RunRequest], round_: int
) -> dict[str, str]:
    """Pool executors only: measure the pool, place shards, record both."""
    needs = {r.shard: float(memory_limit(ctx, state, r.shard)) for r in requests}
    placed = place_round(
        ctx.ledger, ctx.run_id, ctx.executor, state, needs, ctx.options.budget_mb, round_
    )
    ctx.reserved.update(placed.reduced_mb)
    return placed.members
