"""Real gates over suites declared by nox and hatch, and unittest suites pytest's default
discovery does not find: each regression at head is exactly the introduced set, and
`ledger show` names where the test command came from.

Real two-commit repositories, real installs with uv (its cache keeps repeats fast), the real
ledger.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import gatekit
from tests.gatekit import events, run_ledger
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
)


def pyproject(name: str, tail: str = "") -> str:
    return SETUPTOOLS + f'[project]\nname = "{name}"\nversion = "1.0"\n' + tail


def unittest_module(module: str, cls: str) -> str:
    return (
        "import unittest\n\n"
        f"from {module} import add\n\n\n"
        f"class {cls}(unittest.TestCase):\n"
        "    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n\n"
        "    def test_zero(self):\n"
        "        self.assertEqual(add(0, 0), 0)\n"
    )


ADD = "def add(a, b):\n    return a + b\n"
BROKEN_ADD = "def add(a, b):\n    return a + b + (1 if a else 0)\n"


def gated(tmp_path: Path, files: dict[str, str], change: dict[str, str]) -> dict[str, object]:
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    commit(repo, change, "regression")
    result = gatekit.gate(tmp_path, repo, "--no-release-builds")
    assert result.code == 1, (result.stdout, result.stderr)
    document: dict[str, object] = result.document
    return document


def shown(tmp_path: Path, document: dict[str, object]) -> str:
    return run_ledger(tmp_path, "show", str(document["run_id"]), "--all").stdout


def prepared(tmp_path: Path, document: dict[str, object]) -> list[dict[str, object]]:
    return [
        e for e in events(tmp_path, str(document["run_id"]))
        if e["kind"] == "EnvironmentPrepared"
    ]  # fmt: skip


def test_a_hatch_unittest_script_with_its_tests_inside_the_package_runs_under_pytest(
    tmp_path: Path,
) -> None:
    hatch = (
        '[tool.hatch.envs.test]\ndependencies = ["six"]\n'
        "[tool.hatch.envs.test.scripts]\n"
        "test = \"python -m unittest discover -s calc -p '*tests.py'\"\n"
    )
    files = {
        "pyproject.toml": pyproject("calc", hatch),
        "calc/__init__.py": "",
        "calc/core.py": ADD,
        # six only from the hatch environment: the tests need what it declares
        "calc/core_tests.py": "import six  # noqa: F401\n" + unittest_module("calc.core", "Add"),
    }

    document = gated(tmp_path, files, {"calc/core.py": BROKEN_ADD})

    assert document["status"] == "failed"
    assert document["introduced"] == ["calc/core_tests.py::Add::test_add"]
    assert document["preexisting"] == [] and document["unmeasured"] == []
    assert {e["source"] for e in prepared(tmp_path, document)} == {"hatch"}
    text = shown(tmp_path, document)
    assert "hatch (hatch env test, script test): used" in text
    assert "runs `unittest -s calc -p *tests.py" in text
    assert "from hatch:test:test" in text


def test_a_nox_session_with_its_own_installs_is_the_environment_and_the_command(
    tmp_path: Path,
) -> None:
    noxfile = (
        "import nox\n\n\n"
        "@nox.session\n"
        "def lint(session):\n"
        "    session.install('ruff')\n"
        "    session.run('ruff', 'check', '.')\n\n\n"
        "@nox.session\n"
        "def tests(session):\n"
        "    session.install('.', 'pytest', 'six')\n"
        "    session.run('pytest', '-p', 'no:cacheprovider', *session.posargs or ['tests'])\n"
    )
    test_core = (
        "import six  # noqa: F401\n\nfrom shapes.core import add\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_zero():\n    assert add(0, 0) == 0\n"
    )
    files = {
        "pyproject.toml": pyproject("shapes"),
        "noxfile.py": noxfile,
        "shapes/__init__.py": "",
        "shapes/core.py": ADD,
        "tests/test_core.py": test_core,
    }

    document = gated(tmp_path, files, {"shapes/core.py": BROKEN_ADD})

    assert document["status"] == "failed"
    assert document["introduced"] == ["tests/test_core.py::test_add"]
    assert document["preexisting"] == [] and document["unmeasured"] == []
    assert {e["source"] for e in prepared(tmp_path, document)} == {"nox"}
    text = shown(tmp_path, document)
    assert "nox (nox session tests): used" in text
    assert "from nox:tests" in text


def test_a_unittest_suite_in_a_file_named_test_py_is_found_and_run_under_pytest(
    tmp_path: Path,
) -> None:
    files = {
        "pyproject.toml": pyproject("plain"),
        "plain/__init__.py": ADD,
        "test.py": unittest_module("plain", "PlainTests"),
    }

    document = gated(tmp_path, files, {"plain/__init__.py": BROKEN_ADD})

    assert document["status"] == "failed"
    assert document["introduced"] == ["test.py::PlainTests::test_add"]
    assert document["preexisting"] == [] and document["unmeasured"] == []
    discovered = next(
        e for e in events(tmp_path, str(document["run_id"])) if e["kind"] == "TestFilesDiscovered"
    )
    assert discovered["files"] == ["test.py"]
