"""What confining environment builds costs: one real project's test environment prepared from
nothing (a fresh environments cache, uv's cache warm) with each build step in bubblewrap and
without, alternately, side by side.

    python bench/build_confinement.py                      # markdown-it-py 4.3.0
    python bench/build_confinement.py --project click==8.1.8 --rounds 3

Inside bwrap the environments cache and uv's cache are separate bind mounts, so uv cannot
hard-link from its cache into a new venv (EXDEV) and copies instead: that copy is most of the
cost inside. The figure is per environment built; a cached environment is reused unconfined
and costs the same either way.

Measured (2 shared cores, 2026-12-04), markdown-it-py 4.3.0 (tox's py311 environment, 19
packages), median of 3: 1.85 s in bwrap, 6.36 s unconfined (0.29x; 2.78 s and 7.70 s in an
earlier run). Inside, uv's install
took 0.8-1.4 s against 0.5 s (copies), and `tox config` 0.41 s against 5.46 s (outside, 4.1 s
of it is virtualenv's interpreter discovery for each of the project's 24 tox environments).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from release_ledger.adapters.executors import build_sandbox, environment, sandbox  # noqa: E402
from release_ledger.adapters.git import Worktrees  # noqa: E402
from tests.gitrepo import make_repo  # noqa: E402
from tests.realworld.sdists import _unpack, sdist  # noqa: E402


def _prepare(checkout: Path, repo: Path, work: Path, confined: bool) -> tuple[float, str]:
    envs = Path(tempfile.mkdtemp(prefix="envs-", dir=work))
    confine = None
    if confined:
        confine, _ = build_sandbox.confinement(
            python=sys.executable, repo=repo, checkout=checkout, envs_dir=envs, hidden=[]
        )
    started = time.perf_counter()
    prepared = environment.prepare(
        str(checkout), mode="auto", python=sys.executable, cache=str(envs), commit="bench",
        confine=confine,
    )  # fmt: skip
    took = time.perf_counter() - started
    shutil.rmtree(envs, ignore_errors=True)
    subprocess.run(["git", "clean", "-qfdx"], cwd=checkout, check=False)
    packages = len(str(prepared.get("packages", "")).split())
    tried = [f"{t.get('source')}:{t.get('outcome')}" for t in prepared.get("tried", [])]  # type: ignore[union-attr]
    return took, f"{prepared.get('status')} {packages} packages, tried {tried}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", default="markdown-it-py==4.3.0")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if sandbox.bwrap() is None:
        raise SystemExit("bubblewrap cannot run here: nothing to compare")
    name, version = args.project.split("==")
    work = Path(tempfile.mkdtemp(prefix="bench-build-", dir="/var/tmp"))
    try:
        repo = make_repo(work, {"placeholder": ""})
        _unpack(sdist(name, version), repo)
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
        subprocess.run(["git", "commit", "-qm", "sdist"], cwd=repo, check=True)
        checkout = Worktrees(repo, work / "worktrees").checkout("HEAD")  # as the gate has it
        print(f"{name} {version}: an environment from nothing, uv's cache warm")
        _prepare(checkout, repo, work, confined=False)  # warm uv's cache with every download
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for confined in (False, True):
                took, status = _prepare(checkout, repo, work, confined)
                print(f"  {'in bwrap' if confined else 'unconfined'}: {took:.2f} s, {status}")
                if not status.startswith("ready"):
                    raise SystemExit(f"the environment is {status} (confined: {confined})")
                times[confined].append(took)
        plain, boxed = statistics.median(times[False]), statistics.median(times[True])
        print(f"  unconfined: {plain:.2f} s  (runs {', '.join(f'{t:.2f}' for t in times[False])})")
        print(f"  in bwrap:   {boxed:.2f} s  (runs {', '.join(f'{t:.2f}' for t in times[True])})")
        print(f"  ratio: {boxed / plain:.2f}x the unconfined build")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
