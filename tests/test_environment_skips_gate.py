"""A real gate on a small project whose tests skip for modules its test environment lacks, at
both revisions: the verdict, `ledger show`, `ledger verdict` and the approval report count
them per module and name the setting that would bring them in; the verdict stays passed.

Real git repositories, real environments (uv, the project's wheel installed with its `test`
extra), real pytest runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import gatekit
from tests.gatekit import events, run_ledger
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

# `fancy` would bring the first module in; nothing the project declares brings the second.
PYPROJECT = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    '[project]\nname = "skippy"\nversion = "1.0"\n'
    "[project.optional-dependencies]\n"
    'test = ["pytest"]\n'
    'fancy = ["release-ledger-absent-dist>=1.0; python_version >= \'3\'"]\n'
)
MODULE = "release_ledger_absent_dist"
OTHER = "release_ledger_other_absent"


def files(value: int) -> dict[str, str | bytes | None]:
    return {
        "pyproject.toml": PYPROJECT,
        "skippy/__init__.py": f"VALUE = {value}\n",
        # the whole module skips itself at import: one case
        "tests/test_fancy.py": (
            f"import pytest\n\nfancy = pytest.importorskip({MODULE!r})\n\n"
            "def test_fancy_one():\n    pass\n\ndef test_fancy_two():\n    pass\n"
        ),
        # each test skips itself: one case each
        "tests/test_mixed.py": (
            "import pytest\n\nimport skippy\n\n"
            f"def test_other_a():\n    pytest.importorskip({OTHER!r})\n\n"
            f"def test_other_b():\n    pytest.importorskip({OTHER!r})\n\n"
            "def test_windows_only():\n    pytest.skip('only on Windows')\n\n"
            "def test_value():\n    assert skippy.VALUE > 0\n"
        ),
    }


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    workdir = tmp_path_factory.mktemp("envskips")
    repo = make_repo(workdir, files(1))
    tag(repo, "v1")
    commit(repo, files(2), "value 2")
    result = gatekit.gate(workdir, repo, "--no-release-builds")
    assert result.code == 0, (result.stdout, result.stderr)
    return workdir, result.document


def test_the_gate_counts_skips_for_missing_modules_and_still_passes(
    gated: tuple[Path, dict[str, object]],
) -> None:
    _, document = gated

    assert document["status"] == "passed"
    told = {s["module"]: s for s in document["environment_skips"]}  # type: ignore[attr-defined]
    assert sorted(told) == sorted([MODULE, OTHER])
    assert (told[MODULE]["count"], told[MODULE]["whole_files"]) == (1, 1)  # skipped at import
    assert told[MODULE]["extras"] == ["fancy"]
    assert told[MODULE]["setting"] == (
        '[tool.release-ledger] extras = ["fancy"] would bring them in'
    )
    assert told[OTHER]["tests"] == [
        "tests/test_mixed.py::test_other_a",
        "tests/test_mixed.py::test_other_b",
    ]
    assert told[OTHER]["extras"] == [] and told[OTHER]["distribution"] is None
    assert told[OTHER]["setting"].startswith(
        "add release-ledger-other-absent to its extra [test], or [tool.release-ledger] env = "
    )


def test_the_project_metadata_the_suggestion_reads_is_recorded_with_each_environment(
    gated: tuple[Path, dict[str, object]],
) -> None:
    workdir, document = gated

    prepared = [e for e in events(workdir, str(document["run_id"]))
                if e["kind"] == "EnvironmentPrepared"]  # fmt: skip

    assert sorted(e["revision"] for e in prepared) == ["base", "head"]
    for event in prepared:
        assert sorted(event["provides_extra"]) == ["fancy", "test"]
        assert any(line.startswith("release-ledger-absent-dist") and 'extra == "fancy"' in line
                   for line in event["requires_dist"])  # fmt: skip


def test_show_verdict_and_the_approval_report_tell_them(
    gated: tuple[Path, dict[str, object]],
) -> None:
    workdir, document = gated
    run_id = str(document["run_id"])

    shown = run_ledger(workdir, "show", run_id)
    verdict = run_ledger(workdir, "verdict", run_id)
    approval = run_ledger(workdir, "approve", run_id)

    assert shown.code == 0 and verdict.code == 0, (shown.stderr, verdict.stderr)
    expected = (
        f"  missing      {MODULE} missing: 1 file skipped whole at import, at head and base — "
        '[tool.release-ledger] extras = ["fancy"] would bring them in'
    )
    assert expected in shown.stdout.splitlines()
    assert "3 tests skipped at head and base for a missing module" in shown.stdout
    assert "missing module" in verdict.stdout and MODULE in verdict.stdout
    assert f"told, not judged: {MODULE} missing: 1 file skipped whole" in approval.stdout
    assert run_ledger(workdir, "audit", run_id).code == 0
