"""The lock rule: a `uv.lock` pins a declared source only where the tool installing it reads
the lock, and the ledger is told why either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from release_ledger.adapters.executors.env_lock import lock_use

DIGEST = "ab" * 32
MANAGED = {"tool": {"uv": {"default-groups": ["test"]}}}
UNMANAGED = {"tool": {"uv": {"managed": False}}}


@pytest.mark.parametrize(
    ("source", "pyproject", "applied", "note"),
    [
        ({"source": "tox", "detail": "tox env py311", "runner": "uv-venv-lock-runner"}, {},
         True, "uv.lock applied: tox env py311 runs uv-venv-lock-runner (uv sync)"),
        ({"source": "tox", "detail": "tox env py311", "runner": "uv-venv-runner"}, MANAGED,
         False, "uv.lock not applied: tox env py311 installs with runner uv-venv-runner that "
         "does not read it"),
        ({"source": "dependency-group", "detail": "group test"}, MANAGED,
         True, "uv.lock applied: uv sync installs group test of a project uv manages ([tool.uv])"),
        ({"source": "dependency-group", "detail": "group test"}, UNMANAGED,
         False, "uv.lock not applied: group test of a project uv does not manage (no [tool.uv]) "
         "is not installed by uv sync"),
        ({"source": "extras", "detail": "extra [test]"}, {},
         False, "uv.lock not applied: extra [test] of a project uv does not manage (no "
         "[tool.uv]) is not installed by uv sync"),
        ({"source": "requirements-file", "detail": "requirements/tests.txt"}, MANAGED,
         False, "uv.lock not applied: pip installs requirements/tests.txt, which does not read it"),
        ({"source": "nox", "detail": "nox session tests-3.11", "runner": "uv sync"}, {},
         True, "uv.lock applied: nox session tests-3.11 installs with uv sync"),
        ({"source": "nox", "detail": "nox session tests-3.11", "runner": ""}, MANAGED,
         False, "uv.lock not applied: the nox source (nox session tests-3.11) does not read it"),
        ({"source": "extras", "detail": "extra [test]", "pins": ["pytest==8.0"]}, MANAGED,
         False, "uv.lock not applied: the pinned package set replaces it"),
    ],
)  # fmt: skip
def test_the_lock_applies_only_where_the_sources_own_tool_reads_it(
    source: dict[str, object], pyproject: dict[str, object], applied: bool, note: str
) -> None:
    assert lock_use(source, pyproject, DIGEST) == (applied, note)


def test_without_a_lock_nothing_is_applied_and_only_a_runner_that_needs_one_is_noted() -> None:
    runner = {"source": "tox", "detail": "tox env py311", "runner": "uv-venv-lock-runner"}

    assert lock_use(runner, {}, "") == (
        False, "tox env py311 runs uv-venv-lock-runner but the revision has no uv.lock"
    )
    nox = {"source": "nox", "detail": "nox session tests", "runner": "uv sync"}
    assert lock_use(nox, {}, "") == (
        False, "nox session tests installs with uv sync but the revision has no uv.lock"
    )
    assert lock_use({"source": "extras", "detail": "extra [test]"}, MANAGED, "") == (False, "")
    assert lock_use({"source": "requirements-file", "detail": "r.txt"}, {}, "") == (False, "")


def test_the_lock_runner_installs_the_groups_uv_sync_installs_unasked(tmp_path: Path) -> None:
    from release_ledger.adapters.executors.env_sources import _default_groups

    groups = '[dependency-groups]\ndev = ["a"]\ntest = ["b"]\n'
    (tmp_path / "pyproject.toml").write_text(groups)
    assert _default_groups(str(tmp_path)) == ["dev"]
    (tmp_path / "pyproject.toml").write_text(groups + '[tool.uv]\ndefault-groups = ["test"]\n')
    assert _default_groups(str(tmp_path)) == ["test"]
    (tmp_path / "pyproject.toml").write_text(groups + '[tool.uv]\ndefault-groups = "all"\n')
    assert _default_groups(str(tmp_path)) == ["dev", "test"]
