"""Gate overhead (issue 4, 17a): a repeat `ledger gate` against plain pytest at head, then base.

Run: `python bench/gate_overhead.py` (options: --files 24 --tests 5 --jobs 2 --repeat 2
--sleep 0.05 --work 20000). It generates a real pure-Python suite (24 files of a few tests, each
a little sleep and a little compute, so a file takes about half a second alone), commits it in a
git repository with revisions v0, v1, ... v<repeat>, rc, and times, side by side in one run:

- reference: `python -m pytest` over the whole suite in a checkout of rc, then in a checkout of
  the base, one process each, in sequence (checkouts made beforehand, not timed);
- the gate's own shards (its plan) run by hand, `--jobs` at once: the floor for any gate;
- gate, measurements reused: `ledger gate --base v<k> --head rc` after a warm-up gate
  `--base v0` in the same ledger (files measured there and reused; each v<k> is a base no
  earlier gate ran, so its shards really run);
- gate, measurements and baseline reused: the last gate again (only head runs).

Each gate is a real `python -m release_ledger` process (start-up, checkouts, ledger included).
Best of
--repeat for each figure; CPU seconds of all processes beside wall seconds, so a loaded machine
can be told apart from overhead. Target: gate (measurements reused) / plain <= 1.0 on 2 cores.
Per-phase seconds come from the ledger's events.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.gitrepo import commit, git, make_repo, tag  # noqa: E402

TARGET = 1.0

TEST_FILE = '''"""Generated suite file {index}."""

import time


def _work(n):
    return sum(i * i for i in range(n))

'''
TEST_CASE = """
def test_{index}_{case}():
    time.sleep({sleep})
    assert _work({work}) > 0
"""


def suite(
    files: int, tests: int, marker: str, sleep: float = 0.05, work: int = 20_000
) -> dict[str, str]:
    out = {}
    for index in range(files):
        body = TEST_FILE.format(index=index) + f"# {marker}\n"
        for case in range(tests):
            body += TEST_CASE.format(index=index, case=case, sleep=sleep, work=work)
        out[f"tests/test_gen_{index:02d}.py"] = body
    out["pyproject.toml"] = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
    return out


def build_repo(
    workdir: Path, files: int, tests: int, repeats: int, sleep: float = 0.05, work: int = 20_000
) -> Path:
    """History v0, v1, ... v{repeats}, rc: the same suite, so every v is a fresh base for rc."""
    repo = make_repo(workdir, suite(files, tests, "v0", sleep, work))
    tag(repo, "v0")
    for k in range(1, repeats + 1):
        commit(repo, {"README.md": f"v{k}\n"}, f"v{k}")
        tag(repo, f"v{k}")
    commit(repo, {"README.md": "rc\n"}, "rc")
    tag(repo, "rc")
    return repo


def env_for(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LEDGER_URL"}
    env["PYTHONPATH"] = str(ROOT)
    env["LEDGER_WORKTREES_DIR"] = str(workdir / "worktrees")
    return env


def timed(argv: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> tuple[
    float, str
]:  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in ok:
        raise SystemExit(f"{' '.join(argv[:6])}... exited {done.returncode}:\n{done.stderr}")
    return elapsed, done.stdout


def children_cpu() -> float:
    """CPU seconds of every finished descendant (a gate's pytest processes included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def checkout(workdir: Path, repo: Path, rev: str) -> Path:
    path = workdir / f"plain-{rev}"
    if not path.exists():
        git(repo, "worktree", "add", "--detach", "--quiet", str(path), rev)
    return path


def reference(workdir: Path, repo: Path, env: dict[str, str], base: str) -> tuple[float, float]:
    """Plain pytest over the suite at rc, then at `base`, one process each, in sequence."""
    total, cpu = 0.0, children_cpu()
    for rev in ("rc", base):
        path = checkout(workdir, repo, rev)
        seconds, _ = timed(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], path, env
        )
        total += seconds
    return total, children_cpu() - cpu


def by_hand(
    workdir: Path, repo: Path, env: dict[str, str], base: str, shards: list[list[str]], jobs: int
) -> tuple[float, float]:
    """The gate's own shard commands at both revisions, `jobs` at a time, with no gate around."""
    runs = [
        (checkout(workdir, repo, rev), files, workdir / f"junit-{rev}-{i}.xml")
        for i, files in enumerate(shards)
        for rev in ("rc", base)
    ]

    def one(run: tuple[Path, list[str], Path]) -> float:
        cwd, files, junit = run
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                "-o", "junit_family=xunit1", f"--junitxml={junit}", *files]  # fmt: skip
        return timed(argv, cwd, env)[0]

    start, cpu = time.perf_counter(), children_cpu()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, runs))
    return time.perf_counter() - start, children_cpu() - cpu


def gate(workdir: Path, repo: Path, env: dict[str, str], base: str, jobs: int) -> tuple[
    tuple[float, float], dict[str, object]
]:  # fmt: skip
    argv = [
        sys.executable, "-m", "release_ledger", "gate", "--base", base, "--head", "rc",
        "--repo", str(repo),
        "--jobs", str(jobs), "--questions", "0", "--json",
        "--ledger", f"sqlite:///{workdir / 'ledger.db'}",
    ]  # fmt: skip
    cpu = children_cpu()
    seconds, out = timed(argv, workdir, env)
    cpu = children_cpu() - cpu
    document: dict[str, object] = json.loads(out)
    if document["status"] != "passed":
        raise SystemExit(f"the gate did not pass: {document}")
    return (seconds, cpu), document


def run_events(workdir: Path, run_id: str, env: dict[str, str]) -> list[dict[str, object]]:
    argv = [sys.executable, "-m", "release_ledger", "export", run_id,
            "--ledger", f"sqlite:///{workdir / 'ledger.db'}"]  # fmt: skip
    _, out = timed(argv, workdir, env)
    return [json.loads(line)["event"] for line in out.splitlines() if line.strip()]


def phases(events: list[dict[str, object]]) -> str:
    """Seconds between the run's milestones, from the events' own timestamps."""
    at = [(str(e["kind"]), datetime.fromisoformat(str(e["at"]).replace("Z", "+00:00")))
          for e in events]  # fmt: skip
    start = at[0][1]
    marks: dict[str, float] = {}
    for kind, when in at:
        marks.setdefault(kind, (when - start).total_seconds())
    last_attempt = max(
        ((w - start).total_seconds() for k, w in at if k == "ShardAttemptRecorded"), default=0.0
    )
    return (
        f"discovered +{marks.get('TestFilesDiscovered', 0):.2f}s, "
        f"planned +{marks.get('ShardsPlanned', 0):.2f}s, "
        f"first attempt +{marks.get('ShardAttemptRecorded', 0):.2f}s, "
        f"last attempt +{last_attempt:.2f}s, "
        f"completed +{marks.get('RunCompleted', 0):.2f}s ({len(events)} events)"
    )


def planned_shards(events: list[dict[str, object]]) -> list[list[str]]:
    for e in events:
        if e["kind"] == "ShardsPlanned":
            return [list(s["files"]) for s in e["shards"]]  # type: ignore[attr-defined]
    raise SystemExit("no ShardsPlanned event")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--tests", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="best of N for each figure")
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds each test sleeps")
    parser.add_argument("--work", type=int, default=20_000, help="squares each test sums")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gate-overhead-") as tmp:
        workdir = Path(tmp)
        repo = build_repo(workdir, args.files, args.tests, args.repeat, args.sleep, args.work)
        env = env_for(workdir)
        load = os.getloadavg()[0]
        print(
            f"suite: {args.files} files x {args.tests} tests (sleep {args.sleep} s, "
            f"work {args.work}); jobs {args.jobs}; "
            f"cpus {os.cpu_count()}; load {load:.1f}; best of {args.repeat}"
        )
        (warm, warm_cpu), _ = gate(workdir, repo, env, "v0", args.jobs)
        plain, hand, reused = [], [], []
        shards: list[list[str]] = []
        story = ""
        for k in range(1, args.repeat + 1):
            base = f"v{k}"  # a base no earlier gate ran: its shards really run
            plain.append(reference(workdir, repo, env, base))
            figure, document = gate(workdir, repo, env, base, args.jobs)
            reused.append(figure)
            events = run_events(workdir, str(document["run_id"]), env)
            story = phases(events)
            shards = planned_shards(events)
            hand.append(by_hand(workdir, repo, env, base, shards, args.jobs))
        repeat, document = gate(workdir, repo, env, f"v{args.repeat}", args.jobs)
        repeat_story = phases(run_events(workdir, str(document["run_id"]), env))
        ref, ref_cpu = min(plain)

        def row(label: str, figures: list[tuple[float, float]]) -> None:
            wall, cpu = min(figures)
            runs = ", ".join(f"{w:.2f}" for w, _ in figures)
            print(
                f"{label:<40} {wall:7.2f} s  ratio {wall / ref:5.2f}   cpu {cpu:6.2f} s  "
                f"ratio {cpu / ref_cpu:5.2f}   (wall: {runs})"
            )

        print(f"{'':<40} {'wall':>9}  {'':>11}   {'cpu (all processes)':>22}")
        row("plain pytest at head then base", plain)
        row(f"the gate's {len(shards)} shards x 2 by hand, {args.jobs} at once", hand)
        row("warm-up gate (measures every file)", [(warm, warm_cpu)])
        row("gate, measurements reused", reused)
        print("    " + story)
        row("gate, measurements + base reused", [repeat])
        print("    " + repeat_story)
        gate_wall, gate_cpu = min(reused)
        hand_wall, hand_cpu = min(hand)
        print(
            f"gate over its own shards run by hand: {gate_wall - hand_wall:+.2f} s wall, "
            f"{gate_cpu - hand_cpu:+.2f} s cpu"
        )
        ok = gate_wall / ref <= TARGET
        print(
            f"target: gate (measurements reused) / plain <= {TARGET}: "
            + ("met" if ok else "MISSED")
        )
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
