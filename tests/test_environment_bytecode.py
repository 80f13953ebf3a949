"""Bytecode written once into the environments the gate builds (`adapters/executors/
bytecode.py`): the build's step run on an installed distribution made by hand (what it
compiles, what it imports, that an import that hangs cannot hold the build), and what a
collection imported, compiled only where the environment is."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from release_ledger.adapters.executors.bytecode import (
    COMPILE_PROJECT,
    UNCOMPILED_MARK,
    compile_collected,
    project_name,
    uncompiled,
)
from release_ledger.adapters.executors.invocation_run import COLLECT_PROGRAM


def installed(site: Path, name: str, files: dict[str, str]) -> None:
    """A distribution `name` as an installer leaves it in `site`: its files and a RECORD."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files))


def compile_step(site: Path, name: str, limit_s: int = 30) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", COMPILE_PROJECT, name, str(limit_s)],
        env=env, cwd=site, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def compiled(path: Path) -> bool:
    return Path(importlib.util.cache_from_source(str(path))).is_file()


def test_the_project_is_compiled_and_what_its_packages_import_too(tmp_path: Path) -> None:
    site = tmp_path / "site"
    marker = tmp_path / "setup-ran"
    installed(site, "demo", {
        "demo/__init__.py": "import dep\n",
        "demo/deep.py": "DEEP = 1\n",
        "lone.py": "LONE = 1\n",
        "setup.py": f"open({str(marker)!r}, 'w').write('ran')\n",
    })  # fmt: skip
    (site / "dep.py").write_text("DEP = 1\n")  # a dependency: another distribution's module
    (site / "unused.py").write_text("UNUSED = 1\n")

    done = compile_step(site, "demo")

    assert done.returncode == 0, done.stderr
    for rel in ("demo/__init__.py", "demo/deep.py", "lone.py", "dep.py"):
        assert compiled(site / rel), rel
    assert not compiled(site / "unused.py")  # nothing the project does not import
    assert not marker.exists()  # a top-level setup.py is compiled, never run


def test_an_import_that_hangs_is_ended_and_the_project_stays_compiled(tmp_path: Path) -> None:
    site = tmp_path / "site"
    installed(site, "stuck", {"stuck/__init__.py": "import time\ntime.sleep(600)\n"})
    started = time.monotonic()

    done = compile_step(site, "stuck", limit_s=1)

    assert time.monotonic() - started < 60
    assert done.returncode == -signal.SIGALRM
    assert compiled(site / "stuck/__init__.py")


def test_a_distribution_that_is_not_installed_compiles_nothing(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    assert compile_step(tmp_path / "site", "absent").returncode == 0


def test_the_project_is_named_by_its_wheel() -> None:
    assert project_name("/cache/wheel/my_project-1.0-py3-none-any.whl") == "my_project"


def test_what_a_collection_imported_is_compiled_only_inside_the_environment(
    tmp_path: Path,
) -> None:
    venv, elsewhere = tmp_path / "envs" / "venv", tmp_path / "checkout"
    for folder in (venv / "site", elsewhere):
        folder.mkdir(parents=True)
    inside, outside = venv / "site" / "dep.py", elsewhere / "mine.py"
    for source in (inside, outside):
        source.write_text("X = 1\n")
    (venv / "link.py").symlink_to(outside)  # a link out of the environment stays out
    output = "".join(
        f"{UNCOMPILED_MARK}\t{path}\n"
        for path in (inside, outside, venv / "link.py", venv / "site" / "gone.py")
    )
    output += f"release-ledger-item\t{outside}\ttest_x\n"

    assert uncompiled(output) == [str(inside), str(outside), str(venv / "link.py"),
                                  str(venv / "site" / "gone.py")]  # fmt: skip
    assert compile_collected(sys.executable, str(venv), output) == 1
    assert compiled(inside)
    assert not compiled(outside)


def test_the_collect_program_names_what_it_imported_without_bytecode(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "helper_dep.py").write_text("VALUE = 1\n")
    (tmp_path / "test_uses.py").write_text("import helper_dep\n\ndef test_x():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}

    done = subprocess.run(
        [sys.executable, "-c", COLLECT_PROGRAM, "test_uses.py"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert str(site / "helper_dep.py") in uncompiled(done.stdout)
