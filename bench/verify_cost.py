"""Benchmark: what verifying a run's hash chain on every read costs (issue 13, item 2).

    python bench/verify_cost.py [--events 10000] [--repeat 7]

Synthesises one run of N events (bench/projection.py's generator), then measures
- `ledger verdict RUN` as a subprocess, start-up included (median of --repeat);
- in this process, the read the verdict makes (`EventStore.read_events`) with the chain
  check (`adapters/store_chain.Chain.verified`), and the same read with the check replaced
  by the bare split it replaced: the difference is the check's cost, shown against the
  subprocess's time (target < 10 %).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from projection import make_run, time_cli  # noqa: E402

from release_ledger.adapters.store_chain import Chain  # noqa: E402
from release_ledger.domain.chain import split_state  # noqa: E402
from release_ledger.ledger.bootstrap import open_ledger  # noqa: E402

TARGET = 0.10


def _unverified(self: Chain, run_id: str) -> list[tuple[int, str, str, str, bytes]]:
    """The read before item 2: split each stored state, check nothing."""
    rows = self.stored(run_id)
    return [(p, str(k), *split_state(bytes(s))) for p, k, s in rows]


def _best(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="verify-cost-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        ledger = open_ledger(url)
        run = make_run(random.Random(20260101), 0, options.events, 1)
        ledger.store.append(run.run_id, run.events, artifacts=run.artifacts)  # type: ignore[attr-defined]
        run_id = run.run_id  # type: ignore[attr-defined]
        length = ledger.store.tip(run_id)[0]
        cli = statistics.median(time_cli(["verdict", run_id, "--ledger", url], options.repeat))
        verified = _best(lambda: ledger.store.read_events(run_id), options.repeat)
        original = Chain.verified
        Chain.verified = _unverified  # type: ignore[assignment,method-assign]
        try:
            bare = _best(lambda: ledger.store.read_events(run_id), options.repeat)
        finally:
            Chain.verified = original  # type: ignore[method-assign]
        ledger.close()
    cost = max(0.0, verified - bare)
    share = cost / cli
    print(f"run of {length} events")
    print(f"ledger verdict (subprocess, median): {cli * 1000:.1f} ms")
    print(f"read_events verified: {verified * 1000:.1f} ms, unverified: {bare * 1000:.1f} ms")
    print(
        f"chain check: {cost * 1000:.1f} ms = {share:.1%} of `ledger verdict` "
        f"[target < {TARGET:.0%}: {'met' if share < TARGET else 'MISSED'}]"
    )


if __name__ == "__main__":
    main()
