"""A hang at head (issue 28): how long the gate takes to its verdict when one test of a suite of
100+ files never returns at head, against plain pytest over the same suite at base.

Run: `python bench/hang.py` (options: --files 120 --sleep 0.1 --jobs 2 --timeout 1200). It
generates a real suite of `--files` files (two tests each, a little sleep and a little compute),
commits it as v1, then a head where one test of one file loops forever, and times, side by side
in one run:

- reference: `python -m pytest` over the whole suite at base (one process);
- the gate: `ledger gate --base v1` in a fresh ledger (a first gate: nothing measured before),
  with the default time limits (x10 of what base's run took, at least 10 s) and `--timeout`.

Target: gate / plain < 3 (before time limits the gate waited `--timeout` per round: 1200 s, then
1200 s again). Prints the verdict, the hung test, both times and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.gitrepo import commit, git, make_repo, tag  # noqa: E402

TEST = (
    "import time\n\n"
    "def _work(n):\n    return sum(i * i for i in range(n))\n\n"
    "def test_first():\n    time.sleep({sleep})\n    assert _work(20000) > 0\n\n"
    "def test_second():\n    time.sleep({sleep})\n    assert _work(20000) > 0\n"
)
HANGS = "\ndef test_second():\n    while True:\n        time.sleep(0.01)\n"


def suite(files: int, sleep: float) -> dict[str, str]:
    return {f"tests/test_{n:03d}.py": TEST.format(sleep=sleep) for n in range(files)}


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=120)
    parser.add_argument("--sleep", type=float, default=0.1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1200.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hang-") as scratch:
        work = Path(scratch)
        files = suite(args.files, args.sleep)
        repo = make_repo(work, files)
        tag(repo, "v1")
        broken = sorted(files)[args.files // 2]
        commit(repo, {broken: TEST.format(sleep=args.sleep).split("\ndef test_second")[0] + HANGS},
               "head: one test never returns")  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        base = work / "base"
        git(repo, "worktree", "add", "-q", "--detach", str(base), "v1")
        plain_s, _ = timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           base, env)  # fmt: skip
        gate_s, out = timed(
            [sys.executable, "-m", "release_ledger", "gate", "--base", "v1", "--repo", str(repo),
             "--ledger", f"sqlite:///{work}/ledger.db", "--jobs", str(args.jobs),
             "--timeout", str(args.timeout), "--env", "none", "--no-release-builds",
             "--questions", "0", "--json"],
            work, env,
        )  # fmt: skip
        document = json.loads(out) if out.strip() else {}
        print(f"suite: {args.files} files, {2 * args.files} tests; the hang in {broken}")
        print(f"plain pytest at base:  {plain_s:7.1f} s")
        ratio = gate_s / plain_s
        print(f"gate to its verdict:   {gate_s:7.1f} s   (ratio {ratio:.2f}, target < 3)")
        print(f"verdict: {document.get('status')}; hung: "
              f"{[h['test'] for h in document.get('hung', [])]}")  # fmt: skip


if __name__ == "__main__":
    main()
