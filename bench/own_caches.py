"""What a head's caches of its own cost (issue 38): one real project's test environment
prepared from nothing (a fresh environments cache), each step in bubblewrap, once with uv's and
pip's shared caches (warm: how base builds, and how head built before) and once with a head's
own, cold caches (`build_sandbox.own_caches`: its first gate; a later gate of the same head
finds them warm), alternately, side by side.

    python bench/own_caches.py                      # markdown-it-py 4.3.0
    python bench/own_caches.py --project click==8.1.8 --rounds 3

Measured: see docs/sandbox.md (*Caches*).
"""

from __future__ import annotations

import argparse
import os
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


def _prepare(checkout: Path, repo: Path, work: Path, own: bool) -> tuple[float, str]:
    envs = Path(tempfile.mkdtemp(prefix="envs-", dir=work))
    caches = build_sandbox.own_caches(envs, "bench") if own else None
    confine, _ = build_sandbox.confinement(
        python=sys.executable, repo=repo, checkout=checkout, envs_dir=envs, hidden=[],
        caches=caches,
    )  # fmt: skip
    started = time.perf_counter()
    prepared = environment.prepare(
        str(checkout), mode="auto", python=sys.executable, cache=str(envs), commit="bench",
        confine=confine, base_env={**os.environ, **(caches or {})}, own_caches=own,
    )  # fmt: skip
    took = time.perf_counter() - started
    shutil.rmtree(envs, ignore_errors=True)
    subprocess.run(["git", "clean", "-qfdx"], cwd=checkout, check=False)
    packages = len(str(prepared.get("packages", "")).split())
    return took, f"{prepared.get('status')} {packages} packages"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", default="markdown-it-py==4.3.0")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if sandbox.bwrap() is None:
        raise SystemExit("bubblewrap cannot run here: builds are not confined")
    name, version = args.project.split("==")
    work = Path(tempfile.mkdtemp(prefix="bench-caches-", dir="/var/tmp"))
    try:
        repo = make_repo(work, {"placeholder": ""})
        _unpack(sdist(name, version), repo)
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
        subprocess.run(["git", "commit", "-qm", "sdist"], cwd=repo, check=True)
        checkout = Worktrees(repo, work / "worktrees").checkout("HEAD")
        print(f"{name} {version}: an environment from nothing, in bwrap")
        _prepare(checkout, repo, work, own=False)  # warm the shared caches
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for own in (False, True):
                took, status = _prepare(checkout, repo, work, own)
                label = "own caches, cold" if own else "shared caches, warm"
                print(f"  {label}: {took:.2f} s, {status}")
                if not status.startswith("ready"):
                    raise SystemExit(f"the environment is {status} (own caches: {own})")
                times[own].append(took)
        shared, own_ = statistics.median(times[False]), statistics.median(times[True])
        print(f"  shared, warm: {shared:.2f} s  ({', '.join(f'{t:.2f}' for t in times[False])})")
        print(f"  own, cold:    {own_:.2f} s  ({', '.join(f'{t:.2f}' for t in times[True])})")
        print(f"  ratio: {own_ / shared:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
