"""How the gate scales with cores (issue 41): plain pytest, `pytest -n N` and the gate at N jobs,
side by side in one run.

Run: `python bench/cores.py [--project parso] [--jobs 1,2] [--shards 32]`; two revisions of the
tool side by side: `--code before=../old --code after=. --rounds 2 --no-fresh`.

For a real release pair (two consecutive releases from their public sdists, see
`tests/realworld/sdists.py`) it runs, one after another on the same machine:

- plain `python -m pytest` at head then at base (one process each; once untimed first, as the
  first run reads a cold disk): the reference, whose CPU
  seconds divided by the cores give the **physical limit** of any parallel runner;
- `python -m pytest -n N` (pytest-xdist) at head then base, for each N;
- a first gate (`--env none --no-release-builds --questions 0 --jobs N --shards S`, fresh
  ledger and checkouts), for each N: on resident workers (`--shard-processes resident`),
  then with a process per shard (`--shard-processes fresh`, unless `--no-fresh`), the
  reference of the workers.

CPU is counted machine-wide from `/proc/stat` (busy jiffies of every process, sandboxed shards
and their supervisors included), so run it on a quiet machine. For each row it prints wall
seconds, CPU seconds, the **CPU ratio** (CPU / plain pytest's CPU: what the runner spends beyond
the suite's own work), the **limit ratio** (wall / (plain CPU / N): how far from every one of
N cores busy with the suite's work) and the **idle core-seconds** (N x wall - CPU).
Targets (issue 41): the gate's CPU ratio at most 1.15 at any shard count. A machine with more
cores predicts its figures from the same ratios: wall ~ limit ratio x plain CPU / N.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tool_code import tool_checkouts  # noqa: E402

from tests.gitrepo import git  # noqa: E402
from tests.realworld.sdists import release_pair  # noqa: E402

# name, base, head, the test path plain pytest is given
PROJECTS: dict[str, tuple[str, str, str]] = {
    "parso": ("0.8.6", "0.8.7", "test"),
    "more-itertools": ("10.7.0", "10.8.0", "tests"),
    "networkx": ("3.4.2", "3.5", "networkx"),
}
TICKS = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """Machine-wide CPU seconds spent outside idle and iowait since boot (first line of
    /proc/stat): every process counts, whatever sandbox or process group it runs in."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields[:8]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / TICKS


@dataclass(frozen=True)
class Figure:
    label: str
    jobs: int
    wall: float
    cpu: float


def measured(label: str, jobs: int, commands: list[tuple[list[str], Path]]) -> Figure:
    """Run the commands one after another; wall and machine-wide CPU of them all."""
    env = {k: v for k, v in os.environ.items() if k != "LEDGER_URL"}
    cpu0, wall0 = busy_seconds(), time.perf_counter()
    for argv, cwd in commands:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{label}: {argv[:5]} exited {done.returncode}: {done.stderr[-800:]}")
    return Figure(label, jobs, time.perf_counter() - wall0, busy_seconds() - cpu0)


def run(
    name: str, jobs_list: list[int], shards: int, fresh: bool,
    codes: list[tuple[str, Path]], rounds: int,
) -> None:  # fmt: skip
    base, head, tests = PROJECTS[name]
    with tempfile.TemporaryDirectory(prefix="cores-") as scratch:
        work = Path(scratch)
        repo = release_pair(work, name, base, head)
        checkouts = []
        for version in (head, base):
            checkout = work / f"plain-{version}"
            git(repo, "worktree", "add", "--detach", "--quiet", str(checkout), f"v{version}")
            checkouts.append(checkout)
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests]
        plain_runs = [(pytest, c) for c in checkouts]
        measured("warm-up", 1, plain_runs)  # untimed: the first run reads a cold disk
        plain = measured("plain pytest head+base", 1, plain_runs)
        rows = [(plain, plain)]  # each row with the plain row it is a ratio of
        for jobs in jobs_list:
            xdist = [*pytest, "-n", str(jobs)]
            row = measured(f"pytest -n {jobs}", jobs, [(xdist, c) for c in checkouts])
            rows.append((row, plain))
            gate = [sys.executable, "-m", "release_ledger", "gate", "--repo", str(repo),
                    "--base", f"v{base}", "--env", "none", "--no-release-builds",
                    "--questions", "0", "--json", "--jobs", str(jobs),
                    "--shards", str(shards)]  # fmt: skip
            for turn in range(rounds):
                if turn:  # the machine's speed drifts: each round has its own reference
                    plain = measured(f"plain pytest head+base, round {turn + 1}", 1, plain_runs)
                    rows.append((plain, plain))
                for tag, code in codes:  # alternating, so each tool revision sees the same load
                    for processes in ("resident", "fresh") if fresh else ("resident",):
                        key = f"{jobs}-{processes}-{tag}-{turn}"
                        ledger = f"sqlite:///{work / f'ledger-{key}.db'}"
                        os.environ["LEDGER_WORKTREES_DIR"] = str(work / f"worktrees-{key}")
                        argv = [*gate, "--ledger", ledger, "--shard-processes", processes]
                        label = f"gate --jobs {jobs} --shards {shards} {processes}"
                        label += f" {tag}" if len(codes) > 1 else ""
                        rows.append((measured(label, jobs, [(argv, code)]), plain))
        print(f"{name} {base} -> {head} on {os.cpu_count()} cores")
        heads = f"{'wall s':>8} {'CPU s':>8} {'CPU x':>6} {'limit x':>8} {'idle core-s':>12}"
        print(f"  {'':40} {heads}")
        for row, reference in rows:
            limit = reference.cpu / row.jobs
            print(
                f"  {row.label:40} {row.wall:8.1f} {row.cpu:8.1f} {row.cpu / reference.cpu:6.2f} "
                f"{row.wall / limit:8.2f} {max(0.0, row.jobs * row.wall - row.cpu):12.1f}"
            )
        print(json.dumps({"project": name, "rows": [vars(r) for r, _ in rows]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", action="append", choices=sorted(PROJECTS))
    parser.add_argument("--jobs", default=None, help="comma-separated N (default 1,2,4.. cores)")
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--no-fresh", action="store_true",
                        help="leave out the gate with a process per shard (the reference of "
                             "resident workers)")  # fmt: skip
    parser.add_argument(
        "--code", action="append", default=[], metavar="LABEL=CHECKOUT",
        help="gate with this checkout's release_ledger (repeat to compare revisions of the "
        "tool side by side; default: this one)",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="gate rows this many times, alternating the --code checkouts, each round after "
        "a plain pytest row of its own (the ratios' reference)",
    )  # fmt: skip
    args = parser.parse_args()
    codes = tool_checkouts(parser, args.code)
    cores = os.cpu_count() or 2
    jobs = [int(j) for j in args.jobs.split(",")] if args.jobs else []
    if not jobs:
        n = 1
        while n < cores:
            jobs.append(n)
            n *= 2
        jobs.append(cores)
    for name in args.project or ["parso"]:
        run(name, jobs, args.shards, not args.no_fresh, codes or [("", ROOT)], args.rounds)


if __name__ == "__main__":
    main()
