"""Helpers for end-to-end gate tests: run `ledger` in-process or as a process, read the events.

    result = run_ledger(tmp_path, "gate", "--base", "v1", "--repo", str(repo), "--json")
    assert result.code == 1 and result.document["introduced"] == ["tests/test_a.py::test_a"]
    kinds = [e["kind"] for e in events(tmp_path, result.document["run_id"])]

Every helper keeps the ledger and the checkout cache under the test's own directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from release_ledger.cli.main import cli

REPO_ROOT = Path(__file__).resolve().parent.parent


def ledger_url(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'ledger' / 'ledger.db'}"


def gate_env(workdir: Path) -> dict[str, str]:
    """Checkouts cached under the test's directory; no ledger URL inherited from outside."""
    return {"LEDGER_WORKTREES_DIR": str(workdir / "worktrees"), "LEDGER_URL": ""}


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def document(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.stdout)
        return parsed


def run_ledger(workdir: Path, *args: str) -> Result:
    """`ledger ARGS --ledger <workdir ledger>` in this process (fast: no interpreter start)."""
    runner = CliRunner()
    env: dict[str, str | None] = dict(gate_env(workdir))
    env["LEDGER_URL"] = None
    result = runner.invoke(cli, [*args, "--ledger", ledger_url(workdir)], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Result(result.exit_code, result.stdout, result.stderr)


# Issue 4's gate alone: no owner questions (`--questions 0` assumes the recommended answer to
# every non-critical question and asks none), so a test sees the classification's own status.
GATE_DEFAULTS = ("--jobs", "2", "--questions", "0")


def gate(workdir: Path, repo: Path, *args: str, base: str = "v1") -> Result:
    """`ledger gate --base BASE --repo REPO --jobs 2 --questions 0 --json ARGS` in this process."""
    return run_ledger(
        workdir, "gate", "--base", base, "--repo", str(repo), *GATE_DEFAULTS, "--json", *args
    )


def process_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LEDGER_URL"}
    env.update(gate_env(workdir))
    del env["LEDGER_URL"]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def ledger_command(workdir: Path, *args: str) -> list[str]:
    """The argv of `python -m release_ledger ARGS --ledger <workdir ledger>`, for a real process."""
    return [sys.executable, "-m", "release_ledger", *args, "--ledger", ledger_url(workdir)]


def _interruptible_by_ctrl_c() -> None:
    """As from a terminal: a suite started in the background (`cmd &`, `nohup`) hands its
    children SIGINT ignored, and Python then installs no KeyboardInterrupt handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_process(workdir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ledger_command(workdir, *args),
        cwd=workdir,
        env=process_env(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible_by_ctrl_c,
    )


def events(workdir: Path, run_id: str) -> list[dict[str, Any]]:
    """The run's events as `ledger export` prints them (the event body of each line)."""
    result = run_ledger(workdir, "export", run_id)
    assert result.code == 0, result.stderr
    return [json.loads(line)["event"] for line in result.stdout.splitlines() if line.strip()]


def kinds(evs: list[dict[str, Any]]) -> Counter[str]:
    return Counter(e["kind"] for e in evs)


def attempts(evs: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """How many attempts each (shard, revision) had."""
    return Counter((e["shard"], e["revision"]) for e in evs if e["kind"] == "ShardAttemptRecorded")


def shard_of(evs: list[dict[str, Any]], file: str) -> str:
    """The planned (top-level) shard holding `file`."""
    for e in evs:
        if e["kind"] == "ShardsPlanned":
            for shard in e["shards"]:
                if file in shard["files"]:
                    return str(shard["id"])
    raise AssertionError(f"{file} is in no planned shard")


def tests_in(document: dict[str, Any], *files: str) -> bool:
    """Whether a verdict classified anything from `files` (a measured file shows up somewhere)."""
    listed = [
        *document["introduced"],
        *document["preexisting"],
        *document["fixed"],
        *document["flaky"],
    ]
    return any(t.split("::", 1)[0] in files for t in listed)


def holding(mb: int) -> str:
    """A test file whose one test holds `mb` MB resident (every page touched) while it runs."""
    return (
        "def test_heavy():\n"
        f"    block = bytearray({mb} * 1024 * 1024)\n"
        "    block[::4096] = b'x' * len(block[::4096])\n"
        "    assert len(block)\n"
    )
