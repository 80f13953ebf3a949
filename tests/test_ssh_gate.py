"""`ledger gate --executor ssh` end to end against a real sshd on 127.0.0.1.

The command line names the host and the mirror; how to reach this test server (port, key,
known hosts, the host's python) is what a user's ~/.ssh/config and host setup would give,
so it is filled in by wrapping `build_ssh_executor` for the in-process CLI.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import release_ledger.adapters.executors.ssh.executor as ssh_executor
from release_ledger.cli.main import cli
from tests.gitrepo import commit, make_repo, tag
from tests.sshd import SshServer, free_port, start_sshd

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

BASE = {
    "tests/test_math.py": "def test_add():\n    assert 1 + 1 == 2\n\n\ndef test_sub():\n    pass\n",
    "tests/test_old.py": "def test_known_bug():\n    assert 0\n",
    "tests/test_io.py": "def test_read():\n    pass\n",
}
HEAD = {
    "tests/test_math.py": "def test_add():\n    assert 2 == 2\n\n\ndef test_sub():\n    assert 0\n",
    "tests/test_new.py": "def test_new():\n    pass\n",
}
RUN_SPECIFIC = ("run_id", "baseline_reused")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SshServer]:
    running = start_sshd(tmp_path / "sshd")
    yield running
    running.stop()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path, BASE)
    tag(repo, "v1")
    commit(repo, HEAD, "break test_sub, add test_new")
    return repo


def reach(
    server: SshServer, monkeypatch: pytest.MonkeyPatch, **overrides: Any
) -> list[ssh_executor.SshExecutor]:
    """Fill in the connection details; return the executors the CLI builds, as it builds them."""
    settings: dict[str, Any] = {
        "port": server.port,
        "identity": server.identity,
        "ssh_options": server.client_options,
        "remote_python": sys.executable,
        "connect_timeout": 5,
    } | overrides
    built: list[ssh_executor.SshExecutor] = []
    original = ssh_executor.build_ssh_executor

    def build(**options: Any) -> ssh_executor.SshExecutor:
        built.append(original(**(settings | options)))
        return built[-1]

    monkeypatch.setattr(ssh_executor, "build_ssh_executor", build)
    return built


def gate(repo: Path, ledger: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(
        cli,
        ["gate", "--base", "v1", "--repo", str(repo), "--ledger", f"sqlite:///{ledger}",
         "--jobs", "2", "--json", *extra],
    )  # fmt: skip
    assert result.exit_code in (0, 1, 3, 4), (result.output, result.exception)
    return result.exit_code, json.loads(result.stdout)


def events(ledger: Path, run_id: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["export", run_id, "--ledger", f"sqlite:///{ledger}"])
    assert result.exit_code == 0, result.output
    return [json.loads(line)["event"] for line in result.stdout.splitlines() if line.strip()]


def test_the_same_repository_gets_the_same_verdict_locally_and_over_ssh(
    server: SshServer, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = reach(server, monkeypatch)
    before = server.temporaries()
    local_code, local = gate(repo, tmp_path / "local.db", "--executor", "local")
    mirror = tmp_path / "mirror.git"
    ssh_args = ("--executor", "ssh", "--host", server.host, "--remote-mirror", str(mirror))
    ssh_code, over_ssh = gate(repo, tmp_path / "ssh.db", *ssh_args)

    assert (ssh_code, over_ssh["status"]) == (local_code, local["status"]) == (1, "failed")
    assert over_ssh["introduced"] == ["tests/test_math.py::test_sub"]
    assert over_ssh["preexisting"] == ["tests/test_old.py::test_known_bug"]
    assert {k: v for k, v in over_ssh.items() if k not in RUN_SPECIFIC} == {
        k: v for k, v in local.items() if k not in RUN_SPECIFIC
    }
    recorded = events(tmp_path / "ssh.db", over_ssh["run_id"])
    assert recorded[0]["kind"] == "RunStarted" and recorded[0]["executor"] == "ssh"
    attempts = [e for e in recorded if e["kind"] == "ShardAttemptRecorded"]
    assert {e["revision"] for e in attempts} == {"head", "base"}
    assert server.temporaries() - before == set()  # only the mirror stays on the host
    assert mirror.is_dir()

    # A second gate of the same commits pushes nothing and reaches the same verdict.
    again_code, again = gate(repo, tmp_path / "ssh-again.db", *ssh_args)
    assert (again_code, again["status"]) == (1, "failed")
    # The first gate pushed head (base came along as its ancestor); the second pushed nothing.
    assert built[0].pushed and built[1].pushed == []
    assert server.temporaries() - before == set()


def test_an_unreachable_host_makes_the_gate_unmeasured_with_the_named_reason(
    server: SshServer, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reach(server, monkeypatch, port=free_port())
    code, verdict = gate(
        repo, tmp_path / "ssh.db", "--executor", "ssh", "--host", server.host,
        "--remote-mirror", str(tmp_path / "mirror.git"), "--rounds", "1",
    )  # fmt: skip
    # Unmeasured, never passed: blocked, or parked on the owner's question about it.
    assert (code, verdict["status"]) in ((3, "unmeasured"), (4, "awaiting"))
    assert verdict["unmeasured"], verdict
    assert {entry["detail"].split(":", 1)[0] for entry in verdict["unmeasured"]} == {"ssh-connect"}


def test_a_server_stopped_mid_run_costs_a_retry_not_the_verdict(
    server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = "import time\n\n\ndef test_{0}():\n    time.sleep(2)\n{1}"
    files = {f"tests/test_{n}.py": slow.format(n, "") for n in ("a", "b", "c")}
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": slow.format("b", "    assert 0\n")}, "break b")
    _, local = gate(repo, tmp_path / "local.db", "--executor", "local")

    reach(server, monkeypatch)
    original_run = ssh_executor.SshExecutor.run
    dropped = threading.Event()

    def run_and_restart_the_server_once(self: Any, shard: Any) -> Any:
        if not dropped.is_set():
            dropped.set()  # one second in, the first shard is inside its pytest
            threading.Timer(1.0, lambda: (server.stop(), server.start())).start()
        return original_run(self, shard)

    monkeypatch.setattr(ssh_executor.SshExecutor, "run", run_and_restart_the_server_once)
    before = server.temporaries()
    code, over_ssh = gate(
        repo, tmp_path / "ssh.db", "--executor", "ssh", "--host", server.host,
        "--remote-mirror", str(tmp_path / "mirror.git"),
    )  # fmt: skip

    # The drop hits whatever ran first over SSH (files are measured on the host too); it is
    # recorded, and that work is done again in the next round.
    attempts = [e for e in events(tmp_path / "ssh.db", over_ssh["run_id"])
                if e["kind"] in ("ShardAttemptRecorded", "MeasurementFailed")]  # fmt: skip
    assert "ssh-dropped" in json.dumps(attempts)
    assert (code, over_ssh["status"]) == (1, local["status"]) == (1, "failed")
    assert over_ssh["introduced"] == local["introduced"] == ["tests/test_b.py::test_b"]
    assert over_ssh["unmeasured"] == []
    assert wait_for_nothing_new(server, before)


def wait_for_nothing_new(server: SshServer, before: set[Path]) -> bool:
    """Hosts clean up after a dropped connection on their own, within moments."""
    deadline = time.monotonic() + 30
    while server.temporaries() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    return server.temporaries() - before == set()


def test_each_revision_gets_its_own_environment_on_the_build_host(
    server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_environments import src_layout

    repo = make_repo(tmp_path, src_layout(1, "1.0"), name="shiny")
    tag(repo, "v1")
    commit(repo, src_layout(2, "2.0"), "value 2")
    reach(server, monkeypatch)
    mirror = tmp_path / "host" / "mirror.git"

    code, verdict = gate(
        repo, tmp_path / "ssh.db", "--executor", "ssh", "--host", server.host,
        "--remote-mirror", str(mirror),
    )  # fmt: skip

    assert (code, verdict["status"]) == (0, "passed"), (verdict["unmeasured"], [
        e for e in events(tmp_path / "ssh.db", verdict["run_id"])
        if e["kind"] == "EnvironmentPrepared"])  # fmt: skip
    prepared = [e for e in events(tmp_path / "ssh.db", verdict["run_id"])
                if e["kind"] == "EnvironmentPrepared"]  # fmt: skip
    assert {e["revision"] for e in prepared} == {"head", "base"}
    assert {e["where"] for e in prepared} == {server.host}
    assert all(e["status"] == "ready" and e["project"] == "shiny" for e in prepared), prepared
    # Cached on the host beside the mirror, where the next gate reuses it.
    assert (tmp_path / "host" / "release-ledger-envs" / "envs").is_dir()


REWRITER = """\
from pathlib import Path


def test_rewrites_its_neighbour():
    Path(__file__).with_name("test_victim.py").write_text("def test_victim():\\n    pass\\n")
"""


def test_a_suite_that_rewrites_its_checkout_on_the_host_is_unmeasured_there(
    server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reach(server, monkeypatch)
    repo = make_repo(tmp_path, {"tests/test_victim.py": "def test_victim():\n    pass\n",
                                "tests/test_a_rewriter.py": "def test_rewrites_its_neighbour():\n"
                                "    pass\n"})  # fmt: skip
    tag(repo, "v1")
    commit(repo, {"tests/test_victim.py": "def test_victim():\n    assert 0  # regression\n",
                  "tests/test_a_rewriter.py": REWRITER})  # fmt: skip
    mirror = tmp_path / "mirror.git"
    code, document = gate(repo, tmp_path / "ssh.db", "--shards", "1", "--env", "none",
                          "--executor", "ssh", "--host", server.host,
                          "--remote-mirror", str(mirror))  # fmt: skip

    assert (code, document["introduced"]) == (1, ["tests/test_victim.py::test_victim"])
    assert [(u["files"], u["reason"]) for u in document["unmeasured"]] == [
        (["tests/test_a_rewriter.py"], "checkout-modified")
    ]
