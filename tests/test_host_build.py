"""How an SSH build host builds (`adapters/executors/host_build.py`): a commit the gate does not
trust gets installers' caches of its own under the host's environments' cache, keyed apart;
a step that ran without a sandbox is said on the environment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from release_ledger.adapters.executors import host_build, sandbox


def test_an_untrusted_commit_builds_with_caches_of_its_own_and_keyed_apart(
    tmp_path: Path,
) -> None:
    envs = str(tmp_path / "envs")
    settings, _ = host_build.host_build_settings(
        python=sys.executable, checkout=str(tmp_path), envs_dir=envs, hidden=[],
        commit="c" * 40, trusted=False,
    )  # fmt: skip
    env = settings["base_env"]
    assert isinstance(env, dict) and settings["own_caches"] is True
    assert env["UV_CACHE_DIR"] == str(tmp_path / "envs" / "caches" / ("c" * 40) / "uv")
    assert env["PIP_CACHE_DIR"] == str(tmp_path / "envs" / "caches" / ("c" * 40) / "pip")
    assert Path(env["UV_CACHE_DIR"]).is_dir()


def test_a_trusted_commit_builds_with_the_hosts_shared_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "shared-uv"))
    settings, _ = host_build.host_build_settings(
        python=sys.executable, checkout=str(tmp_path), envs_dir=str(tmp_path / "envs"),
        hidden=[], commit="b" * 40, trusted=True,
    )  # fmt: skip
    env = settings["base_env"]
    assert isinstance(env, dict) and settings["own_caches"] is False
    assert env["UV_CACHE_DIR"] == str(tmp_path / "shared-uv")
    assert not (tmp_path / "envs" / "caches").exists()


def test_a_step_run_without_a_sandbox_is_said_on_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sandbox.SETTING, sandbox.NONE)
    settings, used = host_build.host_build_settings(
        python=sys.executable, checkout=str(tmp_path), envs_dir=str(tmp_path / "envs"),
        hidden=[], commit="c" * 40, trusted=False,
    )  # fmt: skip
    confine = settings["confine"]
    assert callable(confine)
    assert confine([sys.executable, "-c", "pass"], None, []) == [sys.executable, "-c", "pass"]
    prepared: dict[str, object] = {"warnings": []}
    host_build.note_unconfined(prepared, used)
    assert prepared["warnings"] == [host_build.HOST_UNCONFINED_WARNING]
