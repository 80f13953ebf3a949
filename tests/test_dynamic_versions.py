"""The release as its build declares it: a project whose tree names no version (setuptools_scm
from git tags, flit's `__version__`) is approved as what its built wheel states, never as
`version unknown`. Real git repositories with tags, real gates, real builds with uv."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.gatekit import events, gate, run_ledger
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

TEST = "def test_it_imports():\n    import {package}\n"


def approved(tmp_path: Path, repo: Path, base: str) -> dict[str, object]:
    result = gate(tmp_path, repo, base=base)
    assert result.code == 0, (result.stdout, result.stderr)
    run_id = result.document["run_id"]
    report = run_ledger(tmp_path, "approve", run_id, "--json")
    assert report.code in (0, 1, 3), report.stdout
    assert run_ledger(tmp_path, "audit", run_id).code == 0
    document: dict[str, object] = report.document
    document["events"] = events(tmp_path, run_id)
    return document


def metrics(document: dict[str, object]) -> dict[str, dict[str, str]]:
    return {m["name"]: m for m in document["metrics"]}  # type: ignore[attr-defined]


def head_wheel_version(document: dict[str, object]) -> str:
    built = [e for e in document["events"]  # type: ignore[attr-defined]
             if e["kind"] == "DistributionsBuilt" and e["revision"] == "head"]  # fmt: skip
    (wheel,) = [f for f in built[-1]["files"] if f["type"] == "wheel"]
    return str(wheel["version"])


def test_a_setuptools_scm_release_is_the_version_its_wheel_states(tmp_path: Path) -> None:
    files = {
        "pyproject.toml": (
            '[build-system]\nrequires = ["setuptools>=64", "setuptools-scm>=8"]\n'
            'build-backend = "setuptools.build_meta"\n'
            '[project]\nname = "scmdemo"\ndynamic = ["version"]\nreadme = "README.md"\n'
            '[project.optional-dependencies]\ntest = ["pytest"]\n[tool.setuptools_scm]\n'
        ),
        "README.md": "# scmdemo\n\nA demo.\n",
        "scmdemo/__init__.py": "",
        "CHANGES.md": "# Changes\n\n## 1.0\n\n- first\n",
        "tests/test_scm.py": TEST.format(package="scmdemo"),
    }
    repo = make_repo(tmp_path, files)
    tag(repo, "v1.0")
    # The candidate is not tagged yet: setuptools_scm derives its version from v1.0.
    head = commit(repo, {"CHANGES.md": "# Changes\n\n## 1.1\n\n- second\n\n## 1.0\n"}, "1.1")

    document = approved(tmp_path, repo, "v1.0")

    version = head_wheel_version(document)
    assert re.fullmatch(r"1\.1\.dev1\+g[0-9a-f]+", version), version
    assert document["title"] == f"v{version} approval"
    assert "version unknown" not in str(document["markdown"])
    by_name = metrics(document)
    assert by_name["distributions"]["verdict"] == "pass", by_name["distributions"]
    assert by_name["distributions"]["value"].startswith(f"scmdemo {version}: ")
    # Measured now: the changelog names 1.1, not the dev version the build makes.
    assert (by_name["changelog"]["value"], by_name["changelog"]["verdict"]) == (
        f"CHANGES.md do not name {version}", "fail"
    )
    assert "(its metadata Version, setuptools_scm)" in str(document["markdown"])
    assert by_name["upgrade"]["value"].startswith(f"scmdemo 1.0 -> {version}")
    assert head.startswith(version.split("+g")[1])


def test_a_flit_release_is_the_version_of_its_modules_dunder_version(tmp_path: Path) -> None:
    def files(version: str, changes: str) -> dict[str, str | bytes | None]:
        return {
            "pyproject.toml": (
                '[build-system]\nrequires = ["flit_core>=3.4,<4"]\n'
                'build-backend = "flit_core.buildapi"\n'
                '[project]\nname = "flitdemo"\ndynamic = ["version", "description"]\n'
                'requires-python = ">=3.8"\n'
                'readme = "README.md"\n[project.optional-dependencies]\ntest = ["pytest"]\n'
            ),
            "README.md": "# flitdemo\n\nA demo.\n",
            "flitdemo.py": f'"""A demo."""\n\n__version__ = "{version}"\n',
            "CHANGES.md": changes,
            "tests/test_flit.py": TEST.format(package="flitdemo"),
        }

    repo = make_repo(tmp_path, files("1.0", "# Changes\n\n## 1.0\n"))
    tag(repo, "v1.0")
    commit(repo, files("2.0", "# Changes\n\n## 2.0\n\n- new\n\n## 1.0\n"), "2.0")

    document = approved(tmp_path, repo, "v1.0")

    assert head_wheel_version(document) == "2.0"
    assert (document["title"], document["outcome"]) == ("v2.0 approval", "ok"), document["summary"]
    by_name = metrics(document)
    assert by_name["changelog"]["value"] == "CHANGES.md names 2.0"
    assert by_name["distributions"]["verdict"] == "pass"
    assert by_name["upgrade"]["value"] == "flitdemo 1.0 -> 2.0; imports flitdemo"
    assert "python -m pip install 'flitdemo==1.0'" in str(document["markdown"])
