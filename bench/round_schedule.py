"""A round's wall time (issue 41, part 2): base's runs then head's, each phase waiting for its
slowest shard (the gate before), against both revisions in one pool, the longest first, a head
run started once its base run is recorded (`ledger/steps/run.py`), side by side in one run.

Run: `python bench/round_schedule.py [--jobs 4] [--shards 16] [--scale 0.05]`.

Shards sleep for skewed durations (lognormal, seeded; head's within 10% of base's), through the
gate's own `run_parallel` (`ledger/steps/parallel.py`). It prints each schedule's wall seconds,
its ratio to the lower bound max(total / jobs, the longest base + head pair) and to the
two-phase wall: the target is a one-pool wall no longer than two-phase's, and closer to the
bound on skewed rounds. Two cases: head's files not known before the round (a first gate:
each head run waits for its base run) and known (every head run may start at once). Where
head waits, the gate's own `Round` decides what may start, in two orders side by side: the
longest run first, and its critical path first (`Round.priority`: a base run counts the head
run it frees too), with `--repeat N` seeds (the medians).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.domain.run_state import fold
from release_ledger.ledger.hooks import QuietObserver
from release_ledger.ledger.steps.parallel import run_parallel
from release_ledger.ledger.steps.run import Round


class Sleeper:
    name = "sleeper"

    def __init__(self, seconds: dict[tuple[str, str], float]) -> None:
        self.seconds = seconds

    def run(self, run: ShardRun) -> Observation:
        time.sleep(self.seconds[(run.shard_id, run.revision)])
        return Observation(exit_code=0)

    def cancel_all(self) -> None:
        pass


def _runs(shards: int) -> list[ShardRun]:
    return [
        ShardRun(
            run_id="r",
            shard_id=f"s{i:02d}",
            attempt=1,
            revision=revision,
            commit="c" * 40,
            files=(f"tests/test_{i}.py",),
            command=("pytest",),
            timeout_s=60.0,
        )
        for revision in ("base", "head")
        for i in range(shards)
    ]


def two_phases(ctx: Any, executor: Sleeper, runs: list[ShardRun]) -> float:
    began = time.perf_counter()
    for revision in ("base", "head"):
        chosen = [r for r in runs if r.revision == revision]
        for _ in run_parallel(ctx, executor, chosen, "bench"):
            pass
    return time.perf_counter() - began


def one_pool(ctx: Any, executor: Sleeper, runs: list[ShardRun], known: bool) -> float:
    done: set[str] = set()

    def ready(run: ShardRun) -> ShardRun | None:
        return run if known or run.revision == "base" or run.shard_id in done else None

    began = time.perf_counter()
    longest = executor.seconds
    chosen = run_parallel(
        ctx, executor, runs, "bench", first=lambda r: longest[(r.shard_id, "base")], ready=ready
    )
    for run, _ in chosen:
        if run.revision == "base":
            done.add(run.shard_id)
    return time.perf_counter() - began


def gate_round(ctx: Any, executor: Sleeper, runs: list[ShardRun], critical: bool) -> float:
    """Head waiting for base (a first gate), as the gate's `Round` says; the order the
    longest first, or with `critical` by `Round.priority`. Both revisions of a shard are
    estimated alike (the same files), as the gate estimates them."""
    estimated = {id(r): executor.seconds[(r.shard_id, "base")] for r in runs}
    round_ = Round(ctx, runs, {}, estimated)
    first = round_.priority if critical else (lambda r: estimated[id(r)])
    began = time.perf_counter()
    for run, _ in run_parallel(ctx, executor, runs, "bench", first=first, ready=round_.ready):
        round_.recorded(run)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--scale", type=float, default=0.05, help="seconds per unit of work")
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument(
        "--repeat", type=int, default=1, metavar="N",
        help="instead, N seeds from --seed on: the median and worst of the gate's two orders",
    )  # fmt: skip
    args = parser.parse_args()
    if args.repeat > 1:
        compare_orders(args)
    else:
        one_seed(args)


def _skewed(args: argparse.Namespace, seed: int) -> dict[tuple[str, str], float]:
    rng = random.Random(seed)
    seconds: dict[tuple[str, str], float] = {}
    for i in range(args.shards):
        base = min(rng.lognormvariate(0.0, 1.0), 20.0) * args.scale
        seconds[(f"s{i:02d}", "base")] = base
        seconds[(f"s{i:02d}", "head")] = base * rng.uniform(0.9, 1.1)
    return seconds


def _context(jobs: int) -> Any:
    """What `run_parallel` and `Round` read of a step's context: nothing known before the
    round, no limits to set from it, no pool."""
    options = SimpleNamespace(jobs=jobs, rounds=0, machine_mb=None)
    no_pool = SimpleNamespace(places_on_pool=False)
    return SimpleNamespace(
        options=options, observer=QuietObserver(), capabilities=no_pool,
        state=lambda: fold([], {}), limits=lambda files, known: {},
    )  # fmt: skip


def _bound(seconds: dict[tuple[str, str], float], jobs: int) -> float:
    """No round where head waits ends before its longest pair, nor before its share."""
    pairs = [seconds[(s, "base")] + seconds[(s, "head")] for s in {k[0] for k in seconds}]
    return max(sum(seconds.values()) / jobs, max(pairs))


def compare_orders(args: argparse.Namespace) -> None:
    ctx, runs = _context(args.jobs), _runs(args.shards)
    ratios: dict[bool, list[float]] = {False: [], True: []}
    for seed in range(args.seed, args.seed + args.repeat):
        seconds = _skewed(args, seed)
        executor, bound = Sleeper(seconds), _bound(seconds, args.jobs)
        for critical in (False, True):
            ratios[critical].append(gate_round(ctx, executor, runs, critical) / bound)
    print(f"{args.shards} shards, {args.jobs} jobs, head waits, {args.repeat} seeds: wall / "
          "lower bound")  # fmt: skip
    for critical, name in ((False, "longest first"), (True, "critical path first")):
        values = ratios[critical]
        print(f"  {name:20} median x{statistics.median(values):.2f}, worst x{max(values):.2f}")


def one_seed(args: argparse.Namespace) -> None:
    seconds = _skewed(args, args.seed)
    share = sum(seconds.values()) / args.jobs
    bounds = {False: _bound(seconds, args.jobs), True: max(share, max(seconds.values()))}
    ctx = _context(args.jobs)
    executor, runs = Sleeper(seconds), _runs(args.shards)
    before = two_phases(ctx, executor, runs)
    print(f"{args.shards} shards, {args.jobs} jobs; lower bounds {bounds[False]:.3f} s "
          f"(head waits), {bounds[True]:.3f} s (head known)")  # fmt: skip
    print(f"two phases (before)    {before:.3f} s  x{before / bounds[False]:.2f} of its bound")
    for known in (False, True):
        wall = one_pool(ctx, executor, runs, known)
        name = "one pool, head known" if known else "one pool, head waits"
        print(f"{name}   {wall:.3f} s  x{wall / bounds[known]:.2f} of its bound, "
              f"x{wall / before:.2f} of two phases")  # fmt: skip
    for critical in (False, True):
        wall = gate_round(ctx, executor, runs, critical)
        name = "gate, critical path" if critical else "gate, longest first"
        print(f"{name}    {wall:.3f} s  x{wall / bounds[False]:.2f} of its bound (head waits), "
              f"x{wall / before:.2f} of two phases")  # fmt: skip


if __name__ == "__main__":
    main()
