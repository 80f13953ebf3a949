"""The harness is evidence (issue 38, part 5). A head whose conftest rewrites a real regression
into a pass cannot be stopped by any gate (the suite decides its own outcomes), but the owner
is told: the verdict carries `harness-changed`, listing the conftest and the pytest settings
that differ, in `--json`, `ledger show`, the approval report and the HTML page, and `strict`
fails on it. A change elsewhere in pyproject.toml is not the harness. Before: `passed`, and
nothing said."""

from __future__ import annotations

from pathlib import Path

import pytest

from release_ledger.domain.harness import config_change
from tests.gatekit import gate, run_ledger
from tests.gitrepo import commit, make_repo, tag

PYPROJECT = """[project]
name = "demo"
version = "{version}"

[tool.pytest.ini_options]
addopts = "{addopts}"
"""

WHITEWASH = """
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
"""


@pytest.mark.slow
def test_a_conftest_that_whitewashes_a_regression_is_named_and_fails_strict(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {
        "tests/test_a.py": "def test_a():\n    assert 1 + 1 == 2\n",
        "pyproject.toml": PYPROJECT.format(version="1.0", addopts="-q"),
        "tests/conftest.py": "# shared fixtures\n",
    })  # fmt: skip
    tag(repo, "v1")
    commit(repo, {
        "tests/test_a.py": "def test_a():\n    assert 1 + 1 == 3\n",  # the regression
        "conftest.py": WHITEWASH,
        "pyproject.toml": PYPROJECT.format(version="1.1", addopts="-q -p no:randomly"),
    }, "head: a regression, whitewashed")  # fmt: skip
    result = gate(tmp_path, repo, "--env", "none", "--no-release-builds")
    document = result.document
    assert document["status"] == "passed"  # the suite decides its own outcomes...
    run = str(document["run_id"])
    assert document["harness_changed"] == [  # ...but the owner is told the harness changed
        "conftest.py added at head",
        "pyproject.toml [tool.pytest] modified at head",
    ]
    strict = run_ledger(tmp_path, "verdict", run, "--rule", "strict", "--json")
    assert strict.code == 1, strict.stdout
    assert any("harness-changed" in r for r in strict.document["reasons"])
    shown = run_ledger(tmp_path, "show", run).stdout
    assert "harness      conftest.py added at head" in shown
    approval = run_ledger(tmp_path, "approve", run)
    assert "harness changed: conftest.py added at head" in approval.stdout
    page = tmp_path / "gate.html"
    assert run_ledger(tmp_path, "report", run, "--html", str(page)).code == 0
    assert "harness changed" in page.read_text() and "conftest.py added at head" in page.read_text()


def test_only_pytests_own_settings_are_the_harness() -> None:
    base = PYPROJECT.format(version="1.0", addopts="-q").encode()
    assert config_change("pyproject.toml", base, PYPROJECT.format(version="2", addopts="-q")
                         .encode()) is None  # fmt: skip
    assert config_change("pyproject.toml", base, b"[project]\nname = 'demo'\n") == "removed"
    tox = b"[tox]\nenv_list = py\n"
    assert config_change("sub/tox.ini", tox, tox + b"[pytest]\naddopts = -p x\n") == "added"
    assert config_change("setup.cfg", b"[tool:pytest]\naddopts = -q\n",
                         b"[tool:pytest]\naddopts = -q -x\n") == "modified"  # fmt: skip
    assert config_change("pytest.ini", b"[pytest]\n", b"[pytest]\n") is None
