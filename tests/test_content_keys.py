"""Content keys: measurements and results are reused by content, never by path alone."""

from __future__ import annotations

from pathlib import Path

from release_ledger.adapters import git
from release_ledger.adapters.executors import environment
from release_ledger.domain import content
from tests.gitrepo import commit, make_repo


def test_the_declaration_files_are_the_ones_the_environment_adapter_reads() -> None:
    assert content.PROJECT_FILES == environment.PROJECT_FILES
    assert content.REQUIREMENT_FILES == environment._REQUIREMENT_FILES
    assert content.REQUIREMENT_GLOBS == environment._REQUIREMENT_GLOBS


def test_declarations_are_recognised_by_path() -> None:
    for path in (
        "pyproject.toml",
        "uv.lock",
        "requirements/test-extra.txt",
        "requirements-test-x.txt",
    ):
        assert content.declares_environment(path), path
    for path in ("tests/test_a.py", "src/pyproject.toml", "docs/requirements.txt", "README.md"):
        assert not content.declares_environment(path), path


def test_the_environment_key_follows_declarations_not_code() -> None:
    blobs = {"pyproject.toml": "a" * 40, "pkg/mod.py": "b" * 40}
    key = content.environment_key("auto", "3.11.2", blobs)
    assert key == content.environment_key("auto", "3.11.2", {**blobs, "pkg/mod.py": "c" * 40})
    assert key != content.environment_key("auto", "3.11.2", {**blobs, "pyproject.toml": "d" * 40})
    assert key != content.environment_key("auto", "3.12.0", blobs)
    assert key != content.environment_key("none", "3.11.2", blobs)
    # The gate's own interpreter reads no declaration.
    assert content.environment_key("none", "3.11.2", blobs) == content.environment_key(
        "none", "3.11.2", {}
    )


def test_measurement_and_result_keys_change_with_each_input() -> None:
    base = content.measurement_key("blob", "env", "cmd")
    assert len({base, content.measurement_key("blob2", "env", "cmd"),
                content.measurement_key("blob", "env2", "cmd"),
                content.measurement_key("blob", "env", "cmd2")}) == 4  # fmt: skip
    result = content.result_key("c1", "blob", "env", "cmd", "r1")
    assert result != content.result_key("c2", "blob", "env", "cmd", "r1")
    assert result != content.result_key("c1", "blob", "env", "cmd", "r2")


def test_blob_hashes_name_every_file_of_a_commit_by_its_content(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a(): pass\n", "b.txt": "same\n"})
    first = git.resolve_commit(repo, "HEAD")
    second = commit(repo, {"tests/test_a.py": "def test_a(): assert 1\n"}, "two")
    one, two = git.blob_hashes(repo, first), git.blob_hashes(repo, second)
    assert set(one) == set(two) == {"tests/test_a.py", "b.txt"}
    assert one["b.txt"] == two["b.txt"]
    assert one["tests/test_a.py"] != two["tests/test_a.py"]
