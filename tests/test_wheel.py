"""The wheel is the product (issue 39): built from this tree, it holds every module of the
source tree under the one import name `release_ledger`, and nothing of the tests or benches.

`pip install .` without `-e` once shipped a wheel without `adapters/executors` or the pytest
plugin; CI never saw it because it installed with `-e`. This test builds the real wheel (the
build backend in its own isolated environment, as a user's pip does) and compares.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("domain", "projections", "adapters", "cli", "ledger")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (built,) = out.glob("*.whl")
    return zipfile.ZipFile(built)


def _source_modules() -> set[str]:
    found = {"release_ledger/__init__.py", "release_ledger/__main__.py"}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            found.add(f"release_ledger/{path.relative_to(ROOT).as_posix()}")
    return found


def test_the_wheel_holds_every_module_of_the_source_tree(wheel: zipfile.ZipFile) -> None:
    shipped = {n for n in wheel.namelist() if n.endswith(".py")}
    assert _source_modules() - shipped == set()
    assert shipped - _source_modules() == set()  # no test, bench or example file


def test_the_wheel_installs_one_top_level_name(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"release_ledger"}
    (top_level,) = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    assert "ledger = release_ledger.cli.main:main" in wheel.read(top_level).decode()


def test_every_layer_folder_is_linked_into_the_import_package() -> None:
    for layer in LAYERS:
        link = ROOT / "release_ledger" / layer
        assert link.is_symlink() and link.resolve() == (ROOT / layer).resolve(), layer


def test_the_build_requirements_match_the_metadata() -> None:
    """An SPDX `license` string needs setuptools 77 (PEP 639): an older backend fails."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    requires = [Requirement(r) for r in project["build-system"]["requires"]]
    (setuptools,) = [r for r in requires if r.name == "setuptools"]
    if isinstance(project["project"].get("license"), str):
        assert not setuptools.specifier.contains(Version("76.9")), setuptools
        assert setuptools.specifier.contains(Version("77.0")), setuptools
