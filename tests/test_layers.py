"""The one-way imports of DESIGN.md, and no import circle within a layer, are import-linter
contracts (pyproject.toml), checked by `lint-imports` in CI. These tests show the contracts
hold on this tree and break on a copy of it where one module imports across a layer the wrong
way (or back into a module that imports it), so a wrong import fails CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("domain", "projections", "adapters", "cli", "ledger")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _copy(tmp_path: Path) -> Path:
    package = tmp_path / "release_ledger"
    package.mkdir()
    shutil.copy(ROOT / "release_ledger" / "__init__.py", package)
    for layer in LAYERS:
        shutil.copytree(ROOT / layer, package / layer, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_tree_keeps_every_layer_contract(tmp_path: Path) -> None:
    done = _lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "wrong_import"),
    [
        ("domain/text.py", "from release_ledger.adapters import clock"),  # pure layer, I/O
        ("projections/status.py", "from release_ledger.ledger import service"),  # a climb up
        ("cli/render.py", "from release_ledger.domain import text"),  # cli past the ledger
    ],
)
def test_an_import_across_a_layer_breaks_a_contract(
    tmp_path: Path, module: str, wrong_import: str
) -> None:
    tree = _copy(tmp_path)
    path = tree / "release_ledger" / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{wrong_import}  # noqa\n")
    done = _lint(tree)
    assert done.returncode != 0, done.stdout[-3000:]
    assert "BROKEN" in done.stdout


def test_an_import_circle_breaks_a_contract_even_when_it_is_only_for_types(
    tmp_path: Path,
) -> None:
    """`domain/memory` read `RunState` under TYPE_CHECKING while `domain/run_state` imports
    the memory model: a circle a newcomer must follow both ways. Put back, it breaks CI."""
    tree = _copy(tmp_path)
    path = tree / "release_ledger" / "domain" / "memory.py"
    path.write_text(
        path.read_text(encoding="utf-8")
        + "\nfrom typing import TYPE_CHECKING  # noqa\n"
        + "if TYPE_CHECKING:\n    from release_ledger.domain.run_state import RunState  # noqa\n"
    )
    done = _lint(tree)
    assert done.returncode != 0, done.stdout[-3000:]
    assert "no import circle" in done.stdout and "BROKEN" in done.stdout
