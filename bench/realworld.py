"""Real-world corpus (issue 12, item 7): per project, the gate against plain pytest.

Run: `python bench/realworld.py [--project NAME]... [--large] [--shards 2] [--jobs 2]`. For each
project of the corpus in `tests/realworld/` (a pair of consecutive releases built from their
public sdists into a git repository; sdists cached outside the repository, see
`tests/realworld/sdists.py`) it prints: test files, tests at head, the gate's verdict, the
gate's wall seconds (a real `python -m release_ledger gate` process, fresh ledger and a fresh
environment
cache, so files are measured, both revisions' environments built and both revisions run), plain
`python -m pytest` wall seconds in a checkout of head plus one of base (one process each, in
sequence, each in the project's own environment built beforehand, or this interpreter for the
projects that need nothing beyond pytest), and the ratio gate / plain. `--large` adds the
projects too slow for CI (networkx).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from release_ledger.adapters.executors.env_installer import find_uv  # noqa: E402
from tests.gitrepo import git  # noqa: E402
from tests.realworld.sdists import project_python, release_pair  # noqa: E402


@dataclass(frozen=True)
class Project:
    name: str
    base: str
    head: str
    tests: tuple[str, ...] = ()  # the paths plain pytest is given (none: its own testpaths)
    requirements: tuple[str, ...] = ()  # plain pytest's own environment (none: this interpreter)
    gate_args: tuple[str, ...] = field(default=())  # `{uv}` is replaced by the uv binary
    large: bool = False


PROJECTS: tuple[Project, ...] = (
    Project("toolz", "0.12.1", "1.0.0", ("toolz/tests",)),
    Project("more-itertools", "10.7.0", "10.8.0", ("tests",)),
    Project(
        "validators",
        "0.35.0",
        "0.36.0",
        requirements=(".[crypto-eth-addresses]", "pytest>=9.0.3"),
        gate_args=(
            "--env",
            "{uv} pip install -q --python {python} .[crypto-eth-addresses] pytest>=9.0.3",
        ),
    ),
    Project(
        "typeguard",
        "4.6.0",
        "4.6.1",
        requirements=(".", "coverage[toml]>=7", "pytest>=7", "mypy>=1.2.0"),
    ),
    Project("parso", "0.8.6", "0.8.7", requirements=(".[testing]",)),
    Project("markdown-it-py", "4.2.0", "4.3.0", requirements=(".[testing]",)),
    Project("networkx", "3.4.2", "3.5", ("networkx",), large=True),
)


def _plain_seconds(project: Project, repo: Path, work: Path) -> float:
    seconds = 0.0
    for version in (project.head, project.base):
        checkout = work / f"checkout-{version}"
        git(repo, "worktree", "add", "--detach", "--quiet", str(checkout), f"v{version}")
        env = dict(os.environ)
        python = sys.executable
        if project.requirements:
            python = project_python(work / f"venv-{version}", checkout, *project.requirements)
            env.pop("PYTHONPATH", None)
        env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
        started = time.perf_counter()
        subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *project.tests],
            cwd=checkout, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        seconds += time.perf_counter() - started
    return seconds


def measure(project: Project, shards: int, jobs: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="realworld-") as scratch:
        work = Path(scratch)
        try:
            repo = release_pair(work, project.name, project.base, project.head)
        except BaseException as error:  # pytest.skip's exception when an sdist is unavailable
            if type(error).__name__ != "Skipped":
                raise
            return {"project": project.name, "error": str(error)}
        plain = _plain_seconds(project, repo, work)
        ledger = f"sqlite:///{work / 'ledger' / 'ledger.db'}"
        extra = [a.replace("{uv}", find_uv() or "uv") for a in project.gate_args]
        env = dict(os.environ)
        env.update(LEDGER_WORKTREES_DIR=str(work / "worktrees"), LEDGER_ENVS_DIR=str(work / "envs"))
        env.pop("LEDGER_URL", None)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "release_ledger", "gate", "--repo", str(repo), "--base",
             f"v{project.base}", "--shards", str(shards), "--jobs", str(jobs), "--questions",
             "0", "--json", "--ledger", ledger, *extra],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        try:
            document = json.loads(done.stdout)
        except json.JSONDecodeError:
            return {"project": project.name, "error": (done.stderr or done.stdout)[-300:]}
        exported = subprocess.run(
            [sys.executable, "-m", "release_ledger", "export", document["run_id"],
             "--ledger", ledger],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        files = 0
        for line in exported.splitlines():
            event = json.loads(line)["event"]
            if event.get("kind") == "TestFilesDiscovered":
                files = len(event["files"])
        return {
            "project": f"{project.name} {project.base} -> {project.head}",
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
    parser.add_argument("--large", action="store_true", help="also the projects too slow for CI")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    chosen = [
        p
        for p in PROJECTS
        if ((p.name in args.project) if args.project else (args.large or not p.large))
    ]
    print(f"{'project':36} {'files':>5} {'tests':>6} {'verdict':>10} {'gate s':>7} "
          f"{'plain s':>7} {'ratio':>5}")  # fmt: skip
    for project in chosen:
        row = measure(project, args.shards, args.jobs)
        if "error" in row:
            print(f"{project.name:36} error: {row['error']}", flush=True)
            continue
        print(f"{row['project']!s:36} {row['files']:>5} {row['tests']:>6} "
              f"{row['verdict']!s:>10} {row['gate_s']:>7} {row['plain_s']:>7} "
              f"{row['ratio']!s:>5}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
