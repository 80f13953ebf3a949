"""The `run` step: a round of shard runs, base first then head, each recorded as it lands
(`ledger/steps/attempts.py`); base's results reused by content where an earlier run has them,
and, on a pool, the shards placed first (`ledger/steps/placement.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.domain.memory import attempt_limit_mb
from release_ledger.domain.run_state import BASE, HEAD, RunState
from release_ledger.domain.timing import known_seconds
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
    # Base first: a head attempt then has base's figures for its files' time limits.
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
    for batch in (BASE, HEAD):
        if batch == HEAD:  # the limits again, from base's figures just recorded
            known = known_seconds(ctx.state())
            runs = [r.model_copy(update=ctx.limits(r.files, known)) for r in runs]
        chosen = [r for r in runs if r.revision == batch]
        for shard_run, observation in run_parallel(ctx, ctx.executor, chosen, label):
            record_attempt(ctx, shard_run, observation)
    ctx.observer.end(label)


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
