"""How much memory a shard attempt may use: one figure for the local watchdog, the SSH host's
watchdog and the Kubernetes request and limit (and the pool placement that reserves it).

A shard whose files all have measured costs gets its planned memory (`domain/planning.py`'s
model) with headroom, capped at the shard budget; a shard planned from nominal costs, or one
whose lineage was already killed over its memory, gets the whole budget, so an estimate that
was wrong costs one split rather than the run. A single file split off by bisection (or
alone in a shard that was killed) runs with the larger isolation budget, so a heavy file is
measured rather than killed again; a pool that has no room for that reservation places it
with the shard budget instead (`ledger/placement.py`).
"""

from __future__ import annotations

import math

from domain.planning import DEFAULT_BASELINE_MB, planned_memory, shared_imports_mb
from domain.run_state import RunState, ShardView

HEADROOM = 1.25  # planned x 1.25 ...
HEADROOM_MIN_MB = 256.0  # ... or planned + 256 MB, whichever is larger


def _oom_in_lineage(state: RunState, shard: ShardView) -> bool:
    current: ShardView | None = shard
    while current is not None:
        for attempts in current.attempts.values():
            if any(a.assessment.reason == "oom" for a in attempts):
                return True
        current = state.shards.get(current.parent) if current.parent else None
    return False


def planned_shard_mb(state: RunState, files: tuple[str, ...]) -> float | None:
    """The model's figure for these files from their measured costs (None: one is unknown)."""
    costs = [state.costs.get(file) for file in files]
    known = [cost for cost in costs if cost is not None]
    if len(known) != len(costs) or not known:
        return None
    shared = shared_imports_mb(state.costs.values())  # the run's, as its plan took them
    return planned_memory(known, state.baseline_mb or DEFAULT_BASELINE_MB, shared)


def reservation_mb(state: RunState, shard_id: str, budget_mb: float, isolation_mb: float) -> int:
    """The memory limit (MB) of an attempt of `shard_id` (see the module's docstring)."""
    shard = state.shards.get(shard_id)
    if shard is None:
        return int(budget_mb)
    alone = len(shard.files) == 1
    killed = _oom_in_lineage(state, shard)
    if alone and (shard.depth > 0 or killed):
        return int(isolation_mb)  # a file alone: measure it rather than kill it again
    planned = planned_shard_mb(state, shard.files)
    if killed or planned is None:
        return int(budget_mb)
    # A file measured over the shard budget was planned alone: it may have its figure.
    cap = isolation_mb if alone and planned > budget_mb else budget_mb
    return math.ceil(min(cap, max(planned * HEADROOM, planned + HEADROOM_MIN_MB)))
