"""Real release pairs against the project's own CI run (issue 37, part 8).

Run: `python bench/ci_pairs.py [--project NAME]... [--no-mutant] [--ci]`.

Each pair is two consecutive releases of a real project built from their public sdists into a
git repository (base release tagged, then head release; sdists cached outside the repository,
see `tests/realworld/sdists.py`), plus a *mutant*: the same pair with a one-line bug committed
at head. Each pair stands for one class of issue 37 (how the project's CI runs its suite: tox
factor environments, `{envsitepackagesdir}` doctests, `{posargs:-n auto}`, a hatch unittest
script, a nox session, ...).

Default mode runs the gate (`python -m release_ledger gate --json`, a fresh ledger and
environment cache per run) on the pair and on its mutant and compares it with the failing sets
the project's own CI command gave (`EXPECTED` in `tests/realworld/ci_pairs.py`, measured with
`--ci` and kept there as data, with the date and the tools' versions):
the gate is *right* when its status is the CI verdict (`failed` exactly when head fails tests
base does not) and its introduced set is the CI's. It prints one row per run: project, class,
CI command, CI verdict, gate status, gate's introduced count, right/wrong, and the invocation
the gate names in its events (when it records one).

`--ci` runs the project's own CI command instead (tox / nox / hatch from a tools environment,
`CI_PAIRS_TOOLS`, default `/tmp/corpus-tools/bin`: a venv with tox, tox-uv, nox, hatch, uv)
at base, head and the mutant's head, and prints the failing sets as JSON, to refresh
`EXPECTED`. Run the pairs one at a time: the suites and the gate are CPU-bound.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import defusedxml.ElementTree as ET

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.gitrepo import git  # noqa: E402
from tests.realworld.ci_pairs import (  # noqa: E402
    EXPECTED_MEASURED,
    PAIRS,
    Pair,
    expected_introduced,
    normalized,
)
from tests.realworld.sdists import mutate, release_pair  # noqa: E402

TOOLS = Path(os.environ.get("CI_PAIRS_TOOLS", "/tmp/corpus-tools/bin"))


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(key, None)
    return env


def build(pair: Pair, work: Path, mutant: bool) -> Path:
    """The pair's repository (and its mutant: the one-line bug committed at head)."""
    repo = release_pair(work, pair.name, pair.base, pair.head)
    if mutant:
        m = pair.mutation
        mutate(repo, m.path, m.old, m.new)
    return repo


# --- the project's own CI run -------------------------------------------------------------


def _junit_failures(junit: Path) -> set[str]:
    root = ET.parse(junit).getroot()
    failing = set()
    for case in root.iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        # xunit1: `classname` is the node id's path, dotted, then its classes.
        classname = case.get("classname", "")
        file = normalized(case.get("file", ""))
        dotted = file.removesuffix(".py").replace("/", ".")
        at = classname.find(dotted)
        rest = classname[at + len(dotted) :] if at >= 0 else "." + classname.rsplit(".", 1)[-1]
        tail = [part for part in rest.split(".") if part]
        failing.add("::".join([file, *tail, case.get("name", "")]))
    return failing


_UNITTEST = re.compile(r"^(?:FAIL|ERROR): (\w+) \(([\w.]+)\)", re.MULTILINE)


def _unittest_failures(output: str, top: str) -> set[str]:
    failing = set()
    for name, where in _UNITTEST.findall(output):
        parts = where.split(".")
        if parts[-1] == name:  # Python >= 3.11 names module.Class.test
            parts = parts[:-1]
        module, klass = parts[:-1], parts[-1]
        failing.add(f"{top}{'/'.join(module)}.py::{klass}::{name}")
    return failing


def run_ci(pair: Pair, repo: Path, rev: str, work: Path) -> tuple[set[str], str]:
    """Failing tests of the project's own CI command at `rev`, and the output's tail."""
    checkout = work / f"ci-{rev.replace('/', '_')}"
    git(repo, "worktree", "add", "--detach", "--quiet", str(checkout), rev)
    junit = work / f"ci-{rev}.xml"
    env = _git_env()
    env["PATH"] = os.pathsep.join([str(TOOLS), env.get("PATH", "")])
    env["PYTEST_ADDOPTS"] = f"--junitxml={junit} -o junit_family=xunit1 -p no:cacheprovider"
    words: str | list[str] = shlex.split(pair.ci)
    if words[0] == "tox":
        words = [*words, "-x", "testenv.pass_env+=PYTEST_ADDOPTS"]
    if "&&" in pair.ci:  # a shell line
        words = pair.ci
    done = subprocess.run(
        words, shell=isinstance(words, str), cwd=checkout, env=env, capture_output=True,
        text=True, timeout=1800, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    if pair.runner == "unittest":
        failing = _unittest_failures(output, pair.unittest_top)
    else:
        report = checkout / pair.junit if pair.junit else junit
        failing = _junit_failures(report) if report.is_file() else {"<no JUnit report>"}
    return failing, f"exit {done.returncode}: " + output[-1500:]


def ground_truth(pair: Pair, keep: bool) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix=f"ci-{pair.name}-"))
    try:
        repo = build(pair, work / "plain", mutant=False)
        base, base_log = set(), "no CI configuration at base"
        if pair.base_has_ci:
            base, base_log = run_ci(pair, repo, f"v{pair.base}", work)
        head, head_log = run_ci(pair, repo, f"v{pair.head}", work)
        mutant_repo = build(pair, work / "mutant", mutant=True)
        mutant, mutant_log = run_ci(pair, mutant_repo, "HEAD", work / "mutant")
        return {
            "base": sorted(base),
            "head": sorted(head),
            "mutant": sorted(mutant),
            "logs": {"base": base_log, "head": head_log, "mutant": mutant_log},
        }
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


# --- the gate -----------------------------------------------------------------------------


def _described(invocation: object) -> str:
    """The gate's own one-line rendering of a recorded invocation (as `ledger show` has it)."""
    try:
        from release_ledger.domain.invocation import TestInvocation

        return TestInvocation.model_validate(invocation).describe()
    except Exception:  # an older or newer shape: the raw JSON
        return json.dumps(invocation, sort_keys=True)[:400]


def _invocations(exported: str) -> list[str]:
    """What the gate's events say it ran, per revision: a recorded invocation where an event
    carries one (issue 37), else the environment's declared source."""
    invocations: dict[str, str] = {}
    sources: dict[str, str] = {}
    for line in exported.splitlines():
        event = json.loads(line).get("event", {})
        revision = str(event.get("revision", ""))
        value = event.get("invocation")
        if value:
            invocations[revision] = _described(value)
        if event.get("kind") == "EnvironmentPrepared" and event.get("status") == "ready":
            named = event.get("extra") or event.get("group") or ""
            sources[revision] = f"env {event.get('source') or event.get('how')} {named}".strip()
    chosen = invocations or sources
    return [f"{revision}: {text}" for revision, text in sorted(chosen.items())]


def run_gate(repo: Path, pair: Pair, work: Path, timeout: float, as_of: str) -> dict[str, object]:
    ledger = f"sqlite:///{work / 'ledger' / 'ledger.db'}"
    env = _git_env()
    env.update(LEDGER_WORKTREES_DIR=str(work / "worktrees"), LEDGER_ENVS_DIR=str(work / "envs"))
    env.pop("LEDGER_URL", None)
    env["PYTHONPATH"] = str(ROOT)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "release_ledger", "gate", "--repo", str(repo), "--base",
             f"v{pair.base}", "--shards", "2", "--jobs", "2", "--questions", "0", "--json",
             "--ledger", ledger, "--resolve-as-of", as_of],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"status": f"timeout>{timeout:.0f}s", "introduced": [], "seconds": timeout}
    seconds = round(time.perf_counter() - started, 1)
    try:
        document = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"status": f"error exit {done.returncode}", "introduced": [],
                "seconds": seconds, "log": (done.stderr or done.stdout)[-600:]}  # fmt: skip
    exported = subprocess.run(
        [sys.executable, "-m", "release_ledger", "export", document["run_id"], "--ledger",
         ledger],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    return {
        "status": document.get("status"),
        "introduced": sorted(normalized(t) for t in document.get("introduced", [])),
        "preexisting": sorted(normalized(t) for t in document.get("preexisting", []) or []),
        "tests_head": (document.get("tests") or {}).get("head"),
        "reasons": document.get("reasons"),
        "unmeasured": str(document.get("unmeasured") or "")[:300],
        "seconds": seconds,
        "invocations": _invocations(exported),
    }


def compare(pair: Pair, mutant: bool, keep: bool, timeout: float, as_of: str) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix=f"gate-{pair.name}-"))
    try:
        repo = build(pair, work, mutant)
        gate = run_gate(repo, pair, work, timeout, as_of)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    wanted = expected_introduced(pair, mutant)
    got = set(gate["introduced"])  # type: ignore[arg-type]
    if wanted is None:
        right = "?"
    else:
        status = "failed" if wanted else "passed"
        right = "right" if gate["status"] == status and got == wanted else "WRONG"
    gate.update(
        project=f"{pair.name}{' (mutant)' if mutant else ''}",
        ci_verdict="?" if wanted is None else (f"failed {len(wanted)}" if wanted else "passed"),
        right=right,
        missed=sorted((wanted or set()) - got)[:5],
        missed_as_preexisting=len(((wanted or set()) - got) & set(gate.get("preexisting", []))),
        extra=sorted(got - (wanted or set()))[:5],
    )
    return gate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", action="append", help="only these projects (by name)")
    parser.add_argument("--no-mutant", action="store_true", help="the unchanged pairs only")
    parser.add_argument("--mutant-only", action="store_true", help="the mutants only")
    parser.add_argument("--ci", action="store_true", help="run the projects' CI, not the gate")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folders")
    parser.add_argument("--timeout", type=float, default=1500.0, help="seconds per gate")
    parser.add_argument("--json", action="store_true", help="one JSON document per row")
    parser.add_argument(
        "--resolve-as-of",
        default="now",
        help="the gate's --resolve-as-of (default now: as the CI measurement resolved; the "
        "pairs' commits carry a fixed 2026-01-01 date, older than most of these releases)",
    )
    args = parser.parse_args()
    chosen = [p for p in PAIRS if not args.project or p.name in args.project]
    if args.ci:
        for pair in chosen:
            print(json.dumps({pair.name: ground_truth(pair, args.keep)}, indent=1), flush=True)
        return
    if not args.json:
        print(
            f"# expected outcomes: {EXPECTED_MEASURED}; gate --resolve-as-of {args.resolve_as_of}"
        )
        print(f"{'project':26} {'CI':>10} {'gate':>12} {'intro':>5} {'':>6} {'s':>6}  invocation")
    for pair in chosen:
        variants = [m for m in (False, True) if not (m and args.no_mutant)
                    and not (not m and args.mutant_only)]  # fmt: skip
        for mutant in variants:
            row = compare(pair, mutant, args.keep, args.timeout, args.resolve_as_of)
            if args.json:
                print(json.dumps(row, sort_keys=True), flush=True)
                continue
            invocation = "; ".join(row.get("invocations", [])[:2]) or "-"  # type: ignore[index]
            print(f"{row['project']!s:26} {row['ci_verdict']!s:>10} {row['status']!s:>12} "
                  f"{len(row['introduced']):>5} {row['right']!s:>6} {row['seconds']!s:>6}  "
                  f"{invocation}", flush=True)  # fmt: skip
            if row.get("log"):
                print(f"{'':26} {str(row['log'])[-400:]!r}", flush=True)
            if row["right"] == "WRONG":
                print(f"{'':26} missed {row['missed']} ({row['missed_as_preexisting']} of them "
                      f"preexisting at the gate) extra {row['extra']} "
                      f"reasons {str(row.get('reasons'))[:300]} {row.get('unmeasured', '')}",
                      flush=True)  # fmt: skip
    if args.json:
        return
    print("\nclasses and CI commands:")
    for pair in chosen:
        print(f"  {pair.name} {pair.base} -> {pair.head}: {pair.klass}; CI: `{pair.ci}`")


if __name__ == "__main__":
    main()
