"""Introduced failures are grouped by cause: one broken import is one line, not forty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from release_ledger.domain.clusters import Cluster, cluster, headline, mask, merged, signature
from release_ledger.domain.rules import get_rule
from release_ledger.domain.run_state import fold
from release_ledger.projections.approval import approval_report
from release_ledger.projections.html_report import classification_html
from tests.gatekit import gate, run_ledger
from tests.gitrepo import commit, make_repo, tag
from tests.runbuilder import RunBuilder

# As pytest writes them: a collection error's short traceback, and a failure's long one.
COLLECTION = """ImportError while importing test module '/tmp/ledger-x/tests/test_a.py'.
Traceback:
/root/.pyenv/versions/3.11.7/lib/python3.11/importlib/__init__.py:126: in import_module
    return _bootstrap._gcd_import(name[level:], package, level)
tests/test_a.py:2: in <module>
    import pkg.native
src/pkg/native.py:1: in <module>
    from .missing import x
E   ModuleNotFoundError: No module named 'pkg.missing'"""

LONG = """def test_b():
>       helper(3)

tests/test_b.py:4:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

v = 3

    def helper(v):
>       raise ValueError(f"bad value {v} at 0x7f{v}")
E       ValueError: bad value 3 at 0x7f3

src/pkg/h.py:2: ValueError"""

INSTALLED = """tests/test_c.py:3: in test_c
    pkg.run()
/tmp/envs/abc/lib/python3.12/site-packages/pkg/core.py:40: in run
    raise KeyError(name)
E   KeyError: 'x'"""


def test_a_collection_error_is_named_by_its_exception_and_the_projects_innermost_frame() -> None:
    assert signature("collection failure", COLLECTION, "error") == (
        "ModuleNotFoundError in src/pkg/native.py:1"
    )


def test_a_long_traceback_is_named_where_it_raised_not_where_the_test_called() -> None:
    assert signature("ValueError: bad value 3 at 0x7f3", LONG) == "ValueError in src/pkg/h.py:2"


def test_an_installed_package_frame_is_named_below_site_packages() -> None:
    assert signature("KeyError: 'x'", INSTALLED) == "KeyError in pkg/core.py:40"


def test_without_a_traceback_the_message_is_masked() -> None:
    assert signature("Timeout: took 3.2 s at 0xdeadbeef in /tmp/run-81/x", None) == (
        "Timeout: took <n> s at <addr> in <tmp>"
    )
    assert signature("took 3.2 s", None) == signature("took 4.15 s", None)
    assert mask("port 8080 at 0x7ffe") == "port <n> at <addr>"
    assert signature(None, None, "error") == "error"


@given(
    st.dictionaries(
        st.from_regex(r"tests/t[0-9]\.py::test_[a-c]", fullmatch=True),
        st.sampled_from(["assert 1 == 2", "KeyError: 'a'", "took 2 s", "took 3 s"]),
    )
)
def test_every_test_lands_in_exactly_one_cluster_in_a_stable_order(
    messages: dict[str, str],
) -> None:
    failures = {t: (m, None, "failed") for t, m in messages.items()}
    clusters = cluster(failures, messages)
    members = [t for c in clusters for t in c.tests]
    assert sorted(members) == sorted(messages)
    assert len(set(members)) == len(members)
    sizes = [len(c.tests) for c in clusters]
    assert sizes == sorted(sizes, reverse=True)
    assert cluster(failures, reversed(list(messages))) == clusters
    assert merged(clusters + clusters) == clusters
    if clusters:
        assert headline(clusters).endswith(clusters[0].signature)


def _import_error_run() -> RunBuilder:
    """Five test files broken at head by one import error in the package; one unrelated
    assertion failure."""
    files = [f"tests/test_{n}.py" for n in range(5)] + ["tests/test_z.py"]
    head = {f"{f}::test_x": "error" for f in files[:5]} | {"tests/test_z.py::test_z": "failed"}
    details = {
        f"{f}::test_x": ("collection failure", COLLECTION.replace("test_a", Path(f).stem))
        for f in files[:5]
    } | {"tests/test_z.py::test_z": ("assert 1 == 2", "tests/test_z.py:3: AssertionError")}
    base = {t: "passed" for t in head}
    run = RunBuilder().discover(files).plan({"s1": files})
    run.attempt("s1", "head", files, head, details=details).attempt("s1", "base", files, base)
    for f in files:
        run.isolation(f, "head", {t: o for t, o in head.items() if t.startswith(f)})
    return run


def test_one_import_error_breaking_many_tests_is_one_cluster_in_the_verdict() -> None:
    run = _import_error_run()
    verdict = get_rule("default").decide(fold(list(enumerate(run.events, 1)), run.artifacts))
    assert verdict.status == "failed" and len(verdict.introduced) == 6
    assert [(c.signature, len(c.tests)) for c in verdict.clusters] == [
        ("ModuleNotFoundError in src/pkg/native.py:1", 5),
        ("AssertionError in tests/test_z.py:3", 1),
    ]
    document = verdict.as_dict()
    assert document["clusters"][0]["tests"] == [f"tests/test_{n}.py::test_x" for n in range(5)]
    assert headline(verdict.clusters) == (
        "2 causes, 6 tests: ModuleNotFoundError in src/pkg/native.py:1"
    )


def test_a_verdict_without_introduced_failures_has_no_clusters_key() -> None:
    run = RunBuilder().discover(["tests/t.py"]).plan({"s1": ["tests/t.py"]})
    run.attempt("s1", "head", ["tests/t.py"], {"tests/t.py::test_a": "passed"})
    run.attempt("s1", "base", ["tests/t.py"], {"tests/t.py::test_a": "passed"})
    verdict = get_rule("default").decide(fold(list(enumerate(run.events, 1)), run.artifacts))
    assert verdict.status == "passed" and "clusters" not in verdict.as_dict()


def test_the_approval_report_and_the_html_page_lead_with_the_causes() -> None:
    run = _import_error_run()
    positioned = list(enumerate(run.events, 1))
    report = approval_report(positioned, run.artifacts, get_rule("default").decide)
    gate_metric = report.metrics[0]
    assert gate_metric.value.startswith(
        "failed: 2 causes, 6 tests: ModuleNotFoundError in src/pkg/native.py:1;"
    )
    assert "## Failures by cause" in report.markdown
    assert "`ModuleNotFoundError in src/pkg/native.py:1` — 5 tests" in report.markdown
    old = approval_report(positioned, run.artifacts, get_rule("default").decide, report_format=4)
    assert "Failures by cause" not in old.markdown  # an issued format-4 report still derives
    verdict = get_rule("default").decide(fold(positioned, run.artifacts))
    page = classification_html(verdict)
    assert page.index("causes") < page.index("introduced")
    assert "<details><summary><code>ModuleNotFoundError in src/pkg/native.py:1</code>" in page


def test_clusters_of_a_matrix_are_merged_by_cause() -> None:
    a = (Cluster("E in x.py:1", ("t1", "t2")), Cluster("F in y.py:2", ("t3",)))
    b = (Cluster("F in y.py:2", ("t4", "t5")),)
    assert merged(a + b) == (Cluster("F in y.py:2", ("t3", "t4", "t5")), a[0])


PACKAGE = {
    "pyproject.toml": (
        '[project]\nname = "pkg"\nversion = "1.0"\n[build-system]\n'
        'requires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    ),
    "src/pkg/__init__.py": "",
    "src/pkg/native.py": "VALUE = 1\n",
}


@pytest.mark.slow
def test_a_real_gate_shows_one_cause_for_one_broken_import(tmp_path: Path) -> None:
    tests = {
        f"tests/test_{n}.py": f"from pkg.native import VALUE\n\ndef test_{n}():\n"
        f"    assert VALUE == 1\n"
        for n in range(4)
    }
    repo = make_repo(tmp_path, {**PACKAGE, **tests})
    tag(repo, "v1")
    commit(repo, {"src/pkg/native.py": "from .missing import VALUE\n"}, "break the import")
    result = gate(tmp_path, repo, "--env", "auto", "--timeout", "120", "--no-release-builds",
                  "--no-attribution")  # fmt: skip
    assert result.code == 1, result.stderr
    document = result.document
    assert [(c["signature"], len(c["tests"])) for c in document["clusters"]] == [
        ("ModuleNotFoundError in pkg/native.py:1", 4)
    ], json.dumps(document["clusters"])
    shown = run_ledger(tmp_path, "show", str(document["run_id"]))
    verdict_at = shown.stdout.index("verdict under rule")
    assert shown.stdout.index("1 cause, 4 tests: ModuleNotFoundError in pkg/native.py:1") > (
        verdict_at
    )
    assert shown.stdout.index("causes") < shown.stdout.index("  introduced ")
