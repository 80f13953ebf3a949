"""The default shard count fits the suite: a small suite is not cut into shards whose starts
cost more than running them side by side saves; `--shards N` is taken as given.

Real gates on real repositories with real pytest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gatekit import events, gate
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

TINY = {f"tests/test_t{i}.py": f"def test_{i}():\n    assert {i} == {i}\n" for i in range(6)}


def _small_pair(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path, TINY)
    tag(repo, "v1")
    commit(repo, {"tests/test_t0.py": "def test_0():\n    assert 0 == 0 * 2\n"})
    return repo


def _planned(tmp_path: Path, repo: Path, *args: str) -> list[list[str]]:
    result = gate(tmp_path, repo, "--env", "none", "--jobs", "2", *args)
    assert result.code == 0, result.stderr
    evs = events(tmp_path, result.document["run_id"])
    [plan] = [e for e in evs if e["kind"] == "ShardsPlanned"]
    assert plan["count"] == len(plan["shards"])
    return [shard["files"] for shard in plan["shards"]]


def test_a_small_suite_with_the_default_count_runs_in_one_shard_a_revision(
    tmp_path: Path,
) -> None:
    assert _planned(tmp_path, _small_pair(tmp_path)) == [sorted(TINY)]


def test_a_shard_count_given_is_taken_as_given_whatever_the_suite_s_size(
    tmp_path: Path,
) -> None:
    assert len(_planned(tmp_path, _small_pair(tmp_path), "--shards", "3")) == 3
