"""Static test discovery follows pytest's collection rules without importing test code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from release_ledger.adapters.discovery import discover_test_files, read_pytest_config
from release_ledger.domain.errors import BadInput
from tests.gitrepo import write

PASS = "def test_ok():\n    pass\n"
KILLS_ITSELF = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    write(root, files)
    return root


def test_default_rules_find_test_star_and_star_test_files_anywhere(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "test_top.py": PASS,
            "pkg/core_test.py": PASS,
            "pkg/deep/er/test_x.py": PASS,
            "pkg/helpers.py": "",
            "pkg/conftest.py": "",
            "pkg/__init__.py": "",
            "pkg/tests.py": PASS,
            "notes/data.txt": "",
        },
    )
    assert discover_test_files(root) == ["pkg/core_test.py", "pkg/deep/er/test_x.py", "test_top.py"]


DOCTEST = 'def f():\n    """\n    >>> f()\n    1\n    """\n    return 1\n'


def test_doctest_modules_in_addopts_make_every_module_a_test_file(tmp_path: Path) -> None:
    """pytest's doctest plugin: with `--doctest-modules` every module under the start paths is
    collected for doctests (a package's doctests are tests its own run has); `test*.txt` (or
    `--doctest-glob`) text files always are. Modules without a doctest are candidates, measured
    empty later like any test file without a test."""
    files = {
        "pkg/__init__.py": DOCTEST,
        "pkg/core.py": DOCTEST,
        "pkg/plain.py": "",
        "pkg/__main__.py": DOCTEST,
        "pkg/conftest.py": DOCTEST,
        "setup.py": "from setuptools import setup\n",
        "tests/test_a.py": PASS,
        "tests/test_notes.txt": ">>> 1 + 1\n2\n",
        "docs/guide.rst": ">>> 1 + 1\n2\n",
    }
    root = tree(tmp_path, {**files, "pytest.ini": "[pytest]\naddopts = --doctest-modules\n"})
    assert discover_test_files(root) == [
        "pkg/__init__.py", "pkg/conftest.py", "pkg/core.py", "pkg/plain.py",
        "tests/test_a.py", "tests/test_notes.txt",
    ]  # fmt: skip
    (root / "pytest.ini").write_text(
        "[pytest]\naddopts = --doctest-modules --doctest-glob=*.rst\ntestpaths = docs tests\n"
    )
    assert discover_test_files(root) == ["docs/guide.rst", "tests/test_a.py"]
    (root / "pytest.ini").write_text("[pytest]\naddopts = --doctest-modules -p no:doctest\n")
    assert discover_test_files(root) == ["tests/test_a.py"]
    (root / "pytest.ini").write_text("[pytest]\n")
    assert discover_test_files(root) == ["tests/test_a.py", "tests/test_notes.txt"]


def test_default_norecursedirs_and_virtualenvs_and_pycache_are_skipped(tmp_path: Path) -> None:
    skipped = [
        ".hidden/test_a.py",
        "build/test_a.py",
        "dist/test_a.py",
        "node_modules/test_a.py",
        "venv/test_a.py",
        "thing.egg/test_a.py",
        "CVS/test_a.py",
        "_darcs/test_a.py",
        "{arch}/test_a.py",
        "myenv/lib/test_a.py",
        "__pycache__/test_a.py",
    ]
    root = tree(
        tmp_path,
        {"tests/test_kept.py": PASS, "myenv/pyvenv.cfg": ""} | dict.fromkeys(skipped, PASS),
    )
    assert discover_test_files(root) == ["tests/test_kept.py"]


def test_a_file_that_kills_its_process_at_import_is_still_discovered(tmp_path: Path) -> None:
    root = tree(tmp_path, {"tests/test_boom.py": KILLS_ITSELF, "tests/test_fine.py": PASS})
    assert discover_test_files(root) == ["tests/test_boom.py", "tests/test_fine.py"]


def test_pytest_ini_testpaths_python_files_and_norecursedirs(tmp_path: Path) -> None:
    ini = """
[pytest]
testpaths = suite other/*
python_files = check_*.py test_*.py
norecursedirs = fixtures
"""
    root = tree(
        tmp_path,
        {
            "pytest.ini": ini,
            "suite/check_a.py": PASS,
            "suite/test_b.py": PASS,
            "suite/a_test.py": PASS,  # not in python_files any more
            "suite/fixtures/test_c.py": PASS,
            "suite/.hidden/test_d.py": PASS,  # the default list is replaced: hidden is walked
            "other/one/test_e.py": PASS,
            "outside/test_f.py": PASS,  # not under testpaths
            "test_top.py": PASS,
        },
    )
    assert discover_test_files(root) == [
        "other/one/test_e.py",
        "suite/.hidden/test_d.py",
        "suite/check_a.py",
        "suite/test_b.py",
    ]


def test_pyproject_ini_options_lists(tmp_path: Path) -> None:
    pyproject = """
[tool.pytest.ini_options]
testpaths = ["tests"]
python_files = ["*_spec.py"]
"""
    root = tree(
        tmp_path,
        {"pyproject.toml": pyproject, "tests/a_spec.py": PASS, "tests/test_x.py": PASS},
    )
    assert discover_test_files(root) == ["tests/a_spec.py"]


def test_pytest_ini_wins_over_pyproject_and_tox_and_setup_cfg(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "pytest.ini": "[pytest]\ntestpaths = a\n",
            "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["b"]\n',
            "tox.ini": "[pytest]\ntestpaths = c\n",
            "a/test_a.py": PASS,
            "b/test_b.py": PASS,
            "c/test_c.py": PASS,
        },
    )
    assert read_pytest_config(root).source == "pytest.ini"
    assert discover_test_files(root) == ["a/test_a.py"]


def test_an_empty_pytest_ini_still_wins(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {"pytest.ini": "", "tox.ini": "[pytest]\ntestpaths = c\n", "c/test_c.py": PASS},
    )
    assert read_pytest_config(root).source == "pytest.ini"
    assert read_pytest_config(root).testpaths == ()


def test_a_pyproject_without_pytest_table_falls_through_to_tox_then_setup_cfg(
    tmp_path: Path,
) -> None:
    root = tree(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'x'\n",
            "setup.cfg": "[tool:pytest]\ntestpaths = s\n",
            "s/test_s.py": PASS,
            "t/test_t.py": PASS,
        },
    )
    assert discover_test_files(root) == ["s/test_s.py"]
    write(root, {"tox.ini": "[pytest]\ntestpaths = t\n"})
    assert discover_test_files(root) == ["t/test_t.py"]


def test_addopts_ignore_and_literal_conftest_collect_ignore(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "tox.ini": "[pytest]\naddopts = --ignore=tests/legacy --ignore-glob=*_slow.py\n",
            "tests/conftest.py": 'collect_ignore = ["test_skipme.py"]\n',
            "tests/test_kept.py": PASS,
            "tests/test_skipme.py": PASS,
            "tests/test_very_slow.py": PASS,
            "tests/legacy/test_old.py": PASS,
        },
    )
    assert discover_test_files(root) == ["tests/test_kept.py"]


def test_a_testpath_naming_a_file_collects_it_whatever_its_name(tmp_path: Path) -> None:
    root = tree(tmp_path, {"pytest.ini": "[pytest]\ntestpaths = checks.py\n", "checks.py": PASS})
    assert discover_test_files(root) == ["checks.py"]


def test_testpaths_that_match_nothing_fall_back_to_the_root(tmp_path: Path) -> None:
    root = tree(tmp_path, {"pytest.ini": "[pytest]\ntestpaths = nowhere\n", "x/test_x.py": PASS})
    assert discover_test_files(root) == ["x/test_x.py"]


def test_explicit_glob_patterns_replace_pytest_rules(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "src/a.test.js": "",
            "src/deep/b.test.js": "",
            "c.test.js": "",
            "node_modules/lib/d.test.js": "",
            "test_py.py": PASS,
            "go/x_test.go": "",
        },
    )
    assert discover_test_files(root, ["**/*.test.js"]) == [
        "c.test.js",
        "src/a.test.js",
        "src/deep/b.test.js",
    ]
    assert discover_test_files(root, ["src/*.test.js"]) == ["src/a.test.js"]
    assert discover_test_files(root, ["*_test.go", "c.*.js"]) == ["c.test.js", "go/x_test.go"]


def test_a_malformed_config_is_bad_input(tmp_path: Path) -> None:
    root = tree(tmp_path, {"pyproject.toml": "[tool.pytest.ini_options\n"})
    with pytest.raises(BadInput, match=r"pyproject\.toml"):
        discover_test_files(root)


LAYOUTS: dict[str, dict[str, str]] = {
    "setup.cfg": {
        "setup.cfg": "[tool:pytest]\ntestpaths = tests more\nnorecursedirs = data .*\n",
        "tests/test_a.py": PASS,
        "tests/sub/b_test.py": PASS,
        "tests/data/test_no.py": PASS,
        "tests/.cache/test_no.py": PASS,
        "tests/node_modules/test_yes.py": PASS,  # default list replaced
        "tests/conftest.py": 'collect_ignore_glob = ["*_ignored.py"]\n',
        "tests/test_x_ignored.py": PASS,
        "more/test_m.py": PASS,
        "elsewhere/test_e.py": PASS,
    },
    "pyproject native toml": {
        "pyproject.toml": '[tool.pytest]\ntestpaths = ["t*"]\npython_files = ["check_*.py"]\n',
        "tests/check_a.py": PASS,
        "tests/test_b.py": PASS,
        "tools/check_c.py": PASS,
        "src/check_d.py": PASS,
    },
    "pytest.toml with path pattern": {
        "pytest.toml": '[pytest]\npython_files = ["unit/*.py", "test_*.py"]\n',
        "pkg/unit/anything.py": PASS,
        "pkg/unit/conftest.py": "",
        "pkg/other.py": PASS,
        "pkg/test_z.py": PASS,
        "build/test_no.py": PASS,
        "env/pyvenv.cfg": "",
        "env/test_no.py": PASS,
    },
    "doctest modules": {
        "pyproject.toml": '[tool.pytest.ini_options]\naddopts = ["--doctest-modules"]\n',
        "pkg/__init__.py": DOCTEST,
        "pkg/core.py": DOCTEST,
        "pkg/sub/deep.py": DOCTEST,
        "pkg/tests/test_core.py": PASS,
        "pkg/__main__.py": DOCTEST,
        "docs/test_guide.txt": ">>> 1 + 1\n2\n",
        "build/no.py": DOCTEST,
    },
    "no config": {
        "test_root.py": PASS,
        "a/b/c/d_test.py": PASS,
        "a/conftest.py": 'collect_ignore = ["skip"]\n',
        "a/skip/test_no.py": PASS,
        "venv/test_no.py": PASS,
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_static_discovery_agrees_with_pytest_collect_only(tmp_path: Path, layout: str) -> None:
    root = tree(tmp_path, LAYOUTS[layout])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    collected = sorted({line.split("::")[0] for line in done.stdout.splitlines() if "::" in line})
    assert collected, done.stdout
    assert collected == discover_test_files(root)
