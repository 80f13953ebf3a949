"""A first gate at the price of plain pytest (issue 14): figures and ratios, side by side.

Run: `python bench/first_gate.py [--project parso] [--project networkx] [--solo] [--jobs 2]`.

For each project (a pair of consecutive releases built from their public sdists into a
two-commit repository; see `tests/realworld/sdists.py`) it runs, in one session, one after
another on the same machine:

- plain `python -m pytest` in a checkout of head, then one of base (the reference: what
  running the suite twice by hand costs);
- a first gate: fresh ledger, fresh checkouts, measuring in place (the default);
- a repeat gate on the same ledger (measurements and baselines reused);
- with `--solo`, a first gate measuring every file alone first (`--measure solo`, the
  reference design's behaviour) on another fresh ledger.

Every gate runs `--env none` (this interpreter, the projects need nothing beyond pytest), so
environments cost nothing on either side ("environments cached"), and `--no-release-builds`
(the approval's distribution and upgrade builds are not the suite's cost). It prints wall
seconds and the ratio of each gate to plain pytest at head plus base, then, for every measured shard
attempt of the gates planned from measurements, observed peak / planned memory as a
distribution, the shards over their plan by more than 10 %, and the planned total against
the observed total beside the reference design's figure (the sum of the files' solo peaks).
Targets: first gate <= 0.8x on a suite of 250+ files and <= 1.0x on 20-30 files; repeat gate
<= 0.6x; no shard over its plan by more than 10 %; planned total within 1.5x of observed.

`--defaults` (issue 41) measures the other first gate: as a user runs it, with the defaults —
each revision's environment built (on a cold environment cache, `LEDGER_ENVS_DIR` fresh) and
the release builds and upgrade check on — against plain pytest plus its installs (a fresh
venv, the project and pytest installed with uv, then pytest) at head and base. `--code
LABEL=CHECKOUT` (repeatable) gates with another checkout's release_ledger, so two revisions
of the tool are measured side by side in one session:
`python bench/first_gate.py --defaults --project toolz --code before=../main --code after=.`
(`--rounds 5`: five rounds, each with its own plain row, medians: one gate's wall drifts)
Target: a suite of a few seconds gated in at most 1.4x plain pytest plus its installs.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cores import busy_seconds  # noqa: E402
from tool_code import tool_checkouts  # noqa: E402

from release_ledger.domain.memory import DEFAULT_BASELINE_MB  # noqa: E402
from tests.gitrepo import git  # noqa: E402
from tests.realworld.sdists import release_pair  # noqa: E402

# name, base, head, the test path plain pytest is given
PROJECTS: dict[str, tuple[str, str, str]] = {
    "parso": ("0.8.6", "0.8.7", "test"),
    "networkx": ("3.4.2", "3.5", "networkx"),
    "toolz": ("0.12.1", "1.0.0", "toolz/tests"),
    "packaging": ("26.3", "26.4", "tests"),
}

# Projects whose tests need more than pytest: their environment, on both sides. The gate
# builds it from the revision's own declaration (`--env auto`: packaging's `test` dependency
# group), into an environment cache warmed by an untimed gate first, so both sides compare
# with environments cached; plain pytest gets a venv per revision with these requirements.
NEEDS: dict[str, tuple[str, ...]] = {
    "packaging": (".", "pytest", "hypothesis", "pretend", "tomli_w", "pip", "coverage[toml]"),
}


def _timed(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, env=env)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(
            f"{argv[:4]} exited {done.returncode}: {done.stderr[-500:]} {done.stdout[-1500:]}"
        )
    return seconds, done.stdout


def _gate(
    work: Path, repo: Path, base: str, ledger: str, tag: str, *extra: str, code: Path = ROOT
) -> dict[str, Any]:
    env = dict(os.environ, LEDGER_WORKTREES_DIR=str(work / f"worktrees-{tag}"))
    env.pop("LEDGER_URL", None)
    if "--env" not in extra:  # this interpreter, as before; else a shared environment cache
        extra = ("--env", "none", *extra)
    else:
        env["LEDGER_ENVS_DIR"] = str(work / "envs")
    argv = [sys.executable, "-m", "release_ledger", "gate",
            "--repo", str(repo), "--base", f"v{base}",
            "--questions", "0", "--no-release-builds", "--json",
            "--ledger", ledger, *extra]  # fmt: skip
    seconds, out = _timed(argv, code, env)  # run from `code`: its release_ledger is imported
    document = json.loads(out)
    exported = subprocess.run(
        [sys.executable, "-m", "release_ledger", "export", document["run_id"], "--ledger", ledger],
        cwd=code, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    events = [json.loads(line)["event"] for line in exported.splitlines()]
    return {"seconds": seconds, "document": document, "events": events}


def memory_rows(events: list[dict[str, Any]]) -> list[tuple[float, float, float]]:
    """(observed peak, planned, reference sum of solo peaks) per measured shard attempt of the
    plan (MB). A first gate's plan is nominal (no file measured yet): its shards are listed
    against the nominal figure, and the reference uses the files' in-place measurements."""
    plan = next(e for e in events if e["kind"] == "ShardsPlanned")
    known = {e["file"]: e for e in events if e["kind"] == "MeasurementReused"}
    for e in events:  # a file measured in place (the first gate): its own figure
        if e["kind"] == "FileMeasured" and e["file"] not in known:
            known[e["file"]] = e
    planned = {s["id"]: s["rss_mb"] for s in plan["shards"] if all(f in known for f in s["files"])}
    rows = []
    for e in events:
        if e["kind"] != "ShardAttemptRecorded" or e["shard"] not in planned:
            continue
        if e["oom"] or e["timed_out"] or e["exit_code"] not in (0, 1):
            continue
        reference = sum(known[f]["rss_mb"] for f in e["files"])
        rows.append((e["rss_mb"], planned[e["shard"]], reference))
    return rows


def print_memory(label: str, rows: list[tuple[float, float, float]]) -> None:
    if not rows:
        print(f"  memory ({label}): no shard planned from measurements")
        return
    ratios = sorted(observed / planned for observed, planned, _ in rows)
    over = [r for r in ratios if r > 1.10]
    observed_total = sum(r[0] for r in rows)
    planned_total = sum(r[1] for r in rows)
    reference_total = sum(r[2] for r in rows)
    quantiles = (
        statistics.quantiles(ratios, n=10, method="inclusive") if len(ratios) > 1 else ratios * 9
    )
    print(
        f"  memory ({label}): {len(rows)} shard attempts, observed/planned min {ratios[0]:.2f} "
        f"p50 {statistics.median(ratios):.2f} p90 {quantiles[-1]:.2f} max {ratios[-1]:.2f}; "
        f"over plan by >10 %: {len(over)}"
    )
    print(
        f"  memory totals: observed {observed_total:.0f} MB, planned {planned_total:.0f} MB "
        f"({planned_total / observed_total:.2f}x), reference sum of solo peaks "
        f"{reference_total:.0f} MB ({reference_total / observed_total:.2f}x)"
    )


def run_project(name: str, jobs: int, solo: bool) -> None:
    base, head, tests = PROJECTS[name]
    with tempfile.TemporaryDirectory(prefix="first-gate-") as scratch:
        work = Path(scratch)
        repo = release_pair(work, name, base, head)
        plain = 0.0
        for version in (head, base):
            checkout = work / f"plain-{version}"
            git(repo, "worktree", "add", "--detach", "--quiet", str(checkout), f"v{version}")
            seconds, _ = _timed(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests], checkout
            )
            plain += seconds
        ledger = f"sqlite:///{work / 'ledger.db'}"
        shards = ("--jobs", str(jobs))
        first = _gate(work, repo, base, ledger, "first", *shards)
        repeat = _gate(work, repo, base, ledger, "repeat", *shards)
        runs = [("first gate (in place)", first), ("repeat gate", repeat)]
        if solo:
            solo_ledger = f"sqlite:///{work / 'solo.db'}"
            runs.append(
                ("first gate (--measure solo)",
                 _gate(work, repo, base, solo_ledger, "solo", "--measure", "solo", *shards))
            )  # fmt: skip
        files = next(e for e in first["events"] if e["kind"] == "TestFilesDiscovered")["files"]
        document = first["document"]
        print(f"{name} {base} -> {head}: {len(files)} files, {document['tests']['head']} tests "
              f"at head, verdict {document['status']}")  # fmt: skip
        print(f"  plain pytest head + base: {plain:7.1f} s")
        for label, run in runs:
            print(f"  {label:28} {run['seconds']:7.1f} s  ratio {run['seconds'] / plain:.2f}"
                  f"  verdict {run['document']['status']}")  # fmt: skip
        print_memory("first gate, nominal plan", memory_rows(first["events"]))
        print_memory("repeat gate, measured plan", memory_rows(repeat["events"]))
        print(f"  (nominal baseline before any measurement: {DEFAULT_BASELINE_MB:.0f} MB)")


# --- `--alternate N`: first gates and plain pytest alternating, medians (issue 41) -------------


def _plain_python(work: Path, repo: Path, name: str, version: str) -> tuple[Path, str]:
    """A checkout of `version` and the interpreter plain pytest runs it on: this one, or a
    venv with the project's NEEDS (made once, untimed: environments cached on both sides)."""
    checkout = work / f"plain-{version}"
    git(repo, "worktree", "add", "--detach", "--quiet", str(checkout), f"v{version}")
    if name not in NEEDS:
        return checkout, sys.executable
    uv = _uv()
    venv = work / f"venv-{version}"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    wanted = [str(checkout) if r == "." else r for r in NEEDS[name]]
    subprocess.run([uv, "pip", "install", "-q", "--python", python, *wanted], check=True)
    return checkout, python


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_alternating(
    name: str, jobs: int, rounds: int, keep: Path | None, codes: list[tuple[str, Path]]
) -> None:
    """Plain pytest at head then base, and a first gate (fresh ledger, fresh checkouts,
    environments cached) from each tool checkout in `codes`, alternating `rounds` times in
    one session; medians and the load average beside every figure. Target (issue 41): a
    suite with one dominant file <= 0.6x."""
    base, head, tests = PROJECTS[name]
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="first-gate-alt-", dir=keep)
    work = Path(scratch)
    repo = release_pair(work, name, base, head)
    plains = [_plain_python(work, repo, name, v) for v in (head, base)]
    gate_env = ("--env", "auto") if name in NEEDS else ()
    shards = ("--jobs", str(jobs))
    if gate_env:  # warm the environment cache (untimed), as plain pytest's venvs are
        _gate(work, repo, base, f"sqlite:///{work / 'warm.db'}", "warm", *gate_env, *shards)
    plain_s: list[float] = []
    gate_s: dict[str, list[float]] = {label: [] for label, _ in codes}
    for index in range(rounds):
        plain = 0.0
        for checkout, python in plains:
            seconds, _ = _timed([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests],
                                checkout)  # fmt: skip
            plain += seconds
        plain_s.append(plain)
        print(f"  round {index + 1}: plain head + base {plain:6.1f} s  (load {_load()})")
        for label, code in codes:
            ledger = f"sqlite:///{work / f'{label}-{index}.db'}"
            run = _gate(work, repo, base, ledger, f"{label}-{index}", *gate_env, *shards, code=code)
            gate_s[label].append(run["seconds"])
            document = run["document"]
            print(f"  round {index + 1}: first gate {label:8} {run['seconds']:6.1f} s  ratio "
                  f"{run['seconds'] / plain:.2f}  verdict {document['status']}  run "
                  f"{document['run_id'][:8]} in {ledger}  (load {_load()})")  # fmt: skip
    plain_m = statistics.median(plain_s)
    print(f"{name} {base} -> {head}: median plain head + base {plain_m:.1f} s ({rounds} rounds)")
    for label, seconds in gate_s.items():
        gate_m = statistics.median(seconds)
        print(f"  first gate {label:8} median {gate_m:.1f} s, ratio {gate_m / plain_m:.2f}")
    print(f"  (load at the end {_load()})")
    if keep is None:
        subprocess.run(["rm", "-rf", scratch], check=False)


# --- `--defaults`: a first gate as a user runs it, against plain pytest plus its installs --------


def _uv() -> str:
    from release_ledger.adapters.executors.env_installer import find_uv

    uv = find_uv()
    if uv is None:
        raise SystemExit("--defaults needs uv (the plain side installs with it, as the gate)")
    return uv


def _plain_with_installs(
    work: Path, repo: Path, version: str, tests: str, round_no: int = 0
) -> float:
    """What running one revision's suite by hand costs from nothing: a fresh virtual
    environment and checkout (one per round), the project and pytest installed (uv, its
    download cache as warm as the gate's), then `python -m pytest`."""
    uv = _uv()
    checkout = work / f"plain-{version}-{round_no}"
    git(repo, "worktree", "add", "--detach", "--quiet", str(checkout), f"v{version}")
    venv = work / f"venv-{version}-{round_no}"
    started = time.perf_counter()
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([uv, "pip", "install", "-q", "--python", python, str(checkout), "pytest"],
                   check=True)  # fmt: skip
    installs = time.perf_counter() - started
    seconds, _ = _timed([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests], checkout)
    print(f"  plain {version}: installs {installs:5.1f} s + pytest {seconds:5.1f} s")
    return installs + seconds


def _default_gate(
    work: Path, repo: Path, base: str, tag: str, code: Path, repeat: bool = False
) -> float:
    """A first gate with the defaults (environments built, release builds on) from the tool's
    checkout `code`, on a cold environment cache, a fresh ledger and fresh checkouts; with
    `repeat`, the repeat gate: the same ledger and environment cache, fresh checkouts. (`tag`
    names them: a new tag, a cold cache.)"""
    env = dict(os.environ, LEDGER_WORKTREES_DIR=str(work / f"worktrees-{tag}-{repeat}"),
               LEDGER_ENVS_DIR=str(work / f"envs-{tag}"))  # fmt: skip
    env.pop("LEDGER_URL", None)
    ledger = f"sqlite:///{work / f'{tag}.db'}"
    argv = [sys.executable, "-m", "release_ledger", "gate", "--repo", str(repo),
            "--base", f"v{base}", "--questions", "0", "--json", "--ledger", ledger]  # fmt: skip
    seconds, out = _timed(argv, code, env)  # run from `code`: its release_ledger is imported
    document = json.loads(out)
    exported = subprocess.run(
        [sys.executable, "-m", "release_ledger", "export", document["run_id"], "--ledger", ledger],
        cwd=code, capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    events = [json.loads(line)["event"] for line in exported.splitlines()]
    kinds = [e["kind"] for e in events]
    built = kinds.count("DistributionsBuilt"), kinds.count("UpgradeChecked")
    which = "repeat" if repeat else "first"
    print(f"  {which} gate ({tag}, {code}): {seconds:5.1f} s, verdict {document['status']}, "
          f"{built[0]} DistributionsBuilt, {built[1]} UpgradeChecked (load {_load()})")  # fmt: skip
    for part, figure in parts(events, seconds):
        print(f"    {part:58} {figure}")
    return seconds


def _at(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["at"].replace("Z", "+00:00")).timestamp()


def parts(events: list[dict[str, Any]], wall: float) -> list[tuple[str, str]]:
    """A first gate's wall in parts, from its events' times and recorded seconds: before
    `RunStarted`, discovery (environments, then collection at both revisions), the shards
    (span and each revision's sum), the release work (its own seconds, and whether it ended
    after the last shard), and what follows the last shard."""
    first = next(e for e in events if e["kind"] == "RunStarted")
    found = next(e for e in events if e["kind"] == "TestFilesDiscovered")
    shots = [e for e in events if e["kind"] == "ShardAttemptRecorded"]
    done = next((e for e in events if e["kind"] == "RunCompleted"), events[-1])
    span = _at(events[-1]) - _at(first)
    rows = [("process start to RunStarted, and after the last event", f"{wall - span:5.1f} s")]
    envs = {e["revision"]: e["seconds"] for e in events if e["kind"] == "EnvironmentPrepared"}
    for revision, secs in sorted(envs.items()):
        rows.append(
            (f"  environment at {revision} (its own seconds, in discovery)", f"{secs:5.1f} s")
        )
    rows.append(("RunStarted to TestFilesDiscovered (environments + collection)",
                 f"{_at(found) - _at(first):5.1f} s"))  # fmt: skip
    if shots:
        last = max(_at(e) for e in shots)
        rows.append(
            ("TestFilesDiscovered to the last shard attempt", f"{last - _at(found):5.1f} s")
        )
        for revision in ("base", "head"):
            mine = [e["seconds"] for e in shots if e["revision"] == revision]
            rows.append((f"  shard attempts at {revision}: {len(mine)}, their seconds summed",
                         f"{sum(mine):5.1f} s"))  # fmt: skip
        release = [e for e in events if e["kind"] in ("DistributionsBuilt", "UpgradeChecked")]
        for e in release:
            after = max(0.0, _at(e) - last)
            what = f"  {e['kind']} {e.get('revision', '')} (own s; after the last shard by)"
            rows.append((what, f"{e['seconds']:5.1f} s ({after:4.1f} s)"))
        rows.append(("last shard attempt to RunCompleted", f"{_at(done) - last:5.1f} s"))
    return rows


def run_defaults(name: str, codes: list[tuple[str, Path]], rounds: int = 1) -> None:
    """Issue 41: a first gate with defaults against plain pytest plus its installs, at head
    and base; each tool checkout in `codes` (label, path) gated in turn, same pair, same
    session. Target: a suite of a few seconds at most 1.4x. With `rounds` above 1, each round
    measures plain pytest again (the reference of that round's ratios) and gates the
    checkouts in an order turned by one each round (what runs first on a machine runs on a
    colder disk), then prints medians: a first gate's wall on this machine drifts by a third
    from run to run (head's installer caches, cold by design, are filled from the network)."""
    base, head, tests = PROJECTS[name]
    firsts: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in codes}
    repeats: dict[str, list[float]] = {label: [] for label, _ in codes}
    with tempfile.TemporaryDirectory(prefix="first-gate-defaults-") as scratch:
        work = Path(scratch)
        repo = release_pair(work, name, base, head)
        print(f"{name} {base} -> {head}, first gate with defaults (cold environment cache)")
        for round_no in range(rounds):
            plain = sum(_plain_with_installs(work, repo, v, tests, round_no) for v in (head, base))
            print(f"  plain pytest plus its installs, head + base: {plain:5.1f} s")
            turn = round_no % len(codes)
            for label, code in codes[turn:] + codes[:turn]:
                tag = label if rounds == 1 else f"{label}-{round_no + 1}"
                busy = busy_seconds()
                seconds = _default_gate(work, repo, base, tag, code)
                cpu = busy_seconds() - busy
                print(f"  {label:8} {seconds:5.1f} s  ratio {seconds / plain:.2f}  "
                      f"machine CPU {cpu:5.1f} s")  # fmt: skip
                firsts[label].append((seconds, seconds / plain, cpu))
                again = _default_gate(work, repo, base, tag, code, repeat=True)
                print(f"  {label:8} repeat gate {again:5.1f} s")
                repeats[label].append(again)
    if rounds > 1:
        print(f"medians of {rounds} rounds:")
        for label, _ in codes:
            wall, ratio, cpu = (statistics.median(f[i] for f in firsts[label]) for i in range(3))
            again = statistics.median(repeats[label])
            print(f"  {label:8} first gate {wall:5.1f} s, ratio {ratio:.2f}, machine CPU "
                  f"{cpu:5.1f} s; repeat gate {again:5.1f} s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", action="append", choices=sorted(PROJECTS))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--solo", action="store_true", help="also the --measure solo reference")
    parser.add_argument(
        "--defaults", action="store_true",
        help="a first gate with defaults (cold environment cache, release builds on) against "
        "plain pytest plus its installs (issue 41)",
    )  # fmt: skip
    parser.add_argument(
        "--code", action="append", default=[], metavar="LABEL=CHECKOUT",
        help="with --defaults or --alternate: gate with this checkout's release_ledger (repeat to "
        "compare "
        "revisions of the tool side by side; default: this one)",
    )  # fmt: skip
    parser.add_argument(
        "--alternate", type=int, default=0, metavar="ROUNDS",
        help="plain pytest and a first gate (environments cached) alternating ROUNDS times, "
        "medians (issue 41: the dominant-file suite, --project packaging)",
    )  # fmt: skip
    parser.add_argument("--keep", type=Path, help="with --alternate: keep the work under DIR")
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="with --defaults: this many rounds, each with its own plain row and the --code "
        "checkouts in a turning order, then medians",
    )  # fmt: skip
    args = parser.parse_args()
    codes = tool_checkouts(parser, args.code)
    if args.alternate:
        for name in args.project or ["packaging"]:
            run_alternating(name, args.jobs, args.alternate, args.keep, codes or [("this", ROOT)])
        return
    if args.defaults:
        for name in args.project or ["toolz"]:
            run_defaults(name, codes or [("this", ROOT)], max(1, args.rounds))
        return
    for name in args.project or list(PROJECTS):
        run_project(name, args.jobs, args.solo)


if __name__ == "__main__":
    main()
