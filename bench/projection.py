"""Read-model projection: full rebuild and catch-up cost, against raw sqlite3 inserts.

    python bench/projection.py                  # 1,000,000 events in 1,000 runs
    python bench/projection.py --events 100000  # smaller

Synthesises a ledger of valid runs (tests/synthetic_runs.py: files measured, shards run at head
and base with JUnit reports, a few retries, isolations, questions, checks), appended one run per
EventStore.append. Then, side by side in the same process and on the same files:

- full rebuild (`ledger rebuild`'s code path) in events/s (target >= 50,000/s), with the time
  split by stage on a sample of runs (read + decode events, fold incl. JUnit parsing, judging
  under every rule, building rows) so the dominant cost is named;
- the reference: a raw sqlite3 `executemany` of exactly the same rows into the same schema, in
  one transaction, indexes created after;
- catch-up cost per new event: one event in one run, one event in each of 100 runs, one new
  whole run; then a rebuild's digest must equal the caught-up views' digest;
- `ledger verdict` of one 10,000-event run as a subprocess, start-up included (target < 0.5 s),
  next to `ledger rules` (start-up alone).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from release_ledger.domain import events as ev  # noqa: E402
from release_ledger.domain.run_state import fold  # noqa: E402
from release_ledger.ledger import views  # noqa: E402
from release_ledger.ledger.bootstrap import open_ledger  # noqa: E402
from release_ledger.ledger.service import Ledger  # noqa: E402
from release_ledger.projections.read_models import run_rows, verdicts_of  # noqa: E402
from tests.synthetic_runs import synthetic_run  # noqa: E402

SHARDS = 16
TESTS_PER_FILE = 1
OVERHEAD = 50  # events per run besides one FileMeasured per file (plan, attempts, ...)


def run_id_of(index: int) -> str:
    return f"{index:08x}".ljust(32, "e")


def make_run(rng: random.Random, index: int, events: int, tests_per_file: int) -> object:
    return synthetic_run(
        rng,
        run_id_of(index),
        files=max(1, events - OVERHEAD),
        tests_per_file=tests_per_file,
        shards=SHARDS,
        p_fail=0.02,
        p_skip=0.01,
        p_unmeasured=0.05,
        questions=2,
        checks=2,
        rule=("strict", "default", "zero-failures")[index % 3],
        pad_to=events,
    )


def synthesise(ledger: Ledger, runs: int, per_run: int, tests_per_file: int) -> int:
    rng = random.Random(20260101)
    total = 0
    for index in range(runs):
        run = make_run(rng, index, per_run, tests_per_file)
        ledger.store.append(run.run_id, run.events, artifacts=run.artifacts)  # type: ignore[attr-defined]
        total += len(run.events)  # type: ignore[attr-defined]
    return total


def stage_split(ledger: Ledger, run_ids: list[str]) -> dict[str, float]:
    """Seconds per stage over the sample, projecting exactly as the rebuild does."""
    spent = {"read": 0.0, "fold": 0.0, "judge": 0.0, "rows": 0.0}
    for run_id in run_ids:
        t0 = time.perf_counter()
        records = ledger.read(run_id)
        events = [r.event for r in records]
        artifacts = ledger.artifacts_for(events)
        pairs = [(r.position, r.event) for r in records]
        t1 = time.perf_counter()
        state = fold(pairs, artifacts)
        t2 = time.perf_counter()
        verdicts_of(state)
        t3 = time.perf_counter()
        run_rows(run_id, pairs, artifacts)
        t4 = time.perf_counter()
        spent["read"] += t1 - t0
        spent["fold"] += t2 - t1
        spent["judge"] += t3 - t2
        spent["rows"] += max(0.0, (t4 - t3) - (t2 - t1) - (t3 - t2))
    return spent


def raw_reference(views_file: Path, reference_file: Path) -> tuple[float, int]:
    """Insert the very rows of the views file into an empty copy of its schema, raw sqlite3."""
    source = sqlite3.connect(views_file)
    schema = source.execute(  # the views' rows, not the assessments they keep (not rows)
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
        "AND tbl_name != 'assessments' ORDER BY type DESC"
    ).fetchall()
    tables = [name for kind, name, _ in schema if kind == "table"]
    data = {name: source.execute(f'SELECT * FROM "{name}"').fetchall() for name in tables}
    source.close()
    for suffix in ("", "-wal", "-shm"):  # a reference left by an earlier run
        Path(f"{reference_file}{suffix}").unlink(missing_ok=True)
    target = sqlite3.connect(reference_file, isolation_level=None)
    target.execute("PRAGMA journal_mode=WAL")
    target.execute("PRAGMA synchronous=NORMAL")
    for kind, _, sql in schema:
        if kind == "table":
            target.execute(sql)
    rows = sum(len(r) for r in data.values())
    started = time.perf_counter()
    target.execute("BEGIN IMMEDIATE")
    for name, table_rows in data.items():
        if table_rows:
            marks = ", ".join("?" * len(table_rows[0]))
            target.executemany(f'INSERT INTO "{name}" VALUES ({marks})', table_rows)
    for kind, _, sql in schema:
        if kind == "index":
            target.execute(sql)
    target.execute("COMMIT")
    seconds = time.perf_counter() - started
    target.close()
    return seconds, rows


def catch_up_cost(ledger: Ledger, views_file: Path, rng: random.Random, runs: int,
                  per_run: int, tests_per_file: int) -> list[tuple[str, int, float]]:  # fmt: skip
    results = []
    store = views.open_views(views_file)
    try:
        # one event in one run (median of 5, each in another run)
        single = []
        for index in range(5):
            run_id = run_id_of(index % runs)
            ledger.record(run_id, ev.CheckRecorded, name=f"bench-1-{index}", verdict="pass")
            t = time.perf_counter()
            views.catch_up(ledger, store)
            single.append(time.perf_counter() - t)
        results.append(("1 event in 1 run (median of 5)", 1, statistics.median(single)))
        # one event in each of 100 runs
        touched = [run_id_of(i) for i in rng.sample(range(runs), min(100, runs))]
        for run_id in touched:
            ledger.record(run_id, ev.CheckRecorded, name="bench-100", verdict="fail")
        t = time.perf_counter()
        views.catch_up(ledger, store)
        results.append((f"1 event in each of {len(touched)} runs", len(touched),
                        time.perf_counter() - t))  # fmt: skip
        # a whole new run
        run = make_run(rng, runs, per_run, tests_per_file)
        ledger.store.append(run.run_id, run.events, artifacts=run.artifacts)  # type: ignore[attr-defined]
        t = time.perf_counter()
        views.catch_up(ledger, store)
        results.append(("a new run", len(run.events), time.perf_counter() - t))  # type: ignore[attr-defined]
        # nothing new
        t = time.perf_counter()
        views.catch_up(ledger, store)
        results.append(("nothing new", 0, time.perf_counter() - t))
    finally:
        store.close()
    return results


def time_cli(args: list[str], repeat: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "release_ledger", *args], cwd=ROOT, env=env, capture_output=True,
            check=False,
        )  # fmt: skip
        times.append(time.perf_counter() - t)
        if done.returncode not in (0, 1, 3, 4):
            raise SystemExit(f"ledger {' '.join(args)} failed: {done.stderr.decode()}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=None, help="default: events / 1000")
    parser.add_argument("--tests-per-file", type=int, default=TESTS_PER_FILE)
    parser.add_argument("--verdict-events", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None, help="keep the files here")
    args = parser.parse_args()
    runs = args.runs or max(1, args.events // 1000)
    per_run = max(OVERHEAD + 1, args.events // runs)
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-projection-"))
    work.mkdir(parents=True, exist_ok=True)
    ledger_file, views_file = work / "ledger.db", work / "ledger.views.db"
    for f in work.glob("*.db*"):
        f.unlink()
    url = f"sqlite:///{ledger_file}"
    ledger = open_ledger(url)
    rng = random.Random(7)
    try:
        print(f"synthesising {runs} runs x {per_run} events "
              f"({args.tests_per_file} test per file, {SHARDS} shards) in {work}")  # fmt: skip
        t = time.perf_counter()
        events = synthesise(ledger, runs, per_run, args.tests_per_file)
        made = time.perf_counter() - t
        print(f"  {events:,} events appended in {made:.1f}s ({events / made:,.0f}/s)")

        store = views.open_views(views_file)
        result = views.rebuild_into(ledger, store)
        digest = store.digest()
        counts = store.counts()
        store.close()
        rebuild_s = float(result["seconds"])
        rows = sum(counts.values())
        print("\nfull rebuild")
        print(f"  {result['events']:,} events, {rows:,} rows in {rebuild_s:.2f}s: "
              f"{result['events'] / rebuild_s:,.0f} events/s (target >= 50,000/s)")  # fmt: skip
        print("  rows: " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())))

        sample = [run_id_of(i) for i in range(min(runs, 10))]
        spent = stage_split(ledger, sample)
        sampled = sum(len(ledger.read(r)) for r in sample)
        total = sum(spent.values())
        print(f"  stages over {len(sample)} runs ({sampled:,} events), share of projecting:")
        for stage, seconds in spent.items():
            print(f"    {stage:<6} {seconds / sampled * 1e6:8.1f} us/event  "
                  f"{seconds / total:6.1%}")  # fmt: skip

        ref_s, ref_rows = raw_reference(views_file, work / "reference.db")
        print("\nreference: raw sqlite3 executemany of the same rows, one transaction")
        print(f"  {ref_rows:,} rows in {ref_s:.2f}s ({ref_rows / ref_s:,.0f} rows/s, "
              f"{result['events'] / ref_s:,.0f} events/s)")  # fmt: skip
        print(f"  rebuild / raw insert: {rebuild_s / ref_s:.1f}x")

        print("\ncatch-up (re-projects each touched run from its whole stream)")
        for label, n, seconds in catch_up_cost(ledger, views_file, rng, runs, per_run,
                                               args.tests_per_file):  # fmt: skip
            per = f"{seconds / n * 1e3:8.2f} ms/event" if n else ""
            print(f"  {label:<32} {seconds * 1e3:9.1f} ms {per}")
        store = views.open_views(views_file)
        caught_up = store.digest()
        store.close()
        check = views.rebuild(ledger, work / "rebuilt.db")
        same = "identical" if check["digest"] == caught_up else "DIFFERENT"
        print(f"  caught-up views vs a rebuild: digest {same}")
        assert digest  # the first rebuild's digest was computable

        print(f"\nledger verdict of one {args.verdict_events:,}-event run (subprocess)")
        big = make_run(rng, runs + 1, args.verdict_events, args.tests_per_file)
        ledger.store.append(big.run_id, big.events, artifacts=big.artifacts)  # type: ignore[attr-defined]
        verdict = time_cli(["verdict", big.run_id, "--json", "--ledger", url], 5)  # type: ignore[attr-defined]
        startup = time_cli(["rules", "--json"], 5)
        print(f"  verdict: best {min(verdict):.3f}s, median {statistics.median(verdict):.3f}s "
              f"(target < 0.5 s)")  # fmt: skip
        print(f"  reference `ledger rules` (start-up only): best {min(startup):.3f}s, "
              f"median {statistics.median(startup):.3f}s")  # fmt: skip
        print(f"  verdict work beyond start-up: {min(verdict) - min(startup):.3f}s")
    finally:
        ledger.close()
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
