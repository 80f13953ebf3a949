"""A head's build on an SSH build host cannot poison what the host's other builds install from
(issue 38, as `test_build_caches.py` on the gate's machine): the same `setup.py` marks every
installers' cache it can find on the host (`UV_CACHE_DIR`, `PIP_CACHE_DIR`, `uv cache dir`,
`~/.cache`, and the host's shared caches by their paths) and every pytest module in them. The
host keeps environments beside its mirror for every gate that uses it; head's builds there get
caches of their own under that folder, in bubblewrap where the host has it, so base's
environment, this gate's and a later one's, installed from the host's shared caches, shows no
trace.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import release_ledger.adapters.executors.ssh.executor as ssh_executor
from release_ledger.adapters.executors import sandbox
from release_ledger.adapters.executors.env_installer import find_uv
from release_ledger.adapters.executors.host_build import HOST_UNCONFINED_WARNING
from tests import gatekit
from tests.adversarial.test_build_caches import marked, poisoning_repo
from tests.sshd import SshServer, start_sshd

pytestmark = [pytest.mark.ssh, pytest.mark.slow]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[tuple[SshServer, dict[str, Path]]]:
    """An sshd whose sessions have a home and uv's and pip's shared caches of the test's
    own (the machine's stay clean whatever the build does), warmed with pytest."""
    caches = {"UV_CACHE_DIR": tmp_path / "host-uv", "PIP_CACHE_DIR": tmp_path / "host-pip"}
    home = tmp_path / "host-home"
    for folder in (*caches.values(), home):
        folder.mkdir()
    uv = find_uv(None)
    assert uv is not None
    warm = tmp_path / "warm"
    env = {**os.environ, "UV_CACHE_DIR": str(caches["UV_CACHE_DIR"])}
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(warm)], check=True, env=env)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(warm / "bin" / "python"),
                    "pytest", "setuptools>=61"], check=True, env=env)  # fmt: skip
    server = start_sshd(
        tmp_path / "sshd", env={"HOME": str(home), **{k: str(v) for k, v in caches.items()}}
    )
    yield server, caches
    server.stop()


def reach(server: SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """How the in-process CLI reaches the test's sshd (a user's ~/.ssh/config would say)."""
    settings: dict[str, Any] = {
        "port": server.port, "identity": server.identity, "ssh_options": server.client_options,
        "remote_python": sys.executable, "connect_timeout": 5,
    }  # fmt: skip
    original = ssh_executor.build_ssh_executor
    monkeypatch.setattr(
        ssh_executor, "build_ssh_executor", lambda **options: original(**(settings | options))
    )


def prepared(workdir: Path, run_id: str, revision: str) -> list[dict[str, Any]]:
    return [
        e for e in gatekit.events(workdir, run_id)
        if e["kind"] == "EnvironmentPrepared" and e["revision"] == revision
    ]  # fmt: skip


def test_a_head_build_on_a_host_cannot_poison_the_caches_base_installs_from_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: tuple[SshServer, dict[str, Path]]
) -> None:
    if sandbox.bwrap() is None:
        pytest.skip("no bubblewrap on the host: its builds run with the host user's rights")
    server, caches = host
    reach(server, monkeypatch)
    repo = poisoning_repo(tmp_path / "r", list(caches.values()))

    # Two gates on the same host, each with a mirror (and so an environments' cache) of its
    # own: the later one's base is installed from the shared caches after head's first go.
    results = []
    for name in ("first", "later"):
        workdir = tmp_path / name
        workdir.mkdir()
        mirror = tmp_path / f"host-{name}" / "mirror.git"
        result = gatekit.gate(workdir, repo, "--no-release-builds", "--executor", "ssh",
                              "--host", server.host, "--remote-mirror", str(mirror))  # fmt: skip
        assert result.code == 0, result.stderr or result.document.get("introduced")
        results.append((workdir, result.document["run_id"]))

    for folder in caches.values():
        assert marked(folder) == []
    for workdir, run_id in results:
        base = prepared(workdir, run_id, "base")
        assert base and base[0]["status"] == "ready", base
        venv = Path(base[0]["python"]).parent.parent
        assert (venv / "bin" / "python").exists()
        assert marked(venv) == []
        head = prepared(workdir, run_id, "head")
        assert head and head[0]["key"] != base[0]["key"]  # keyed apart, never reused as base's
        for built in (*base, *head):  # each step in bubblewrap on the host
            assert HOST_UNCONFINED_WARNING not in built.get("warnings", []), built
    # Head's own caches, kept per commit under the host's environments' cache, took its writes.
    assert marked(tmp_path / "host-first" / "release-ledger-envs" / "caches") != []
