"""Soak: many gates on one ledger, killed at random moments, resumed, with concurrent writers.

    python bench/soak.py                 # 50 gates
    python bench/soak.py --gates 5       # a quick one
    python bench/soak.py --gates 20 --ledger postgresql://user@host/db   # an empty database

Makes a small repository (a regression, a preexisting failure, a fixed test, slow tests to
give kills somewhere to land), runs one uninterrupted reference gate, then N gates in turn.
Each gate is killed with some probability at a random moment (SIGKILL, SIGINT or SIGTERM) and
resumed until it concludes (a resume may be killed too). Meanwhile a writer thread records
`ledger check`s against the runs (the live one included) and answers any open question with
its recommendation. At the end it reports:

- runs completed, and verdicts equal to the uninterrupted reference;
- events lost: checks that `ledger check` reported recorded but that the ledger lacks, and
  runs whose hash chain no longer verifies;
- duplicate events: an attempt, isolation, measurement, plan or completion recorded twice;
- orphan processes: any process still alive 10 s after its gate died that carries the soak's
  environment tag (test processes inherit it);
- tracebacks: in the stderr of every command run.

The suite is hostile too (issue 26): both revisions carry `tests/test_escape.py`, whose test
starts a daemon that leaves the shard's session with an empty environment and, for 20 s, tries
to write into the user's repository, beside the ledger and in the home directory, to rewrite
`tests/test_a.py` in every attempt checkout under the gate's scratch (a forged pass), and to
set `ledger_status` to `passed` in the SQLite ledger; another test asserts a secret in the
gate's environment (`SOAK_SECRET`) does not reach it. The report adds:

- escapes: files the daemons managed to write outside their shard, and whether the
  reference is the one designed (a leaked secret is one more preexisting failure);
- escaper daemons still alive 10 s after the gates (counted among the orphans: found by
  their command line, as they carry no environment).

Exits 1 when any figure other than runs completed is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLASSIFICATION = ("status", "introduced", "preexisting", "fixed", "flaky")
SIGNALS = (signal.SIGKILL, signal.SIGINT, signal.SIGTERM)


def git(repo: Path, *args: str) -> None:
    env = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    env.update(GIT_AUTHOR_NAME="soak", GIT_AUTHOR_EMAIL="soak@example.org")
    env.update(GIT_COMMITTER_NAME="soak", GIT_COMMITTER_EMAIL="soak@example.org")
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


ESCAPER = """\
import os
import sys

SECRET = "SOAK_SECRET"
DAEMON = r\'\'\'
import glob, os, sqlite3, sys, time
tag, repo, ledger, home, scratch = sys.argv[1:6]
targets = [os.path.join(repo, ".git", "escaped-" + tag),
           os.path.join(os.path.dirname(ledger), "escaped-" + tag),
           os.path.join(home, "escaped-" + tag)]
end = time.time() + 20
while time.time() < end:
    for path in targets:
        try:
            with open(path, "w") as handle:
                handle.write("escaped")
        except OSError:
            pass
    for victim in glob.glob(os.path.join(scratch, "**", "tests", "test_a.py"), recursive=True):
        try:
            with open(victim, "w") as handle:
                handle.write("def test_a():\\n    pass\\n")
        except OSError:
            pass
    if ledger:
        try:
            db = sqlite3.connect(ledger, timeout=0.1)
            db.execute("UPDATE ledger_status SET verdict = 'passed'")
            db.commit()
            db.close()
        except Exception:
            pass
    time.sleep(0.2)
\'\'\'
ARGS = {args!r}


def test_no_secret_reaches_the_suite():
    assert SECRET not in os.environ


def test_escape():
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, "-c", DAEMON, *ARGS], {{}})
        os._exit(0)
    os.waitpid(child, 0)
"""


def escaper(tag: str, repo: Path, ledger: str, scratch: Path) -> str:
    """The hostile test file, aimed at this soak's own repository, ledger, home and scratch."""
    args = [tag, str(repo), ledger, os.path.expanduser("~"), str(scratch)]
    return ESCAPER.format(args=args)


def make_repo(path: Path, escape: str) -> Path:
    slow = "import time\n\ndef test_slow_{n}():\n    time.sleep(0.4)\n"
    files = {
        "tests/test_escape.py": escape,
        "tests/test_a.py": "def test_a():\n    pass\n",
        "tests/test_b.py": "def test_b():\n    assert 0\n",
        "tests/test_c.py": "def test_c():\n    assert 0\n",
        **{f"tests/test_slow{n}.py": slow.format(n=n) for n in range(4)},
    }
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    git(path, "tag", "v1")
    (path / "tests/test_a.py").write_text("def test_a():\n    assert 0\n")  # introduced
    (path / "tests/test_c.py").write_text("def test_c():\n    pass\n")  # fixed
    git(path, "commit", "-q", "-am", "head")
    return path


class Soak:
    def __init__(self, options: argparse.Namespace, work: Path) -> None:
        self.options = options
        self.work = work
        self.url = options.ledger or f"sqlite:///{work / 'ledger' / 'ledger.db'}"
        self.tag = uuid.uuid4().hex
        self.env = {k: v for k, v in os.environ.items() if k != "LEDGER_URL"}
        self.env.update(
            PYTHONPATH=str(ROOT),
            LEDGER_WORKTREES_DIR=str(work / "worktrees"),
            LEDGER_LEASE_SECONDS=str(options.lease_seconds),
            RELEASE_LEDGER_SOAK=self.tag,
            SOAK_SECRET="s3cret-" + self.tag,  # must never reach the suite
            TMPDIR=str(work / "scratch"),  # the gates' scratch, where the escapers look
        )
        (work / "scratch").mkdir(parents=True, exist_ok=True)
        self.stderrs: list[str] = []
        self.lock = threading.Lock()
        self.checks_ok: set[tuple[str, str]] = set()
        self.check_refused = Counter[str]()
        self.answers = 0
        self.live_run: str | None = None
        self.known_runs: list[str] = []
        self.stop = threading.Event()
        self.kills = Counter[str]()
        self.resumes = 0
        self.refused_resumes = 0
        self.last_stderr = ""

    # -- commands --

    def argv(self, *args: str) -> list[str]:
        views = self.options.views if args[0] == "rebuild" else None
        extra = ["--views", views] if views else []
        return [sys.executable, "-m", "release_ledger", *args, *extra, "--ledger", self.url]

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.argv(*args), cwd=self.work, env=self.env, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
        with self.lock:
            self.stderrs.append(done.stderr)
        return done

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args), cwd=self.work, env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip

    def runs(self) -> list[str]:
        done = self.run("runs", "--json")
        if done.returncode != 0:
            return []
        return [str(r["run_id"]) for r in json.loads(done.stdout)]

    # -- the concurrent writer --

    def writer(self) -> None:
        rng = random.Random(self.options.seed + 1)
        n = 0
        while not self.stop.is_set():
            with self.lock:
                targets = [r for r in [self.live_run, *self.known_runs[-3:]] if r]
            if targets:
                run = rng.choice(targets)
                name = f"soak-{n}"
                n += 1
                done = self.run("check", run, name, "--verdict", "pass", "--value", str(n))
                if done.returncode == 0:
                    with self.lock:
                        self.checks_ok.add((run, name))
                else:
                    reason = (done.stderr.strip().splitlines() or ["?"])[-1][:80]
                    with self.lock:
                        self.check_refused[reason] += 1
            questions = self.run("questions", "--json")
            if questions.returncode == 0:
                for q in json.loads(questions.stdout):
                    choice = next((o["name"] for o in q["options"] if o["recommended"]), None)
                    if choice and q["state"] == "open":
                        answered = self.run("answer", q["run_id"], q["id"], choice, "--by", "soak")
                        self.answers += answered.returncode == 0
            self.stop.wait(rng.uniform(0.05, 0.4))

    # -- gates --

    def gate_args(self, repo: Path) -> list[str]:
        return [
            "gate", "--base", "v1", "--repo", str(repo), "--jobs", "2", "--shards", "2",
            "--timeout", "120", "--json",
        ]  # fmt: skip

    def drive(
        self, process: subprocess.Popen[str], rng: random.Random, *, spare: bool = False
    ) -> tuple[int, str]:
        """Wait for a gate/resume, maybe killing it at a random moment (never when `spare`):
        (exit code, stdout)."""
        self.last_stderr = ""
        if not spare and rng.random() < self.options.kill_probability:
            try:
                process.wait(timeout=rng.uniform(0.3, self.options.max_kill_after))
            except subprocess.TimeoutExpired:
                signum = rng.choice(SIGNALS)
                self.kills[signal.Signals(signum).name] += 1
                process.send_signal(signum)
        out, err = process.communicate(timeout=600)
        self.last_stderr = err
        with self.lock:
            self.stderrs.append(err)
        return process.returncode, out

    def one(self, repo: Path, rng: random.Random) -> dict[str, Any] | None:
        before = set(self.runs())
        code, out = self.drive(self.popen(*self.gate_args(repo)), rng)
        run = next((r for r in self.runs() if r not in before), None)
        if run is None:
            return None  # killed before RunStarted: nothing to resume
        with self.lock:
            self.live_run = run
        for attempt in range(1, self.options.max_resumes + 1):
            if code in (0, 1, 3, 4):
                break
            self.resumes += 1
            last = attempt == self.options.max_resumes  # the last resume is left to finish
            code, out = self.drive(self.popen("resume", run, "--json"), rng, spare=last)
            if code == 2 and "being driven by" in self.last_stderr:
                self.refused_resumes += 1
                time.sleep(self.options.lease_seconds)  # a killed holder's lease lapses
        with self.lock:
            self.live_run = None
            self.known_runs.append(run)
        if code not in (0, 1, 3, 4):
            why = (self.last_stderr.strip().splitlines() or [""])[-1][:200]
            return {"run_id": run, "completed": False, "exit": code, "why": why}
        document = json.loads(out)
        return {"run_id": run, "completed": True, "document": document}

    # -- checks at the end --

    def duplicates(self, run: str) -> int:
        done = self.run("export", run)
        if done.returncode != 0:
            return 0
        events = [json.loads(line)["event"] for line in done.stdout.splitlines() if line]
        keys: Counter[tuple[Any, ...]] = Counter()
        for e in events:
            kind = e["kind"]
            if kind == "ShardAttemptRecorded":
                keys[(kind, e["shard"], e["attempt"], e["revision"])] += 1
            elif kind == "IsolationRecorded":
                keys[(kind, e["file"], e["revision"])] += 1
            elif kind in ("ShardsPlanned", "TestFilesDiscovered", "RunCompleted", "RunStarted"):
                keys[(kind,)] += 1
            elif kind == "CheckRecorded":
                keys[(kind, e["name"], e["value"])] += 1
        return sum(count - 1 for count in keys.values() if count > 1)

    def ledger_file(self) -> str:
        """The SQLite ledger's path for the escapers to attack ('' for PostgreSQL)."""
        return self.url[len("sqlite:///") :] if self.url.startswith("sqlite:///") else ""

    def escapes(self, repo: Path) -> list[str]:
        """Files the escapers wrote outside their shard."""
        name = f"escaped-{self.tag}"
        places = [repo / ".git" / name, Path(os.path.expanduser("~")) / name]
        if self.ledger_file():
            places.append(Path(self.ledger_file()).parent / name)
        return [str(p) for p in places if p.exists()]

    def orphans(self) -> list[int]:
        found = []
        marker = f"RELEASE_LEDGER_SOAK={self.tag}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if (
                    marker in (entry / "environ").read_bytes().split(b"\0")
                    or self.tag.encode() in (entry / "cmdline").read_bytes().split(b"\0")
                ):
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        found.append(int(entry.name))
            except OSError:
                continue
        return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=50, help="gates to run (default 50)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--kill-probability", type=float, default=0.7)
    parser.add_argument("--max-kill-after", type=float, default=6.0, help="seconds")
    parser.add_argument("--max-resumes", type=int, default=6)
    parser.add_argument("--lease-seconds", type=float, default=3.0)
    parser.add_argument("--ledger", default=None, help="ledger URL (default: a fresh SQLite)")
    parser.add_argument("--views", default=None, help="views file (PostgreSQL: for rebuild)")
    parser.add_argument("--dir", type=Path, default=None, help="work here and keep it")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        work = options.dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        soak = Soak(options, work)
        escape = escaper(soak.tag, work / "repo", soak.ledger_file(), work / "scratch")
        repo = make_repo(work / "repo", escape)
        started = time.monotonic()
        reference = soak.run(*soak.gate_args(repo))
        if reference.returncode not in (0, 1, 3):
            sys.exit(f"the reference gate failed: {reference.stderr}")
        expected = {k: json.loads(reference.stdout)[k] for k in CLASSIFICATION}
        print(f"reference: {expected}", file=sys.stderr, flush=True)
        as_designed = (
            expected["introduced"] == ["tests/test_a.py::test_a"]
            and expected["preexisting"] == ["tests/test_b.py::test_b"]
        )
        writer = threading.Thread(target=soak.writer, daemon=True)
        writer.start()
        rng = random.Random(options.seed)
        results = []
        for index in range(options.gates):
            result = soak.one(repo, rng)
            results.append(result)
            print(f"gate {index + 1}/{options.gates}: {result and result.get('completed')}",
                  file=sys.stderr, flush=True)  # fmt: skip
        soak.stop.set()
        writer.join(timeout=120)
        time.sleep(10)  # anything a killed gate left has had 10 s to die
        orphans = soak.orphans()
        escapes = soak.escapes(repo)
        runs = [r for r in results if r is not None]
        completed = [r for r in runs if r["completed"]]
        equal = [r for r in completed if {k: r["document"][k] for k in CLASSIFICATION} == expected]
        verify = soak.run("verify", "--json")
        broken = [r["run_id"] for r in json.loads(verify.stdout)["runs"] if not r["ok"]]
        stored_checks = set()
        for run in {run for run, _ in soak.checks_ok}:
            done = soak.run("export", run)
            for line in done.stdout.splitlines():
                event = json.loads(line)["event"]
                if event["kind"] == "CheckRecorded":
                    stored_checks.add((run, event["name"]))
        lost = len(soak.checks_ok - stored_checks)
        duplicates = sum(soak.duplicates(r["run_id"]) for r in runs)
        tracebacks = sum("Traceback" in text for text in soak.stderrs)
        figures = {
            "gates": options.gates,
            "runs_started": len(runs),
            "runs_completed": len(completed),
            "verdicts_equal_to_reference": len(equal),
            "kills": dict(soak.kills),
            "resumes": soak.resumes,
            "resumes_refused_live_holder": soak.refused_resumes,
            "incomplete": [
                {k: r[k] for k in ("run_id", "exit", "why")} for r in runs if not r["completed"]
            ],
            "checks_recorded": len(soak.checks_ok),
            "checks_refused": dict(soak.check_refused),
            "answers": soak.answers,
            "events_lost": lost,
            "broken_runs": len(broken),
            "duplicate_events": duplicates,
            "orphan_processes": len(orphans),
            "reference_as_designed": as_designed,
            "escapes": escapes,
            "tracebacks": tracebacks,
            "seconds": round(time.monotonic() - started, 1),
        }
        if tracebacks:
            sample = next(text for text in soak.stderrs if "Traceback" in text)
            print(sample[-2000:], file=sys.stderr)
    if options.json:
        print(json.dumps(figures, indent=2, sort_keys=True))
    else:
        for key, value in figures.items():
            print(f"{key:<28} {value}")
    bad = (
        len(completed) != len(equal) or lost or broken or duplicates or orphans or tracebacks
        or len(completed) != len(runs) or escapes or not as_designed
    )  # fmt: skip
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
