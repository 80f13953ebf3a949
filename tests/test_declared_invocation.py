"""The gate runs the suite as the project's tox declares it: the env_list environment of this
interpreter (factor conditions applied by tox), its command's options told from its targets by
pytest's own parser with the revision's plugins, its `changedir`, its `{posargs:DEFAULT}`;
discovery is what that invocation collects. Real tox, real environments, real gates."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from release_ledger.adapters.executors import environment
from tests import gatekit
from tests.gatekit import events, run_ledger
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

VERSION = "{}{}".format(*sys.version_info[:2])
PYPROJECT = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    '[project]\nname = "facts"\nversion = "1.0"\n'
    "[project.optional-dependencies]\n"
    'tests = ["iniconfig==2.0.0", "pytest-xdist"]\n'
)
# Factor environments with a factor-conditional extra, the installed package's doctests run
# from `changedir`, an option whose value is an existing path (`-c setup.cfg`), and a
# `{posargs:-n 2}` default that needs pytest-xdist (installed by the extra only).
TOX_INI = (
    "[tox]\nenv_list = py3{10,11,12,13}-tests, lint\n"
    "[testenv]\nextras = tests: tests\nchangedir = tests: .tox\n"
    "commands =\n"
    "    tests: pytest --doctest-modules {envsitepackagesdir}/facts {toxinidir}/tests"
    " -c {toxinidir}/setup.cfg {posargs:-n 2}\n"
    "[testenv:lint]\ncommands = ruff check\n"
)
SETUP_CFG = "[tool:pytest]\nmarkers =\n    needs_extra: uses the tests extra\n"


def project(value: int) -> dict[str, str | bytes | None]:
    return {
        "pyproject.toml": PYPROJECT,
        "tox.ini": TOX_INI,
        "setup.cfg": SETUP_CFG,
        "facts/__init__.py": (
            f"VALUE = {value}\n\n"
            "def double(x):\n    '''\n    >>> double(2)\n    4\n    '''\n"
            f"    return 2 * x + {value - 1}\n"
        ),
        "tests/test_extra.py": (
            "import iniconfig\nimport pytest\n\n"
            "@pytest.mark.needs_extra\n"
            "def test_the_extra_is_installed():\n    assert iniconfig\n"
        ),
        "tests/test_value.py": (
            "import facts\n\ndef test_value_is_one():\n    assert facts.VALUE == 1\n"
        ),
    }


def test_a_factor_env_with_a_conditional_extra_is_named_and_its_command_run(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, project(1))
    tag(repo, "v1")
    commit(repo, project(2), "value 2")

    result = gatekit.gate(tmp_path, repo, "--no-release-builds", "--shard-processes", "resident")

    assert result.code == 1, (result.stdout, result.stderr)
    assert result.document["status"] == "failed"
    # the test that needs the factor-conditional extra passes at both revisions
    # and the installed package's doctest, run as tox runs it, is named the same at both
    assert result.document["introduced"] == [
        "tests/test_value.py::test_value_is_one", "{site-packages}/facts/__init__.py::facts.double",
    ]  # fmt: skip
    assert result.document["preexisting"] == []
    run_id = result.document["run_id"]
    recorded = events(tmp_path, run_id)
    prepared = [e for e in recorded if e["kind"] == "EnvironmentPrepared"]
    assert {e["tried"][-1]["detail"] for e in prepared} == {f"tox env py{VERSION}-tests"}
    for event in prepared:
        invocation = event["invocation"]
        assert invocation["source"] == f"tox:py{VERSION}-tests"
        assert invocation["workdir"] == ".tox"
        # `-c` keeps its value although the value is an existing file
        assert invocation["options"] == ["--doctest-modules", "-c", "../setup.cfg", "-n", "2"]
        assert invocation["targets"] == [
            {"path": "facts", "installed": True}, {"path": "tests"},
        ]  # fmt: skip
        assert invocation["posargs"] == ["-n", "2"]
        assert "pytest-xdist" in invocation["parsed_by"]
    discovered = next(e for e in recorded if e["kind"] == "TestFilesDiscovered")
    assert discovered["files"] == [
        "tests/test_extra.py", "tests/test_value.py", "{site-packages}/facts/__init__.py",
    ]  # fmt: skip
    assert discovered["missing_at_base"] == []
    assert discovered["collected_by"].startswith(f"collected by tox:py{VERSION}-tests")
    # every attempt ran on a resident worker, and each revision's collection was the first
    # request of the worker that went on to its shards (no worker's first request a shard)
    workers = [e.get("worker", "") for e in recorded if e["kind"] == "ShardAttemptRecorded"]
    assert workers and all(workers) and not {"1.1", "2.1"} & set(workers), workers
    shown = run_ledger(tmp_path, "show", run_id, "--all").stdout
    assert f"discovered 3 test files at head (collected by tox:py{VERSION}-tests" in shown
    assert (
        "runs `pytest --doctest-modules -c ../setup.cfg -n 2 {site-packages}/facts tests`"
        " in .tox/" in shown
    )


def test_an_unreadable_tox_config_is_one_line_and_the_next_source_is_used(
    tmp_path: Path,
) -> None:
    root = tmp_path / "checkout"
    files = {**project(1), "tox.ini": "[tox\nenv_list = py311\n"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(str(text))
    found = environment.prepare(
        str(root), mode="auto", python=sys.executable, cache=str(tmp_path / "cache"),
        commit="c" * 40,
    )  # fmt: skip
    assert found["status"] == "ready", found.get("error")
    tried = found["tried"]
    assert [(t["source"], t["outcome"]) for t in tried] == [  # type: ignore[index]
        ("tox", "failed"), ("extras", "used"),
    ]  # fmt: skip
    error = str(tried[0]["error"])  # type: ignore[index]
    assert error.startswith("tox could not read its configuration") and "\n" not in error
    invocation = found["invocation"]
    assert invocation["source"] == "default"  # type: ignore[index]
    assert invocation["fallback"]  # type: ignore[index]


def test_a_command_the_gate_cannot_run_under_pytest_is_a_recorded_fallback(
    tmp_path: Path,
) -> None:
    root = tmp_path / "checkout"
    tox_ini = "[tox]\nenv_list = py3\n[testenv]\nextras = tests\ncommands = make check\n"
    for rel, text in {**project(1), "tox.ini": tox_ini}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(str(text))
    found = environment.prepare(
        str(root), mode="auto", python=sys.executable, cache=str(tmp_path / "cache"),
        commit="c" * 40,
    )  # fmt: skip
    assert found["status"] == "ready", found.get("error")
    invocation = found["invocation"]
    assert invocation["source"] == "default"  # type: ignore[index]
    assert "runs pytest or unittest" in str(invocation["fallback"])  # type: ignore[index]
