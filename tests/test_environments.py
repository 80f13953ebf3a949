"""Each revision runs its own code: per-revision environments, end to end with real installs.

These build real virtual environments with uv from the packages the revisions declare (PyPI is
reachable on these machines); uv's own cache keeps repeats fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from release_ledger.adapters.executors import environment
from tests import gatekit
from tests.gatekit import Result, events, run_ledger
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow


def gate(workdir: Path, repo: Path, *args: str) -> Result:
    """The gate without release builds: these tests are about the test environments (the
    sdist/wheel builds and the upgrade have their own tests in test_release_builds.py)."""
    return gatekit.gate(workdir, repo, "--no-release-builds", *args)


SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
)


def project(name: str, version: str, dependencies: list[str], test_extra: list[str]) -> str:
    return (
        SETUPTOOLS
        + f'[project]\nname = "{name}"\nversion = "{version}"\n'
        + f"dependencies = {json.dumps(dependencies)}\n"
        + f"[project.optional-dependencies]\ntest = {json.dumps(test_extra)}\n"
    )


def src_layout(value: int, version: str) -> dict[str, str | bytes | None]:
    return {
        "pyproject.toml": project("shiny", version, [], ["pytest"]),
        "src/shiny/__init__.py": f"VALUE = {value}\n",
        "tests/test_value.py": (
            "import shiny\n\n"
            f"def test_value_is_this_revisions():\n    assert shiny.VALUE == {value}\n"
        ),
    }


def env_events(workdir: Path, run_id: str) -> list[dict[str, Any]]:
    return [e for e in events(workdir, run_id) if e["kind"] == "EnvironmentPrepared"]


def test_a_src_layout_project_is_tested_from_its_own_code_not_an_installed_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path, src_layout(1, "1.0"))
    tag(repo, "v1")
    commit(repo, src_layout(2, "2.0"), "value 2")
    # A stale copy of the package importable from the gate's own environment, as when the
    # gate runs in a virtual environment where an older release was installed.
    stale = tmp_path / "stale" / "shiny"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text("VALUE = 0\n")
    monkeypatch.setenv("PYTHONPATH", str(stale.parent))

    result = gate(tmp_path, repo)

    assert result.code == 0, (result.stdout, result.stderr)
    assert result.document["status"] == "passed"
    prepared = env_events(tmp_path, result.document["run_id"])
    assert {e["revision"] for e in prepared} == {"head", "base"}
    for e in prepared:
        assert e["status"] == "ready" and e["how"] == "uv" and e["project"] == "shiny"
        # the revision's wheel, installed in its own environment (not an overlay)
        assert "/envs/" in e["imports"]["shiny"] and "site-packages" in e["imports"]["shiny"]
        assert e["warnings"] == []

    # The same suite with the gate's interpreter (`--env none`) imports the stale copy: both
    # revisions fail, on code neither of them holds — the wrong verdict this issue was about.
    blind = gate(tmp_path / "blind", repo, "--env", "none")
    assert blind.document["preexisting"] == ["tests/test_value.py::test_value_is_this_revisions"]
    assert [e["how"] for e in env_events(tmp_path / "blind", blind.document["run_id"])] == [
        "none",
        "none",
    ]


def compiled_check(value: int, version: str) -> dict[str, str | bytes | None]:
    return {
        "pyproject.toml": project("shiny", version, ["six==1.16.0"], ["pytest", "tomli==2.0.1"]),
        "src/shiny/__init__.py": f"import six\n\nVALUE = {value}\n",
        "src/shiny/deep.py": "DEEP = 1\n",  # imported by nothing: compiled all the same
        "tests/test_compiled.py": (
            "import importlib.util, os, shiny, six, tomli\n\n"
            "def compiled(path):\n"
            "    return os.path.exists(importlib.util.cache_from_source(path))\n\n"
            "def test_the_project_and_what_it_and_its_tests_import_are_compiled():\n"
            "    assert compiled(os.path.join(os.path.dirname(shiny.__file__), 'deep.py'))\n"
            "    assert compiled(six.__file__)  # the project imports it: at the build\n"
            "    assert compiled(tomli.__file__)  # only the tests do: after the collection\n"
        ),
    }


def test_what_the_project_and_its_tests_import_has_bytecode_written_by_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards cannot write bytecode into the environment: without it written by the gate,
    every shard process compiles the project and what it and its tests import, again
    (networkx: 0.4 s of CPU each; numpy and scipy another 0.4 s)."""
    monkeypatch.setenv("LEDGER_ENVS_DIR", str(tmp_path / "envs"))  # built here, not reused
    repo = make_repo(tmp_path, compiled_check(1, "1.0"))
    tag(repo, "v1")
    commit(repo, compiled_check(2, "2.0"), "value 2")

    result = gate(tmp_path, repo)

    assert result.code == 0, (result.stdout, result.stderr)
    assert result.document["status"] == "passed"
    assert result.document["preexisting"] == []  # passed at base too, not failed at both
    prepared = env_events(tmp_path, result.document["run_id"])
    assert [e["how"] for e in prepared] == ["uv", "uv"]


def dependency_repo(tmp_path: Path, base_pin: str, head_pin: str) -> Path:
    def files(pin: str, version: str) -> dict[str, str | bytes | None]:
        expected = pin.split("==")[1]
        return {
            "pyproject.toml": project("pinned", version, [pin], ["pytest"]),
            "pinned/__init__.py": "",
            "tests/test_dependency.py": (
                "from importlib.metadata import version\n\n"
                "def test_sees_its_own_dependency():\n"
                f"    assert version('iniconfig') == {expected!r}\n"
            ),
        }

    repo = make_repo(tmp_path, files(base_pin, "1.0"))
    tag(repo, "v1")
    commit(repo, files(head_pin, "2.0"), "needs a newer iniconfig")
    return repo


def test_each_revision_sees_its_own_dependency_versions_and_a_repeat_reuses_them(
    tmp_path: Path,
) -> None:
    repo = dependency_repo(tmp_path, "iniconfig==1.1.1", "iniconfig==2.0.0")

    first = gate(tmp_path, repo)

    assert first.code == 0, (first.stdout, first.stderr)
    prepared = {e["revision"]: e for e in env_events(tmp_path, first.document["run_id"])}
    assert prepared["head"]["key"] != prepared["base"]["key"]  # the declarations differ
    assert all(e["status"] == "ready" for e in prepared.values())

    again = gate(tmp_path, repo)

    assert again.code == 0, (again.stdout, again.stderr)
    reused = env_events(tmp_path, again.document["run_id"])
    assert reused and all(e["reused"] for e in reused), reused
    assert {e["revision"]: e["key"] for e in reused}["head"] == prepared["head"]["key"]
    if "base" not in {e["revision"] for e in reused}:  # base results reused from the first run
        assert "BaselineReused" in {e["kind"] for e in events(tmp_path, again.document["run_id"])}
    shown = run_ledger(tmp_path, "show", again.document["run_id"]).stdout
    assert "head environment: reused" in shown


def test_revisions_whose_dependencies_did_not_change_share_one_dependency_layer(
    tmp_path: Path,
) -> None:
    repo = dependency_repo(tmp_path, "iniconfig==2.0.0", "iniconfig==2.0.0")

    result = gate(tmp_path, repo)

    assert result.code == 0, (result.stdout, result.stderr)
    prepared = {e["revision"]: e for e in env_events(tmp_path, result.document["run_id"])}
    assert prepared["head"]["deps_key"] == prepared["base"]["deps_key"]
    # ... while each revision has its own environment with its own wheel installed
    assert prepared["head"]["key"] != prepared["base"]["key"]


def test_a_broken_dependency_declaration_at_head_is_env_setup_unmeasured(tmp_path: Path) -> None:
    repo = dependency_repo(
        tmp_path, "iniconfig==2.0.0", "release-ledger-no-such-package-anywhere==1.0"
    )

    result = gate(tmp_path, repo)

    assert result.code in (3, 4), (result.stdout, result.stderr)
    assert result.document["status"] == "unmeasured"
    reasons = {u["reason"] for u in result.document["unmeasured"]}
    assert reasons == {"env-setup"}, result.document["unmeasured"]
    evs = events(tmp_path, result.document["run_id"])
    failed = [e for e in evs if e["kind"] == "EnvironmentPrepared" and e["status"] == "failed"]
    assert [e["revision"] for e in failed] == ["head"]
    assert failed[0]["error"] == (
        "no declared test environment installs: tried "
        "extras (installing extra [test] failed (exit 1)), "
        "pytest (installing pytest alone failed (exit 1))"
    )
    assert [(t["source"], t["outcome"]) for t in failed[0]["tried"]] == [
        ("extras", "failed"),
        ("pytest", "failed"),
    ]
    assert all(t["log_tail_hash"] for t in failed[0]["tried"])
    log = run_ledger(tmp_path, "show", result.document["run_id"]).stdout
    assert "head environment: setup failed" in log
    assert not [e for e in evs if e["kind"] == "ShardSplit"]  # no culprit hunt for a setup


def test_a_user_setup_command_builds_the_environment(tmp_path: Path) -> None:
    repo = dependency_repo(tmp_path, "iniconfig==2.0.0", "iniconfig==2.0.0")
    setup = f"{sys.executable} -m uv pip install --python {{python}} iniconfig==2.0.0 pytest"

    result = gate(tmp_path, repo, "--env", setup)

    assert result.code == 0, (result.stdout, result.stderr)
    prepared = env_events(tmp_path, result.document["run_id"])
    assert {e["how"] for e in prepared} == {"command"}
    assert all(e["packages"] >= 2 and "/envs/" in e["python"] for e in prepared), prepared


def test_a_repository_that_is_not_a_python_project_runs_with_the_gates_interpreter(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": "def test_b():\n    pass\n"})

    result = gate(tmp_path, repo)

    assert result.code == 0
    prepared = env_events(tmp_path, result.document["run_id"])
    assert {e["how"] for e in prepared} == {"gate-interpreter"}
    assert {e["python"] for e in prepared} == {sys.executable}


def test_repository_settings_set_the_gates_defaults_and_flags_win(tmp_path: Path) -> None:
    """Policy (`rounds`) is read at base, what describes the code (`env`) at head; head's
    own policy is recorded as not applied and told; a flag wins over both."""
    at_base = {"tests/test_a.py": "def test_a():\n    pass\n",
               "pyproject.toml": "[tool.release-ledger]\nrounds = 0\n"}  # fmt: skip
    repo = make_repo(tmp_path, at_base)
    tag(repo, "v1")
    table = '[tool.release-ledger]\nbase = "v1"\nenv = "none"\nrounds = 3\nslower-factor = 900.0\n'
    commit(repo, {"pyproject.toml": table, "tests/test_b.py": "def test_b():\n    pass\n"})

    result = run_ledger(tmp_path, "gate", "--repo", str(repo), "--questions", "0", "--json")
    assert result.code == 0, (result.stdout, result.stderr)
    evs = events(tmp_path, result.document["run_id"])
    started = evs[0]
    assert started["base_ref"] == "v1"
    assert started["options"]["env"] == "none" and started["options"]["rounds"] == 0
    assert started["options"]["resources"]["time_factor"] == 2
    assert started["options"]["head_settings_ignored"] == {"rounds": 3, "slower-factor": 900.0}
    shown = run_ledger(tmp_path, "show", result.document["run_id"])
    assert "head's own policy not applied (read at base): rounds, slower-factor" in shown.stdout

    flagged = run_ledger(
        tmp_path, "gate", "--repo", str(repo), "--rounds", "1", "--questions", "0", "--json"
    )
    options = events(tmp_path, flagged.document["run_id"])[0]["options"]
    assert options["rounds"] == 1 and options["head_settings_ignored"] == {"slower-factor": 900.0}
    told = run_ledger(tmp_path, "gate", "--repo", str(repo), "--questions", "0")
    said = " ".join((told.stdout + told.stderr).split())  # rich wraps at 80 columns
    assert "sets rounds, slower-factor otherwise than base's: not applied" in said, said


def test_an_unknown_repository_setting_is_refused_with_one_line(tmp_path: Path) -> None:
    table = '[tool.release-ledger]\nbase = "v1"\nshardz = 3\n'
    repo = make_repo(tmp_path, {"pyproject.toml": table, "tests/test_a.py": "def test_a(): pass\n"})

    result = run_ledger(tmp_path, "gate", "--repo", str(repo), "--json")
    assert result.code == 2
    assert "shardz" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# --- the environment program's parts ----------------------------------------------------------


def test_requirements_files_lose_the_lines_that_install_the_project_itself(
    tmp_path: Path,
) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "requirements").mkdir(parents=True)
    (checkout / "requirements" / "test.txt").write_text(
        "-e .\n.[test]\n-r base.txt\n-c ../constraints.txt\npytest>=8  # the runner\n"
    )
    out = tmp_path / "out"
    out.mkdir()

    copied = Path(
        environment.sanitized_requirements(str(checkout), "requirements/test.txt", str(out))
    )

    lines = copied.read_text().splitlines()
    assert lines == [
        f"-r {checkout / 'requirements' / 'base.txt'}",
        f"-c {checkout / 'requirements' / '../constraints.txt'}",
        "pytest>=8  # the runner",
    ]
    assert environment.requirement_files(str(checkout)) == ["requirements/test.txt"]


def test_the_first_test_dependency_group_is_chosen_with_its_includes(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[dependency-groups]\n"
        'lint = ["ruff"]\n'
        'dev = ["pytest", {include-group = "lint"}]\n'
        'tests = ["hypothesis", {include-group = "dev"}]\n'
    )

    assert environment.dependency_group(str(tmp_path)) == (
        "tests",
        ["hypothesis", "pytest", "ruff"],
    )


def test_the_cache_removes_the_least_recently_used_entries_past_its_size(tmp_path: Path) -> None:
    import os
    import time

    for index, name in enumerate(("old", "middle", "new")):
        entry = tmp_path / "envs" / name
        entry.mkdir(parents=True)
        (entry / "ready.json").write_text(json.dumps({"bytes": 100}))
        stamp = time.time() - 100 + index
        os.utime(entry / "ready.json", (stamp, stamp))

    removed = environment.prune(str(tmp_path), max_bytes=200)

    assert [Path(p).name for p in removed] == ["old"]
    assert sorted(p.name for p in (tmp_path / "envs").iterdir()) == ["middle", "new"]


def test_without_uv_the_environment_is_made_with_venv_and_pip(tmp_path: Path) -> None:
    checkout = make_repo(tmp_path, src_layout(3, "3.0"))

    prepared = environment.prepare(
        str(checkout), mode="auto", python=sys.executable, cache=str(tmp_path / "cache"),
        commit="c" * 40, installer_name="pip",
    )  # fmt: skip

    assert prepared["status"] == "ready", prepared.get("log_tail")
    assert prepared["how"] == "pip"
    assert "pytest==" in str(prepared["packages"])
    assert "site-packages" in str(prepared["imports"]["shiny"])  # type: ignore[index]


def test_a_package_that_resolves_outside_the_revision_is_a_warning(tmp_path: Path) -> None:
    overlay, checkout, elsewhere = (tmp_path / n for n in ("overlay", "checkout", "elsewhere"))
    for folder in (overlay, elsewhere):
        (folder / "shiny").mkdir(parents=True)
        (folder / "shiny" / "__init__.py").write_text("")
    checkout.mkdir()
    env = {"PYTHONPATH": f"{elsewhere}:{overlay}", "PATH": "/usr/bin:/bin"}

    paths, warnings = environment._import_check(
        sys.executable, ["shiny"], str(overlay), str(checkout), env
    )

    assert paths["shiny"] == str(elsewhere / "shiny" / "__init__.py")
    assert warnings == [
        f"package 'shiny' imports from {elsewhere / 'shiny' / '__init__.py'}, "
        "not from this revision's build"
    ]


def test_base_results_are_never_reused_across_environment_settings(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": "def test_b():\n    pass\n"})

    first = gate(tmp_path, repo, "--env", "none")
    same = gate(tmp_path, repo, "--env", "none")
    other = gate(tmp_path, repo)

    def reused(result: Any) -> bool:
        return any(
            e["kind"] == "BaselineReused" for e in events(tmp_path, result.document["run_id"])
        )

    assert first.code == same.code == other.code == 0
    assert reused(same) and not reused(other)


COVERED = '[tool.pytest.ini_options]\naddopts = "--cov=covered --cov-fail-under=100"\n'


@pytest.mark.parametrize("env", ["none", "command"])
def test_coverage_turned_on_by_addopts_is_off_in_shards_of_an_interpreter_with_pytest_cov(
    tmp_path: Path, env: str
) -> None:
    """`addopts = --cov=pkg --cov-fail-under=100` with pytest-cov installed in the
    interpreter the shards run in (`--env none`: the given one; `--env COMMAND`: the venv
    the command fills): each shard, a share of a suite that covers everything, would exit 1
    under the fail-under with no test failed. That interpreter is asked; its shards run with
    `--no-cov` and the gate passes."""
    import subprocess

    from release_ledger.adapters.executors.env_installer import find_tool

    uv = find_tool("uv")
    assert uv is not None
    venv = tmp_path / "caller"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    install = [uv, "pip", "install", "-q", "--python", python, "pytest", "pytest-cov"]
    subprocess.run(install, check=True)
    repo = make_repo(tmp_path, {
        "pyproject.toml": COVERED,
        "covered/__init__.py": "def one():\n    return 1\n\n\ndef two():\n    return 2\n",
        "tests/test_one.py": "from covered import one\n\n\ndef test_one():\n    assert one()\n",
        "tests/test_two.py": "from covered import two\n\n\ndef test_two():\n    assert two()\n",
    })  # fmt: skip
    tag(repo, "v1")
    commit(repo, {"tests/test_three.py": "def test_three():\n    pass\n"})
    whole = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    assert subprocess.run(whole, cwd=repo, capture_output=True).returncode == 0  # 100% whole
    setup = f"{uv} pip install -q --python {{python}} pytest pytest-cov"
    how = ["--env", "none", "--python", python] if env == "none" else ["--env", setup]

    result = gate(tmp_path, repo, "--shards", "2", *how)

    assert result.code == 0, result.stdout
    assert result.document["status"] == "passed"
