"""Each revision's environment is the one its CI has: console scripts run from the cached
environment, and a `uv.lock` pins packages only where the declared source's own tool reads it
(tox-uv's lock runner, `uv sync` in a project uv manages), alike at both revisions, recorded.

Real gates, real builds and installs with uv from PyPI (its cache keeps repeats fast).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from release_ledger.adapters.executors import environment
from tests import gatekit
from tests.gatekit import events, run_ledger
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

VARIANT = "{}{}".format(*sys.version_info[:2])
SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
)


def prepared_events(workdir: Path, run_id: str) -> dict[str, dict[str, object]]:
    found = [e for e in events(workdir, run_id) if e["kind"] == "EnvironmentPrepared"]
    return {str(e["revision"]): e for e in found}


def uv_lock(root: Path) -> None:
    """`uv lock` in a working tree, as the project's maintainers ran it."""
    uv = environment.find_uv()
    assert uv is not None
    subprocess.run(
        [uv, "lock", "-q", "--python", sys.executable], cwd=root, check=True,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )  # fmt: skip


# --- console scripts ----------------------------------------------------------------------------


def cli_project(greeting: str) -> dict[str, str | bytes | None]:
    return {
        "pyproject.toml": SETUPTOOLS + (
            '[project]\nname = "greeter"\nversion = "1.0"\n'
            '[project.optional-dependencies]\ntest = ["pytest"]\n'
            '[project.scripts]\ngreet = "greeter:main"\n'
        ),
        "greeter/__init__.py": f"def main():\n    print({greeting!r})\n",
        # As a CLI test does: the script by name, found on PATH, in a child process.
        "tests/test_cli.py": (
            "import subprocess\n\n"
            "def test_the_command_greets():\n"
            "    done = subprocess.run(['greet'], capture_output=True, text=True)\n"
            "    assert done.returncode == 0, done.stderr\n"
            "    assert done.stdout.strip() == 'hello'\n"
        ),
        "tests/test_library.py": (
            "import greeter\n\ndef test_the_module_imports():\n    assert greeter.main\n"
        ),
    }


def test_a_cli_regression_at_head_is_introduced_because_console_scripts_run_from_the_cache(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, cli_project("hello"))
    tag(repo, "v1")
    commit(repo, cli_project("goodbye"), "the command says goodbye")

    result = gatekit.gate(tmp_path, repo, "--no-release-builds")

    assert result.code == 1, (result.stdout, result.stderr)
    assert result.document["status"] == "failed"
    assert result.document["introduced"] == ["tests/test_cli.py::test_the_command_greets"]
    # The script's interpreter is the environment's own, at the place it is kept.
    for revision, prepared in prepared_events(tmp_path, result.document["run_id"]).items():
        venv = Path(str(prepared["python"])).parent.parent
        script = (venv / "bin" / "greet").read_text().splitlines()[0]
        assert script == f"#!{venv}/bin/python", revision
        assert ".build-" not in (venv / "bin" / "activate").read_text()


# --- uv.lock ------------------------------------------------------------------------------------


def grouped_project() -> dict[str, str | bytes | None]:
    return {
        "pyproject.toml": SETUPTOOLS + (
            '[project]\nname = "grouped"\nversion = "1.0"\n'
            '[dependency-groups]\ntest = ["pytest"]\n'
        ),
        "grouped/__init__.py": "",
        "tests/test_runner.py": (
            "import pytest\n\n"
            "def test_the_suite_runs_under_a_current_pytest():\n"
            "    assert int(pytest.__version__.split('.')[0]) >= 8, pytest.__version__\n"
        ),
    }


def test_a_lock_the_declared_source_does_not_read_is_applied_at_neither_revision(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, grouped_project())
    tag(repo, "v1")
    # Head adds a uv.lock that pins an old pytest; the group its tests install from does not
    # read it (a project uv does not manage: no [tool.uv]).
    (repo / "pyproject.toml").write_text(
        str(grouped_project()["pyproject.toml"]).replace('"pytest"', '"pytest==7.4.4"')
    )
    uv_lock(repo)
    commit(repo, {"pyproject.toml": grouped_project()["pyproject.toml"]}, "add a lock")
    assert "7.4.4" in (repo / "uv.lock").read_text()

    result = gatekit.gate(tmp_path, repo, "--no-release-builds")

    assert result.code == 0, (result.stdout, result.stderr)
    assert result.document["status"] == "passed"
    run_id = result.document["run_id"]
    prepared = prepared_events(tmp_path, run_id)
    # one resolution for both: the same dependency layer, the lock in neither
    assert prepared["base"]["deps_key"] == prepared["head"]["deps_key"]
    assert "lock" not in prepared["head"] and "lock" not in prepared["base"]
    assert "uv.lock" not in prepared["head"]["files_read"]  # type: ignore[operator]
    assert prepared["head"]["lock_note"] == (
        "uv.lock not applied: group test of a project uv does not manage (no [tool.uv]) "
        "is not installed by uv sync"
    )
    assert "lock_note" not in prepared["base"]  # no lock at base: nothing to say
    shown = run_ledger(tmp_path, "show", run_id, "--all").stdout
    assert "lock: uv.lock not applied" in shown


def tox_lock_project(version: str) -> dict[str, str | bytes | None]:
    return {
        "pyproject.toml": SETUPTOOLS + (
            f'[project]\nname = "locked"\nversion = "{version}"\n'
            '[project.optional-dependencies]\ntest = ["pytest", "iniconfig"]\n'
        ),
        "tox.ini": (
            f"[tox]\nenv_list = py{VARIANT}\n"
            "[testenv]\nrunner = uv-venv-lock-runner\nextras = test\ncommands = pytest tests\n"
        ),
        "locked/__init__.py": "",
        "tests/test_pins.py": (
            "from importlib.metadata import version\n\n"
            "def test_the_lock_pins_iniconfig():\n"
            "    assert version('iniconfig') == '1.1.1'\n"
        ),
    }


def test_a_tox_env_with_the_lock_runner_applies_the_lock_at_both_revisions_and_records_it(
    tmp_path: Path,
) -> None:
    files = tox_lock_project("1.0")
    repo = make_repo(tmp_path, files)
    # The lock pins iniconfig 1.1.1; the extra itself leaves it free (the newest is 2.x).
    (repo / "pyproject.toml").write_text(
        str(files["pyproject.toml"]).replace('"iniconfig"', '"iniconfig==1.1.1"')
    )
    uv_lock(repo)
    (repo / "pyproject.toml").write_text(str(files["pyproject.toml"]))
    uv_lock(repo)  # the lock keeps its pin while it still satisfies the declaration
    assert 'name = "iniconfig"\nversion = "1.1.1"' in (repo / "uv.lock").read_text()
    commit(repo, {}, "lock")
    tag(repo, "v1")
    commit(repo, {"locked/__init__.py": "VALUE = 2\n"}, "head")

    result = gatekit.gate(tmp_path, repo, "--no-release-builds")

    assert result.code == 0, (result.stdout, result.stderr)
    prepared = prepared_events(tmp_path, result.document["run_id"])
    for revision in ("base", "head"):
        assert prepared[revision]["source"] == "tox", prepared[revision]
        assert str(prepared[revision]["lock"]).startswith("uv.lock sha256:")
        assert prepared[revision]["lock_note"] == (
            f"uv.lock applied: tox env py{VARIANT} runs uv-venv-lock-runner (uv sync)"
        )
        assert "uv.lock" in prepared[revision]["files_read"]  # type: ignore[operator]
