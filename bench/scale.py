"""A ledger after a year of releases: command latency, gate overhead, rebuild, concurrency.

    python bench/scale.py                         # 10,000 runs x 100 events (1,000,000) on SQLite
    python bench/scale.py --runs 1000             # scaled down (100,000 events)
    python bench/scale.py --postgres URL          # the same ledger on PostgreSQL too
    python bench/scale.py --postgres URL --concurrent-only   # only the 4 concurrent gates

Synthesises valid runs (tests/synthetic_runs.py) appended through `Ledger.append`, so the
ledger's own indexes are written as a gate writes them. Then prints, side by side:

- `ledger runs` (first page), `ledger questions`, `ledger show`, `ledger verdict` as real
  processes, start-up included (target < 0.3 s each), next to the floor: a process that reads
  one run's events with the eventsourcing recorder and nothing else. `show` is timed once
  without a kept reading (the fold, then keeping it) and then as a gated run is read (the
  gate keeps its reading); `verdict --rule strict` is a replay, always folded;
- a real gate's own overhead: the same small gate on this ledger and on a fresh one
  (target < 1 s), then the views' catch-up after it (target < 0.2 s);
- full rebuild of the views in events/s (target >= 50,000/s) beside raw sqlite3 inserts of the
  same rows;
- with --postgres: 4 gates at once on one PostgreSQL ledger (two on one repository, two on
  their own): every verdict right, `ledger verify` clean, events stored = events exported.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.projection import make_run, raw_reference, run_id_of  # noqa: E402
from release_ledger.adapters.store_dialects import READINGS_TABLE  # noqa: E402
from release_ledger.ledger import views  # noqa: E402
from release_ledger.ledger.bootstrap import open_ledger  # noqa: E402
from tests.gitrepo import commit, make_repo, tag  # noqa: E402

TARGET_CLI = 0.3
TARGET_GATE = 1.0
TARGET_REBUILD = 50_000
TARGET_CATCH_UP = 0.2
GATE_EVENTS = 60  # about what the small gate below appends
PASS = "def test_ok():\n    pass\n"
FAIL = "def test_bad():\n    assert 0\n"

FLOOR = """
import sys
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore
ds = SQLiteDatastore(sys.argv[1], originator_id_type="text")
recorder = SQLiteApplicationRecorder(ds, events_table_name="ledger_events")
print(len(recorder.select_events(sys.argv[2])))
"""
FLOOR_PG = """
import sys
from urllib.parse import urlparse
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
u = urlparse(sys.argv[1])
ds = PostgresDatastore(u.path.lstrip("/"), u.hostname, str(u.port), u.username or "",
                       u.password or "", originator_id_type="text")
recorder = PostgresApplicationRecorder(ds, events_table_name="ledger_events")
print(len(recorder.select_events(sys.argv[2])))
"""


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "LEDGER_URL"}
    out["PYTHONPATH"] = str(ROOT)
    return out


def timed(argv: list[str], cwd: Path, repeat: int = 3, ok: tuple[int, ...] = (0, 1, 3, 4)) -> tuple[
    float, str
]:  # fmt: skip
    times, out = [], ""
    for _ in range(repeat):
        t = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if done.returncode not in ok or (ok == (1,) and not done.stdout.strip()):
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
        out = done.stdout
    return statistics.median(times), out


def checkpoint(ledger_file: Path) -> None:
    """Fold the WAL back into the database, as a ledger at rest is (a 1 GB WAL left by the
    synthesis would slow every reader that opens the file)."""
    import sqlite3

    conn = sqlite3.connect(ledger_file)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "release_ledger", *args]


def synthesise(url: str, runs: int, per_run: int) -> tuple[int, float]:
    ledger = open_ledger(url)
    rng = random.Random(20260101)
    total = 0
    started = time.perf_counter()
    try:
        for index in range(runs):
            run = make_run(rng, index, per_run, 1)
            ledger.append(run.run_id, run.events, artifacts=run.artifacts)  # type: ignore[attr-defined]
            total += len(run.events)  # type: ignore[attr-defined]
            if index and index % 1000 == 0:
                rate = total / (time.perf_counter() - started)
                print(f"    {index:,} runs, {total:,} events ({rate:,.0f}/s)", flush=True)
    finally:
        ledger.close()
    return total, time.perf_counter() - started


def small_repo(work: Path, name: str) -> Path:
    repo = make_repo(work / name, {"tests/test_a.py": PASS, "tests/test_b.py": PASS,
                                   "tests/test_c.py": FAIL})  # fmt: skip
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": FAIL.replace("bad", "a_bad")}, "breaks a")
    return repo


def gate(url: str, repo: Path, work: Path) -> tuple[float, dict[str, object]]:
    argv = cli("gate", "--base", "v1", "--repo", str(repo), "--jobs", "2", "--questions", "0",
               "--shards", "2", "--env", "none", "--json", "--ledger", url)  # fmt: skip
    seconds, out = timed(argv, work, repeat=1, ok=(1,))
    document: dict[str, object] = json.loads(out)
    return seconds, document


def byte_compile() -> None:
    """Time the commands as an installed package runs them: pip byte-compiles a package when
    it installs it, but a checkout run with PYTHONDONTWRITEBYTECODE=1 (these machines set it)
    has no __pycache__ and compiles each of our ~35 modules from source in every process
    (40-130 ms a command), while the floor's library is compiled in site-packages."""
    import compileall

    for package in ("domain", "projections", "adapters", "ledger", "cli"):
        compileall.compile_dir(ROOT / package, quiet=1)


STRICT = ("--rule", "strict", "--json")  # a replay under another rule: always folded


def commands(url: str, work: Path, floor: list[str], sample: str) -> None:
    byte_compile()
    print(f"\n  {'command (process, start-up included)':<44} {'median s':>9}  vs floor  target")
    floor_s, _ = timed(floor, work)
    print(f"  {'floor: eventsourcing read of one run':<44} {floor_s:9.3f}  {1.0:7.1f}x")
    startup_s, _ = timed(cli("rules", "--json"), work)
    print(f"  {'start-up: ledger rules (no ledger opened)':<44} {startup_s:9.3f}  "
          f"{startup_s / floor_s:7.1f}x")  # fmt: skip
    forget_reading(url, sample)
    for label, args, repeat in (
        ("ledger runs (first page)", ("runs", "--json"), 3),
        ("ledger runs (table)", ("runs",), 3),
        ("ledger questions", ("questions", "--json"), 3),
        (f"ledger show {sample[:8]}: first read, kept", ("show", sample, "--json"), 1),
        (f"ledger show {sample[:8]}", ("show", sample, "--json"), 3),
        (f"ledger verdict {sample[:8]}", ("verdict", sample, "--json"), 3),
        (f"ledger verdict {sample[:8]} --rule strict", ("verdict", sample, *STRICT), 3),
    ):
        seconds, out = timed(cli(*args, "--ledger", url), work, repeat=repeat)
        mark = "ok" if seconds < TARGET_CLI else "MISSED"
        listed = ""
        if args[0] in ("runs", "questions") and "--json" in args:
            listed = f"  ({len(json.loads(out))} listed)"
        print(f"  {label:<44} {seconds:9.3f}  {seconds / floor_s:7.1f}x  < {TARGET_CLI} {mark}"
              f"  start-up +{seconds - startup_s:.3f}s{listed}")  # fmt: skip


def forget_reading(url: str, run_id: str) -> None:
    """Drop the run's kept reading (`ledger/kept_readings.py`), so that the first `show` is
    timed as a ledger without one pays it: the fold, then keeping what it made. Later reads
    are what a gated run gets: the gate keeps its reading when it finishes."""
    ledger = open_ledger(url)
    try:
        mark = "?" if ledger.store.dialect == "sqlite" else "%s"
        ledger.store.execute_raw(READINGS_TABLE)  # a ledger older than kept readings
        ledger.store.execute_raw(f"DELETE FROM ledger_readings WHERE run_id = {mark}", (run_id,))
    finally:
        ledger.close()


def overhead(url: str, fresh_url: str, work: Path, views_file: Path | None) -> None:
    repo = small_repo(work, f"repo-{time.monotonic_ns()}")
    fresh_s, fresh_doc = gate(fresh_url, repo, work)
    big_s, big_doc = gate(url, repo, work)
    assert fresh_doc["introduced"] == big_doc["introduced"], (fresh_doc, big_doc)
    extra = big_s - fresh_s
    mark = "ok" if extra < TARGET_GATE else "MISSED"
    print(f"\n  gate on a fresh ledger {fresh_s:6.2f}s, on this ledger {big_s:6.2f}s: overhead "
          f"{extra:+.2f}s (target < {TARGET_GATE} s) {mark}")  # fmt: skip
    if views_file is not None:
        # The gate caught its views up itself; time the same work again in this process: a
        # run of the gate's size appended, then one catch-up of the views file.
        ledger = open_ledger(url)
        try:
            run = make_run(random.Random(3), 10**7, GATE_EVENTS, 1)
            ledger.append(run.run_id, run.events, artifacts=run.artifacts)  # type: ignore[attr-defined]
            t = time.perf_counter()
            result = views.catch_up_file(ledger, views_file)
            seconds = time.perf_counter() - t
        finally:
            ledger.close()
        mark = "ok" if seconds < TARGET_CATCH_UP else "MISSED"
        print(f"  views catch-up after one gate-sized run: {seconds:.3f}s for "
              f"{result['runs']} run(s), {result['events']} events "
              f"(target < {TARGET_CATCH_UP} s) {mark}")  # fmt: skip


def rebuild(url: str, work: Path) -> Path:
    ledger = open_ledger(url)
    views_file = work / "ledger.views.db"
    try:
        result = views.rebuild(ledger, views_file)
    finally:
        ledger.close()
    seconds = float(result["seconds"])
    rate = result["events"] / seconds
    mark = "ok" if rate >= TARGET_REBUILD else "MISSED"
    print(f"\n  full rebuild: {result['events']:,} events in {seconds:.2f}s = {rate:,.0f} events/s "
          f"(target >= {TARGET_REBUILD:,}) {mark}")  # fmt: skip
    ref_s, ref_rows = raw_reference(views_file, work / "reference.db")
    print(
        f"  raw sqlite3 inserts of the same {ref_rows:,} rows: {ref_s:.2f}s "
        f"({result['events'] / ref_s:,.0f} events/s); rebuild / raw: {seconds / ref_s:.1f}x"
    )
    return views_file


def concurrent(pg: str, work: Path) -> None:
    import psycopg

    name = f"bench_concurrent_{os.getpid()}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = pg.rsplit("/", 1)[0] + f"/{name}"
    open_ledger(url).close()  # tables made once (concurrent creators wait on a lock anyway)
    shared = small_repo(work, "shared")
    repos = [shared, shared, small_repo(work, "own-1"), small_repo(work, "own-2")]
    t = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda r: gate(url, r, work), repos))
    wall = time.perf_counter() - t
    right = all(doc["introduced"] == ["tests/test_a.py::test_a_bad"] for _, doc in results)
    _, out = timed(cli("verify", "--json", "--ledger", url), work, repeat=1, ok=(0, 1))
    verified = json.loads(out)
    runs = verified.get("runs", verified) if isinstance(verified, dict) else verified
    clean = all(r["ok"] for r in runs)
    exported = 0
    for _, doc in results:
        _, lines = timed(cli("export", str(doc["run_id"]), "--ledger", url), work, repeat=1)
        exported += len([line for line in lines.splitlines() if line.strip()])
    with psycopg.connect(url) as conn:
        stored = conn.execute("SELECT count(*) FROM ledger_events").fetchone()[0]
        indexed = conn.execute("SELECT sum(length) FROM ledger_runs").fetchone()[0]
    print(
        f"\n  4 concurrent gates on one PostgreSQL ledger: {wall:.1f}s wall; verdicts right: "
        f"{right}; verify clean: {clean}; events stored {stored}, exported {exported}, "
        f"indexed {indexed}: {'none lost' if stored == exported == indexed else 'MISMATCH'}"
    )
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def on_postgres(pg: str, runs: int, per_run: int, work: Path, commands_only: bool = False) -> None:
    import psycopg

    name = f"bench_scale_{runs}x{per_run}"
    url = pg.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(pg, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    ledger = open_ledger(url)
    have = ledger.store.run_count()
    ledger.close()
    if have < runs:
        print(f"\nPostgreSQL: synthesising {runs:,} runs x {per_run} events into {name}")
        total, seconds = synthesise(url, runs, per_run)
        print(f"  {total:,} events in {seconds:.0f}s ({total / seconds:,.0f}/s)")
    else:
        print(f"\nPostgreSQL: reusing {name} ({have:,} runs)")
    sample = run_id_of(runs // 2)
    floor = [sys.executable, "-c", FLOOR_PG, url, sample]
    commands(url, work, floor, sample)
    if commands_only:
        return
    ledger = open_ledger(url)
    try:  # the views schema, made once (a gate only catches an existing one up)
        built = views.rebuild(ledger, views.PG_SCHEMA)
    finally:
        ledger.close()
    rate = built["events"] / float(built["seconds"])
    print(f"\n  full rebuild into schema {views.PG_SCHEMA}: {built['events']:,} events in "
          f"{float(built['seconds']):.1f}s = {rate:,.0f} events/s")  # fmt: skip
    fresh = pg.rsplit("/", 1)[0] + f"/{name}_fresh"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}_fresh"')
        conn.execute(f'CREATE DATABASE "{name}_fresh"')
    ledger = open_ledger(fresh)
    try:
        views.rebuild(ledger, views.PG_SCHEMA)
    finally:
        ledger.close()
    overhead(url, fresh, work, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--events-per-run", type=int, default=100)
    parser.add_argument("--dir", type=Path, default=None, help="keep (and reuse) the ledger here")
    parser.add_argument("--postgres", default=None, metavar="URL")
    parser.add_argument("--concurrent-only", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--commands-only", action="store_true", help="only the command timings")
    parser.add_argument(
        "--skip-rebuild",
        action="store_true",
        help="keep the ledger.views.db already beside the ledger (no rebuild timing)",
    )
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.postgres and args.concurrent_only:
            concurrent(args.postgres, work)
            return
        if not args.skip_sqlite:
            ledger_file = work / f"ledger-{args.runs}x{args.events_per_run}.db"
            url = f"sqlite:///{ledger_file}"
            if not ledger_file.exists():
                print(f"SQLite: synthesising {args.runs:,} runs x {args.events_per_run} events")
                total, seconds = synthesise(url, args.runs, args.events_per_run)
                print(f"  {total:,} events in {seconds:.0f}s ({total / seconds:,.0f}/s)")
            else:
                print(f"SQLite: reusing {ledger_file}")
            checkpoint(ledger_file)
            sample = run_id_of(args.runs // 2)
            floor = [sys.executable, "-c", FLOOR, str(ledger_file), sample]
            commands(url, work, floor, sample)
        if not args.skip_sqlite and not args.commands_only:
            views_file = work / "ledger.views.db" if args.skip_rebuild else rebuild(url, work)
            fresh = work / f"fresh-{time.monotonic_ns()}" / "ledger.db"  # its own ledger.views.db
            overhead(url, f"sqlite:///{fresh}", work, views_file)
        if args.postgres:
            on_postgres(args.postgres, args.runs, args.events_per_run, work, args.commands_only)
            if not args.commands_only:
                concurrent(args.postgres, work)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
