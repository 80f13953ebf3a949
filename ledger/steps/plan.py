"""The `plan` step: pack the files into shards under the memory budget (`ShardsPlanned`),
from what is known of each: this run's measurements, reused ones, else a nominal cost."""

from __future__ import annotations

from release_ledger.domain import events as ev
from release_ledger.domain.memory import DEFAULT_BASELINE_MB, FileCost
from release_ledger.domain.planning import fitted_shard_count, nominal_cost, plan_shards
from release_ledger.domain.run_state import RunState
from release_ledger.ledger.steps.context import StepContext
from release_ledger.ledger.steps.reuse import reuse_measurements
from release_ledger.projections.next_step import Step


def plan(ctx: StepContext, state: RunState, step: Step) -> None:
    """Plan from what is known: measurements (this run's solo ones, or reused from earlier
    runs by content), else a nominal cost from discovery (its size, and its collected items
    where the invocation was collected, else its `def test` count); measuring in place, the shard
    runs then measure every file (`FileMeasured` with `source="shard"`)."""
    options = ctx.options
    reused: list[ev.Event] = []
    if options.measure in ("inplace", "never"):
        unknown = [f for f in state.files if f not in state.costs]
        reused = reuse_measurements(ctx, unknown)
        if reused:
            ctx.observer.notice(f"reused {len(reused)} measurements from earlier runs")
    known = dict(state.costs)
    baselines = [state.baseline_mb] if state.baseline_mb is not None else []
    for event in reused:
        assert isinstance(event, ev.MeasurementReused)
        known[event.file] = FileCost(
            event.rss_mb,
            event.seconds,
            event.retained_mb,
            event.transient_mb,
            event.shared_mb,
            event.ceiling_mb,
        )
        if event.baseline_mb is not None:
            baselines.append(event.baseline_mb)
    costs: dict[str, FileCost] = {}
    for file in state.files:
        if file in state.empty_files or file in state.measure_failures:
            continue  # planned never (empty) or reported unmeasured (failed alone)
        costs[file] = known.get(file) or nominal_cost(
            state.discovered_sizes.get(file, 0), state.nominal_tests(file)
        )
    # `--shards N` is taken as given; the default fits the suite (`fitted_shard_count`)
    count = (
        options.shard_count
        if options.shards
        else fitted_shard_count(costs.values(), options.shard_count)
    )
    planned = ctx.ledger.make(
        ev.ShardsPlanned,
        ctx.run_id,
        budget_mb=options.budget_mb,
        count=count if costs else 0,
        shards=plan_shards(
            costs,
            options.budget_mb,
            count,
            baseline_mb=max(baselines, default=DEFAULT_BASELINE_MB),
            alone_budget_mb=options.isolation_budget_mb,
            collection=state.order,
        )
        if costs
        else [],
    )
    ctx.ledger.append(ctx.run_id, [*reused, planned])
