"""A project with its own `cli`, `domain`, `ledger`, `adapters` and `projections` packages is
gated correctly under every `--env` mode (issue 27, part 7).

release-ledger installs those five generic top-level names. The gate never lets them reach a
suite: with `--env auto` and a setup command, the suite runs in the revision's own virtual
environment, which holds none of them; with `--env none` it runs with the gate's interpreter,
where the command `{python} -m pytest` puts the checkout first on `sys.path`, and the gate's
pytest plugin (inside the suite's process) imports nothing of ours but itself. Each mode must
see head's regression in the project's own `domain` package and nothing of the gate's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import gatekit
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

GENERIC = ("cli", "domain", "ledger", "adapters", "projections")
PYPROJECT = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    '[project]\nname = "generic-names"\nversion = "1.0"\n'
    '[project.optional-dependencies]\ntest = ["pytest"]\n'
    f"[tool.setuptools]\npackages = {list(GENERIC)!r}\n".replace("'", '"')
)
TESTS = """\
import importlib
from pathlib import Path

import pytest


@pytest.mark.parametrize("name", {names!r})
def test_each_generic_name_is_the_projects_own(name):
    module = importlib.import_module(name)
    assert module.OWNER == "the project", module.__file__


def test_domain_value():
    import domain

    assert domain.VALUE == 1
"""


def _files(value: int) -> dict[str, str | bytes | None]:
    files: dict[str, str | bytes | None] = {
        f"{name}/__init__.py": 'OWNER = "the project"\n' for name in GENERIC
    }
    files["domain/__init__.py"] = f'OWNER = "the project"\nVALUE = {value}\n'
    files["pyproject.toml"] = PYPROJECT
    files["tests/test_names.py"] = TESTS.format(names=GENERIC)
    return files


@pytest.mark.parametrize("mode", ["auto", "none", "command"])
def test_a_project_with_the_gates_package_names_is_gated_as_its_own(
    tmp_path: Path, mode: str
) -> None:
    repo = make_repo(tmp_path, _files(1))
    tag(repo, "v1")
    commit(repo, {"domain/__init__.py": 'OWNER = "the project"\nVALUE = 2\n'})
    env = {
        "auto": "auto",
        "none": "none",
        "command": f"{sys.executable} -m uv pip install --python {{python}} pytest",
    }[mode]

    result = gatekit.gate(tmp_path, repo, "--env", env, "--no-release-builds")

    assert result.code == 1, (result.stderr, result.document.get("unmeasured"))
    document = result.document
    assert document["introduced"] == ["tests/test_names.py::test_domain_value"]
    assert document["tests"]["head"] == len(GENERIC) + 1 and document["unmeasured"] == []
