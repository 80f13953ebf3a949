"""Issue 37, parts 4 and 5, on real gates: docs doctests that need a namespace an autouse
fixture of `tests/conftest.py` fills are judged in the project's own order; a declared source
that installs but whose conftest cannot import is a failed source, and the next one is used.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import gatekit
from tests.gatekit import events, run_ledger
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

GATE = ("--no-release-builds", "--no-attribution", "--timeout", "120")

# The project's own run collects tests/ first (testpaths), so its session fixture has filled
# the doctest namespace before docs/ run; a shard of docs alone has no `greet`.
ORDER_COUPLED = {
    "pytest.ini": (
        "[pytest]\ntestpaths = tests docs\naddopts = --doctest-glob=*.rst\npythonpath = .\n"
    ),
    "greeting.py": "def greet(name):\n    return 'hello ' + name\n",
    "tests/conftest.py": (
        "import pytest\n\nimport greeting\n\n\n"
        "@pytest.fixture(autouse=True, scope='session')\n"
        "def _namespace(doctest_namespace):\n"
        "    doctest_namespace['greet'] = greeting.greet\n"
    ),
    "tests/test_greeting.py": (
        "import greeting\n\n\ndef test_greets():\n    assert greeting.greet('x').endswith('x')\n"
    ),
    "docs/index.rst": "Greeting\n========\n\n>>> greet('x')\n'hello x'\n",
    "docs/known.rst": "Known\n=====\n\n>>> 1 + 1\n3\n",  # wrong at every revision
}


def _by_file(tests: list[str]) -> list[str]:
    return sorted(t.split("::", 1)[0] for t in tests)


def test_a_docs_doctest_regression_that_needs_the_conftest_namespace_is_introduced(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, ORDER_COUPLED)
    tag(repo, "v1")
    commit(repo, {"greeting.py": "def greet(name):\n    return 'hi ' + name\n"}, "regress")

    result = gatekit.gate(tmp_path, repo, "--shards", "3", *GATE)

    document = result.document
    assert result.code == 1, (result.stdout, result.stderr)
    assert _by_file(document["introduced"]) == ["docs/index.rst"]
    assert _by_file(document["preexisting"]) == ["docs/known.rst"]  # confirmed in order
    assert {t.split("::")[0]: how for t, how in document["in_order"].items()} == {
        "docs/index.rst": "introduced", "docs/known.rst": "preexisting",
    }  # fmt: skip
    run = events(tmp_path, document["run_id"])
    in_order = [e for e in run if e["kind"] == "InOrderRecorded"]
    assert sorted((e["revision"], tuple(e["files"])) for e in in_order) == [
        (revision, ("tests/test_greeting.py", "docs/index.rst", "docs/known.rst"))
        for revision in ("base", "head")
    ]
    shown = run_ledger(tmp_path, "show", document["run_id"], "--all").stdout
    assert "3 files in the project's order at head" in shown
    assert "docs/index.rst" in shown and "introduced in the project's own order" in shown


SOURCES = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "layered"\nversion = "1.0"\n'
        '[project.optional-dependencies]\ntest = ["pytest", "six"]\n'
        # the group forgot the plugin module its conftest imports
        '[dependency-groups]\ntest = ["pytest"]\n'
        '[tool.setuptools]\npackages = ["layered"]\n'
    ),
    "layered/__init__.py": "VALUE = 1\n",
    "tests/conftest.py": "import six  # noqa: F401\n",
    "tests/test_value.py": (
        "from layered import VALUE\n\n\ndef test_value():\n    assert VALUE == 1\n"
    ),
    "tests/test_other.py": "def test_other():\n    pass\n",
}


def test_a_source_whose_conftest_cannot_import_is_rejected_and_the_next_source_judges(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, SOURCES)
    tag(repo, "v1")
    commit(repo, {"layered/__init__.py": "VALUE = 2\n"}, "regress")

    result = gatekit.gate(tmp_path, repo, "--env", "auto", "--shards", "2", *GATE)

    document = result.document
    assert result.code == 1, (result.stdout, result.stderr)
    assert document["introduced"] == ["tests/test_value.py::test_value"]
    run = events(tmp_path, document["run_id"])
    rejected = [e for e in run if e["kind"] == "SourceRejected"]
    assert sorted((e["revision"], e["source"], e["reason"]) for e in rejected) == [
        ("base", "dependency-group", "usage-error"), ("head", "dependency-group", "usage-error"),
    ]  # fmt: skip
    assert all("six" in e["error"] and e["log_tail_hash"] for e in rejected), rejected
    assert not [e for e in run if e["kind"] == "ShardSplit"]  # a usage error is not bisected
    used = [e for e in run if e["kind"] == "EnvironmentPrepared" and e["source"] == "extras"]
    assert {e["revision"] for e in used} == {"base", "head"}
    assert [(t["source"], t["outcome"]) for t in used[0]["tried"]] == [
        ("dependency-group", "failed"), ("extras", "used"),
    ]  # fmt: skip
    assert "installed, but no test could run" in used[0]["tried"][0]["error"]
    # every shard ran once in the group (exit 4: no retry) and once in the extra
    first = [e for e in run if e["kind"] == "ShardAttemptRecorded" and e["exit_code"] == 4]
    assert len(first) == 4 and {e["attempt"] for e in first} == {1}


def test_a_source_in_which_every_test_module_misses_a_module_is_rejected_too(
    tmp_path: Path,
) -> None:
    """No conftest: each test module imports what the group forgot, so pytest collects
    nothing but errors (exit 1, a valid report): no test ran, the next source is used."""
    files = {
        **{k: v for k, v in SOURCES.items() if k != "tests/conftest.py"},
        "tests/test_value.py": (
            "import six  # noqa: F401\nfrom layered import VALUE\n\n\n"
            "def test_value():\n    assert VALUE == 1\n"
        ),
        "tests/test_other.py": "import six  # noqa: F401\n\n\ndef test_other():\n    pass\n",
    }
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    commit(repo, {"layered/__init__.py": "VALUE = 2\n"}, "regress")

    result = gatekit.gate(tmp_path, repo, "--env", "auto", "--shards", "2", *GATE)

    document = result.document
    assert result.code == 1, (result.stdout, result.stderr)
    assert document["introduced"] == ["tests/test_value.py::test_value"]
    assert document["preexisting"] == []
    run = events(tmp_path, document["run_id"])
    rejected = [e for e in run if e["kind"] == "SourceRejected"]
    assert sorted((e["revision"], e["reason"]) for e in rejected) == [
        ("base", "collection-errors"), ("head", "collection-errors"),
    ]  # fmt: skip


def test_base_results_reused_from_a_run_where_no_test_ran_in_its_source_are_run_again(
    tmp_path: Path,
) -> None:
    """The result cache holds a base file whose only result was a collection error in the
    first declared source (a shard with other files, whose tests ran, so nothing was rejected
    then). A later gate whose base files are only such files reuses them: the base's source
    must still be judged as for fresh shards — rejected, and its shards run in the next
    source — or the base is measured in a source that cannot run it, and a failure at both
    revisions reads as introduced."""
    files = {
        **{k: v for k, v in SOURCES.items() if k not in ("tests/conftest.py",)},
        "tests/test_known.py": "import six  # noqa: F401\n\n\ndef test_known():\n    assert 0\n",
    }
    del files["tests/test_value.py"]
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    commit(repo, {"README": "one\n"}, "docs")
    gatekit.gate(tmp_path, repo, "--env", "auto", "--shards", "1", *GATE)  # fills the cache
    commit(repo, {"tests/test_other.py": None}, "drop a test")
    fresh = gatekit.gate(tmp_path / "fresh", repo, "--env", "auto", *GATE)

    result = gatekit.gate(tmp_path, repo, "--env", "auto", *GATE)

    assert fresh.document["preexisting"] == ["tests/test_known.py::test_known"]
    assert fresh.code == 0, fresh.stdout
    document = result.document
    assert result.code == 0, result.stdout
    assert document["preexisting"] == ["tests/test_known.py::test_known"]
    assert document["introduced"] == []
    run = events(tmp_path, document["run_id"])
    assert [e["files"] for e in run if e["kind"] == "BaselineReused"] == [["tests/test_known.py"]]
    rejected = [e for e in run if e["kind"] == "SourceRejected"]
    assert sorted((e["revision"], e["source"], tuple(e["reused_dropped"])) for e in rejected) == [
        ("base", "dependency-group", ("tests/test_known.py",)),
        ("head", "dependency-group", ()),
    ]  # fmt: skip
    shown = run_ledger(tmp_path, "show", document["run_id"], "--all").stdout
    assert "(with the 1 base files the result cache gave)" in shown


def test_base_results_made_in_the_next_source_do_not_answer_for_the_first_one(
    tmp_path: Path,
) -> None:
    """A first gate rejects the group at base and runs base in the extra: those results share
    the commit, files, declarations and command with what the group would give, not the
    source. A later gate whose base starts again from the group does not take them for the
    group's: its base is judged in its own environment (rejected there, run in the extra),
    and the verdict is the first gate's."""
    repo = make_repo(tmp_path, SOURCES)
    tag(repo, "v1")
    commit(repo, {"layered/__init__.py": "VALUE = 2\n"}, "regress")
    first = gatekit.gate(tmp_path, repo, "--env", "auto", "--shards", "1", *GATE)
    assert first.code == 1, (first.stdout, first.stderr)
    commit(repo, {"README": "one\n"}, "docs")

    later = gatekit.gate(tmp_path, repo, "--env", "auto", "--shards", "1", *GATE)

    assert later.code == 1, (later.stdout, later.stderr)
    assert later.document["introduced"] == first.document["introduced"]
    run = events(tmp_path, later.document["run_id"])
    assert [e for e in run if e["kind"] == "BaselineReused"] == []
    rejected = [e for e in run if e["kind"] == "SourceRejected"]
    assert sorted((e["revision"], e["source"]) for e in rejected) == [
        ("base", "dependency-group"), ("head", "dependency-group"),
    ]  # fmt: skip
    # Base's measured attempts are keyed by the source that made them: the extra's, not the
    # group's (which the first gate's extra-made attempts are keyed by too).
    keys = {
        e["environment_key"] for r in (first, later)
        for e in events(tmp_path, r.document["run_id"])
        if e["kind"] == "ShardAttemptRecorded" and e["revision"] == "base" and e["exit_code"] != 4
    }  # fmt: skip
    grouped = {
        e["environment_key"] for e in run
        if e["kind"] == "ShardAttemptRecorded" and e["revision"] == "base" and e["exit_code"] == 4
    }  # fmt: skip
    assert len(keys) == 1 and len(grouped) == 1 and keys != grouped
