"""Planner benchmark (issue 4, 17b): 50,000 files planned in under a second, and the plan's
makespan within 5% of the lower bound max(total / shards, longest file) on random inputs.

Run: `python bench/planner.py`. The reference for the ratio is the lower bound, computed in the
same run on the same input; the time target is one second for 50,000 files. Beside it, the same
input planned in DESIGN.md's RSS-first order (`rss_first=True`), to show why seconds lead.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from release_ledger.domain.memory import FileCost
from release_ledger.domain.planning import makespan, makespan_lower_bound, plan_shards

BUDGET_MB = 8192.0
TIME_TARGET_S = 1.0
RATIO_TARGET = 1.05


def random_files(rng: random.Random, n: int, shape: str) -> dict[str, FileCost]:
    """Test-suite-like costs: most files small and quick, a long tail of heavy ones."""
    files: dict[str, FileCost] = {}
    for i in range(n):
        if shape == "uniform":
            seconds = rng.uniform(0.05, 30.0)
            rss = rng.uniform(40.0, BUDGET_MB)
        elif shape == "lognormal":
            seconds = min(rng.lognormvariate(0.0, 1.5), 600.0)
            rss = min(rng.lognormvariate(5.0, 1.0), BUDGET_MB)
        else:  # "correlated": heavy files are both slow and big
            seconds = min(rng.paretovariate(1.8) * 0.2, 600.0)
            rss = min(60.0 + seconds * rng.uniform(5.0, 40.0), BUDGET_MB)
        files[f"tests/pkg{i % 97:02d}/test_{i:06d}.py"] = FileCost(rss_mb=rss, seconds=seconds)
    return files


def timed_plan(files: dict[str, FileCost], count: int, rss_first: bool) -> tuple[float, float]:
    start = time.perf_counter()
    shards = plan_shards(files, BUDGET_MB, count, rss_first=rss_first)
    return time.perf_counter() - start, makespan(shards)


def main() -> int:
    ok = True
    print(
        f"{'files':>7} {'shards':>6} {'shape':>10} {'plan s':>7} {'makespan':>10} "
        f"{'lower bnd':>10} {'ratio':>7}   {'rss-first s':>11} {'ratio':>7}"
    )
    cases = [
        (50_000, 16, "lognormal", 1),
        (50_000, 64, "uniform", 2),
        (50_000, 256, "correlated", 3),
        (5_000, 32, "lognormal", 4),
        (2_000, 16, "uniform", 5),
        (1_000, 8, "correlated", 6),
        (500, 16, "lognormal", 7),
        (200, 32, "lognormal", 8),
        (100, 8, "uniform", 9),
    ]
    for n, count, shape, seed in cases:
        files = random_files(random.Random(seed), n, shape)
        bound = makespan_lower_bound(files, count)
        elapsed, span = timed_plan(files, count, rss_first=False)
        rss_elapsed, rss_span = timed_plan(files, count, rss_first=True)
        ratio = span / bound
        time_ok = n < 50_000 or elapsed < TIME_TARGET_S
        ratio_ok = ratio <= RATIO_TARGET
        ok = ok and time_ok and ratio_ok
        flag = "" if time_ok and ratio_ok else "  <-- MISSED"
        print(
            f"{n:>7} {count:>6} {shape:>10} {elapsed:>7.3f} {span:>10.1f} {bound:>10.1f} "
            f"{ratio:>7.4f}   {rss_elapsed:>11.3f} {rss_span / bound:>7.4f}{flag}"
        )
    print(
        f"targets (longest-first planner): 50,000 files under {TIME_TARGET_S:.1f} s; "
        f"makespan / lower bound <= {RATIO_TARGET:.2f}: {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
