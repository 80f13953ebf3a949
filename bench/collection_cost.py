"""What collection alone costs in a first gate (issue 41: "collection not measured alone").

Run: `python bench/collection_cost.py [--project toolz] [--project more-itertools] [--repeat 3]`.

For each project (a pair of consecutive releases built from their public sdists into a
two-commit repository, `tests/realworld/sdists.py`) it runs first gates with the defaults (a
fresh ledger, fresh checkouts, a cold environment cache, release builds on), and times, inside
the gate's own process, each revision's collection by the declared invocation
(`LocalExecutor.collect`: its isolated checkout, the sandboxed `--collect-only` run in the
revision's environment, reading its items) apart from the environment build it waits for
(`environment_for`, called first and timed on its own). The gate's process is this tool's
command with that one method wrapped by a timer: nothing the gate does is changed.

It prints, per gate: each revision's environment seconds and collection seconds, the discover
step's wall (from `RunStarted` to `TestFilesDiscovered` in the ledger's events, head's and
base's collections running at once) and the whole gate's wall, and collection's share of it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.realworld.sdists import release_pair  # noqa: E402

# name, base, head
PROJECTS: dict[str, tuple[str, str]] = {
    "toolz": ("0.12.1", "1.0.0"),
    "more-itertools": ("10.7.0", "10.8.0"),
    "python-dotenv": ("1.2.3", "1.2.4"),
}

# The gate's command with `LocalExecutor.collect` timed: the environment it waits for first,
# then the collection itself; one JSON line per call to the file named by the first argument.
TIMED_GATE = """
import json, sys, threading, time
from release_ledger.adapters.executors import local
out = sys.argv.pop(1)
collect, lock = local.LocalExecutor.collect, threading.Lock()

def timed(self, commit, *args, **kwargs):
    started = time.perf_counter()
    self.environment_for(commit)
    ready = time.perf_counter()
    found = collect(self, commit, *args, **kwargs)
    done = time.perf_counter()
    items = len(found[0]) if found[0] is not None else None
    line = {"commit": commit, "environment_s": ready - started, "collect_s": done - ready,
            "items": items, "why": found[1]}
    with lock, open(out, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\\n")
    return found

local.LocalExecutor.collect = timed
sys.argv[0] = "ledger"
from release_ledger.cli.main import main
main()
"""


def _at(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["at"]))


def first_gate(work: Path, repo: Path, base: str, head: str, tag: str) -> dict[str, Any]:
    """One first gate with the defaults; its collections' timings and its events' times."""
    env = dict(os.environ, LEDGER_WORKTREES_DIR=str(work / f"worktrees-{tag}"),
               LEDGER_ENVS_DIR=str(work / f"envs-{tag}"))  # fmt: skip
    env.pop("LEDGER_URL", None)
    ledger = f"sqlite:///{work / f'{tag}.db'}"
    timings = work / f"collect-{tag}.jsonl"
    argv = [sys.executable, "-c", TIMED_GATE, str(timings), "gate", "--repo", str(repo),
            "--base", f"v{base}", "--questions", "0", "--json", "--ledger", ledger]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"gate exited {done.returncode}: {done.stderr[-800:]}")
    document = json.loads(done.stdout)
    exported = subprocess.run(
        [sys.executable, "-m", "release_ledger", "export", document["run_id"], "--ledger", ledger],
        cwd=ROOT, capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    events = [json.loads(line)["event"] for line in exported.splitlines()]
    first = {e["kind"]: e for e in reversed(events)}
    pythons = {
        e["revision"]: e["python"] for e in events if e["kind"] == "EnvironmentPrepared"
    }  # fmt: skip
    calls = [json.loads(line) for line in timings.read_text(encoding="utf-8").splitlines()]
    revision = {document["head"]: "head", document["base"]: "base"}
    return {
        "wall": wall,
        "status": document["status"],
        "discover": (_at(first["TestFilesDiscovered"]) - _at(first["RunStarted"])).total_seconds(),
        "events": (_at(events[-1]) - _at(first["RunStarted"])).total_seconds(),
        "calls": {revision.get(c["commit"], c["commit"][:12]): c for c in calls},
        "how": first["TestFilesDiscovered"].get("collected_by", ""),
        "plain": {
            rev: plain_collection(work, repo, f"v{version}", pythons[rev], f"{tag}-{rev}")
            for rev, version in (("head", head), ("base", base))
            if pythons.get(rev)
        },
    }


def plain_collection(work: Path, repo: Path, rev: str, python: str, tag: str) -> float:
    """`python -m pytest --collect-only -q` as a user would type it, in a worktree of `rev`,
    with the environment the gate built for it: the collection's own cost, without the
    gate's isolated checkout, sandbox and plugin."""
    checkout = work / f"plain-{tag}"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet",
                    str(checkout), rev], check=True)  # fmt: skip
    argv = [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    started = time.perf_counter()
    subprocess.run(argv, cwd=checkout, capture_output=True, check=False)
    return time.perf_counter() - started


def run_project(name: str, repeat: int) -> None:
    base, head = PROJECTS[name]
    with tempfile.TemporaryDirectory(prefix="collection-cost-") as scratch:
        work = Path(scratch)
        repo = release_pair(work, name, base, head)
        print(f"{name} {base} -> {head}: first gates with defaults (cold environment cache)")
        shares = []
        for n in range(repeat):
            g = first_gate(work, repo, base, head, f"g{n}")
            parts = []
            for rev in ("head", "base"):
                c = g["calls"].get(rev)
                if c is None:
                    parts.append(f"{rev}: not collected")
                    continue
                why = f"; {c['why']}" if c["why"] else ""
                plain = g["plain"].get(rev)
                parts.append(
                    f"{rev}: environment {c['environment_s']:.2f} s, collection "
                    f"{c['collect_s']:.2f} s ({c['items']} items{why}; plain "
                    f"--collect-only {plain:.2f} s)"
                )
            both = [g["calls"][r]["collect_s"] for r in ("head", "base") if r in g["calls"]]
            share = max(both, default=0.0) / g["wall"]
            shares.append((sum(both), max(both, default=0.0), g["wall"]))
            print(f"  gate {n + 1}: {g['status']}, wall {g['wall']:.1f} s (events "
                  f"{g['events']:.1f} s), discover step {g['discover']:.1f} s; "
                  + "; ".join(parts)
                  + f"; collection's wall share {share:.1%} ({g['how']})")  # fmt: skip
        total = statistics.median(s[0] for s in shares)
        longest = statistics.median(s[1] for s in shares)
        wall = statistics.median(s[2] for s in shares)
        print(f"  medians: collection {total:.2f} s head + base summed, the longer one "
              f"{longest:.2f} s (they run at once) in a {wall:.1f} s gate "
              f"({total / wall:.1%} summed, {longest / wall:.1%} the longer)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", action="append", choices=sorted(PROJECTS))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name in args.project or ["toolz", "more-itertools"]:
        run_project(name, args.repeat)


if __name__ == "__main__":
    main()
