"""`ledger tests --flaky` on a ledger of many runs of one suite (issue 29): first page < 0.3 s.

    python bench/test_history.py                  # 10,000 runs x 100 events on SQLite
    python bench/test_history.py --runs 1000      # scaled down

Synthesises valid runs (bench/projection.make_run, as bench/scale.py does: every run of
one suite, at one head and one base, 2% of tests failing at random: nearly every test
flaky; 160 events a run make 110 tests, a full first page of 100), builds the views once
(`ledger rebuild`), then times `ledger tests --flaky` as a real process (start-up and the
views' check that they are current included; median of 3), its query alone, and beside it
the reference: the same page's counts taken from the history rows, as before the running
totals (`test_totals`, `test_commits`, `file_totals`) were kept.

Measured (2 shared cores, 2026-12-04), 10,000 runs x 160 events (110 tests, 2.09 million
history rows, 19,015 a test):
  before the running totals: 0.560 s for the page, query 285 ms (a test's figures counted
  from its 20,000 entries of a covering index, 2.8 ms a test) -- missed.
  with them: 0.118 s for the page, query 21 ms -- ok. Side by side in the same run, the
  page's counts taken from the history rows (the covering index is gone) took 2,422 ms,
  113x the whole page. The rebuild took 62.4 s (68.7 s before: two indexes of the history
  rows fewer, the totals counted as the rows are written).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scale import checkpoint, cli, env, synthesise  # noqa: E402
from release_ledger.ledger import history, views  # noqa: E402
from release_ledger.ledger.bootstrap import open_ledger  # noqa: E402

TARGET = 0.3
# The reference: one test's counts per revision and state from its history rows, as
# `ledger tests` counted them before `test_totals` kept them.
COUNTED_FROM_ROWS = (
    "SELECT revision, state, count(*), sum(run_first) FROM {test_history} "
    "WHERE test = ? AND interpreter = ? GROUP BY revision, state"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--per-run", type=int, default=160, help="events per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        work = Path(tmp)
        ledger_file = work / "ledger.db"
        url = f"sqlite:///{ledger_file}"
        print(f"synthesising {args.runs:,} runs x {args.per_run} events ...", flush=True)
        events, seconds = synthesise(url, args.runs, args.per_run)
        checkpoint(ledger_file)
        print(f"  {events:,} events in {seconds:.1f}s")
        ledger = open_ledger(url)
        try:
            built = views.rebuild(ledger, views.views_path(ledger, None))
            store = views.open_target(ledger, views.views_path(ledger, None))
            rows = store.select("SELECT count(*) FROM {test_history}")[0][0]
            tests = store.select("SELECT count(DISTINCT test) FROM {test_history}")[0][0]
            print(f"  views rebuilt in {built['seconds']:.1f}s: {rows:,} test_history rows, "
                  f"{tests:,} tests")  # fmt: skip
            times = []
            for _ in range(5):
                t = time.perf_counter()
                page, more = history.list_tests(store, None, flaky=True, limit=100, offset=0)
                times.append(time.perf_counter() - t)
            reference = []
            for _ in range(5):
                t = time.perf_counter()
                for row in page:
                    store.select(COUNTED_FROM_ROWS, (row["test"], row["interpreter"]))
                reference.append(time.perf_counter() - t)
            store.close()
        finally:
            ledger.close()
        query, counted = statistics.median(times), statistics.median(reference)
        print(f"  query alone: first page of {len(page)} flaky tests (more: {more}) in "
              f"{query * 1000:.0f} ms")  # fmt: skip
        print(f"  reference, the page's counts taken from the history rows: {counted * 1000:.0f} "
              f"ms ({counted / query:.1f}x the whole page from the running totals)")  # fmt: skip
        argv = cli("tests", "--flaky", "--json", "--ledger", url)
        took = []
        for _ in range(3):
            t = time.perf_counter()
            done = subprocess.run(argv, cwd=work, env=env(), capture_output=True, text=True)
            took.append(time.perf_counter() - t)
            if done.returncode != 0:
                raise SystemExit(f"ledger tests failed ({done.returncode}): {done.stderr}")
        listed = json.loads(done.stdout)
        command = statistics.median(took)
        mark = "ok" if command < TARGET else "MISSED"
        print(f"  ledger tests --flaky (process, start-up included): {command:.3f}s for "
              f"{len(listed)} tests (target < {TARGET}s) {mark}")  # fmt: skip


if __name__ == "__main__":
    main()
