"""Real-world corpus (issue 12, item 7): per project, the gate against plain pytest.

Run: `python bench/realworld.py [--project NAME]... [--shards 2] [--jobs 2]`. For each project of
the corpus in `tests/realworld/` (a pair of consecutive releases built from their public sdists
into a git repository; sdists cached outside the repository, see `tests/realworld/sdists.py`) it
prints: test files, tests at head, the gate's verdict, the gate's wall seconds (a real
`python -m cli gate` process, fresh ledger, so files are measured and both revisions run), plain
`python -m pytest` wall seconds in a checkout of head plus one of base (one process each, in
sequence, checkouts made beforehand), and the ratio gate / plain.

The projects run on this interpreter until per-revision environments exist, so only projects
whose suites need nothing beyond pytest are listed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.gitrepo import git  # noqa: E402
from tests.realworld.sdists import release_pair  # noqa: E402

# name, base release, head release, the test path plain pytest is given
PROJECTS: tuple[tuple[str, str, str, str], ...] = (
    ("toolz", "0.12.1", "1.0.0", "toolz/tests"),
    ("more-itertools", "10.7.0", "10.8.0", "tests"),
)


def _timed(argv: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, done


def measure(
    name: str, base: str, head: str, tests: str, shards: int, jobs: int
) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="realworld-") as scratch:
        work = Path(scratch)
        try:
            repo = release_pair(work, name, base, head)
        except BaseException as error:  # pytest.skip's exception when an sdist is unavailable
            if type(error).__name__ != "Skipped":
                raise
            return {"project": name, "error": str(error)}
        plain = 0.0
        for version in (head, base):
            checkout = work / f"checkout-{version}"
            git(repo, "worktree", "add", "--detach", "--quiet", str(checkout), f"v{version}")
            seconds, _ = _timed(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests], checkout
            )
            plain += seconds
        ledger = f"sqlite:///{work / 'ledger' / 'ledger.db'}"
        seconds, done = _timed(
            [sys.executable, "-m", "cli", "gate", "--repo", str(repo), "--base", f"v{base}",
             "--shards", str(shards), "--jobs", str(jobs), "--questions", "0", "--json",
             "--ledger", ledger],
            ROOT,
        )  # fmt: skip
        try:
            document = json.loads(done.stdout)
        except json.JSONDecodeError:
            return {"project": name, "error": (done.stderr or done.stdout)[-300:]}
        exported = subprocess.run(
            [sys.executable, "-m", "cli", "export", document["run_id"], "--ledger", ledger],
            cwd=ROOT, capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        files = 0
        for line in exported.splitlines():
            event = json.loads(line)["event"]
            if event.get("kind") == "TestFilesDiscovered":
                files = len(event["files"])
        return {
            "project": f"{name} {base} -> {head}",
            "files": files,
            "tests": document["tests"]["head"],
            "verdict": document["status"],
            "gate_s": round(seconds, 1),
            "plain_s": round(plain, 1),
            "ratio": round(seconds / plain, 2) if plain else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", action="append", help="only these projects (by name)")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    chosen = [p for p in PROJECTS if not args.project or p[0] in args.project]
    print(f"{'project':36} {'files':>5} {'tests':>6} {'verdict':>10} {'gate s':>7} "
          f"{'plain s':>7} {'ratio':>5}")  # fmt: skip
    for name, base, head, tests in chosen:
        row = measure(name, base, head, tests, args.shards, args.jobs)
        if "error" in row:
            print(f"{name:36} error: {row['error']}")
            continue
        print(f"{row['project']!s:36} {row['files']:>5} {row['tests']:>6} {row['verdict']!s:>10} "
              f"{row['gate_s']:>7} {row['plain_s']:>7} {row['ratio']!s:>5}")  # fmt: skip


if __name__ == "__main__":
    main()
