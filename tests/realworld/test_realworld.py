"""The gate on consecutive releases of real projects, built from their public sdists.

Each project is a two-commit repository (base release, then head release). The gate's verdict
must be the one the project's own pytest gives: `passed` with nothing introduced on the
unchanged release, and `failed` with exactly the tests plain pytest reports failing under a
one-line bug injected at head. Each revision's tests run in the environment the gate builds
from that revision's own declarations (`--env auto`), unless a test says otherwise; plain
pytest, the ground truth of a mutation, runs in the project's own environment where it needs
one (`project_python`). Sdists are cached outside the repository (see
`tests/realworld/sdists.py`).

Which run where: toolz, more-itertools and typeguard run in CI; validators, parso and
markdown-it-py only with `LEDGER_TEST_REALWORLD_ALL=1` (a few minutes each on a loaded 2-core
machine), networkx only with `LEDGER_TEST_REALWORLD_LARGE=1` (about 13 minutes).
`python bench/realworld.py` prints every project's figures against plain pytest.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from release_ledger.adapters.executors.env_installer import find_uv
from tests.gatekit import gate
from tests.realworld.sdists import mutate, plain_pytest_failures, project_python, release_pair

pytestmark = [pytest.mark.slow, pytest.mark.realworld]

opt_in = pytest.mark.skipif(
    not (
        os.environ.get("LEDGER_TEST_REALWORLD_ALL") or os.environ.get("LEDGER_TEST_REALWORLD_LARGE")
    ),
    reason="kept out of CI for time; set LEDGER_TEST_REALWORLD_ALL=1 to run it",
)

# A subtest id (`PARENT [msg] (k=v)`, `PARENT (k=v) #2`) -> its parent's node id.
_SUBTEST = re.compile(r"(?: \[[^\]]*\])?(?: \([^()]*\))?(?: #\d+)?$")


def parents(ids: list[str]) -> set[str]:
    return {_SUBTEST.sub("", test) if " " in test.rsplit("::", 1)[-1] else test for test in ids}


def test_toolz_0_12_1_to_1_0_0_passes(tmp_path: Path) -> None:
    """toolz: tests inside the package (`toolz/tests/`), doctests collected as tests.

    Ground truth, by hand at head (toolz 1.0.0, pytest 9.2.0, Python 3.11):
    `python -m pytest toolz/tests` -> 180 passed (same at 0.12.1).
    """
    repo = release_pair(tmp_path, "toolz", "0.12.1", "1.0.0")
    result = gate(tmp_path, repo, "--shards", "2", base="v0.12.1")
    document = result.document
    assert document["status"] == "passed", (document["reasons"], document["unmeasured"])
    assert document["introduced"] == [] and document["skipped_at_head"] == []
    assert document["tests"]["head"] == 180
    assert result.code == 0


def test_toolz_with_a_bug_at_head_fails_with_exactly_pytests_failures(tmp_path: Path) -> None:
    """Mutation: `second()` returns the first element. Plain pytest at the mutated head is
    the ground truth for which tests fail (computed here, from pytest's own JUnit report)."""
    repo = release_pair(tmp_path, "toolz", "0.12.1", "1.0.0")
    mutate(
        repo, "toolz/itertoolz.py", "    next(seq)\n    return next(seq)", "    return next(seq)"
    )
    expected = plain_pytest_failures(repo, "toolz/tests")
    assert expected, "the mutation must break at least one test"
    result = gate(tmp_path, repo, "--shards", "2", base="v0.12.1")
    document = result.document
    assert document["status"] == "failed" and result.code == 1
    assert set(document["introduced"]) == expected


def test_toolz_with_a_broken_import_at_head_reads_as_one_cause(tmp_path: Path) -> None:
    """Mutation: a module every test file imports (through `toolz`) imports a name that does
    not exist. Every test file fails to collect; the verdict names one cause, the import,
    whatever file each collection error came from (failures grouped by cause, issue 29)."""
    repo = release_pair(tmp_path, "toolz", "0.12.1", "1.0.0")
    mutate(repo, "toolz/dicttoolz.py", "import operator\n",
           "import operator\nfrom toolz.missing_module import nothing  # noqa\n")  # fmt: skip
    # Every file's tests run as the gate runs them, not stopped at the first collection error.
    expected = plain_pytest_failures(repo, "toolz/tests", "--continue-on-collection-errors")
    assert len(expected) > 5, expected
    result = gate(tmp_path, repo, "--shards", "2", base="v0.12.1")
    document = result.document
    assert document["status"] == "failed"
    # Plain pytest names a collection error by the module, the gate's report by its file:
    # the same files fail.
    assert {t.split("::")[0] for t in document["introduced"]} == {
        t.split("::")[0] for t in expected
    }
    assert [(c["signature"], len(c["tests"])) for c in document["clusters"]] == [
        ("ModuleNotFoundError in toolz/dicttoolz.py:2", len(document["introduced"]))
    ], document["clusters"]


def _stuck_in(repo: Path, test_file: str, seconds: float = 20.0) -> str | None:
    """The test plain pytest is still running after `seconds` (None: the file finished)."""
    import subprocess
    import sys

    try:
        subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", test_file],
                       cwd=repo, capture_output=True, text=True, timeout=seconds)  # fmt: skip
    except subprocess.TimeoutExpired as stopped:
        out = stopped.stdout.decode() if isinstance(stopped.stdout, bytes) else stopped.stdout
        last = [line for line in (out or "").splitlines() if "::" in line][-1]
        return last.split()[0]
    return None


def test_toolz_with_a_hang_at_head_names_the_tests_plain_pytest_is_stuck_in(
    tmp_path: Path,
) -> None:
    """Mutation: `second()` never returns. Plain pytest, file by file with a 20 s bound, is
    stuck in exactly the tests the gate names as hung at head (issue 28), and the gate says so
    in about a minute, not `--timeout` (1200 s) per round."""
    repo = release_pair(tmp_path, "toolz", "0.12.1", "1.0.0")
    mutate(repo, "toolz/itertoolz.py", "    seq = iter(seq)\n    next(seq)\n    return next(seq)",
           "    while True:\n        pass")  # fmt: skip
    result = gate(tmp_path, repo, "--shards", "2", base="v0.12.1")
    document = result.document
    assert document["status"] == "failed" and result.code == 1
    hung = {h["test"] for h in document["hung"]}
    files = sorted({test.split("::")[0] for test in hung})
    assert {_stuck_in(repo, file) for file in files} == hung
    assert hung <= set(document["introduced"])


def test_more_itertools_10_7_0_to_10_8_0_passes(tmp_path: Path) -> None:
    """more-itertools: unittest-style suite using `self.subTest` (pytest 9 counts every passing
    subtest in plain JUnit's `tests` attribute while writing no case for it: the plain report
    is rejected as count-mismatch); flat layout, `tests/` beside the package.

    Ground truth, by hand at head (more-itertools 10.8.0, pytest 9.2.0, Python 3.11):
    `python -m pytest tests` -> 695 passed, 1 skipped, 19866 subtests passed
    (at 10.7.0: 670 passed, 1 skipped, 12037 subtests passed).
    """
    repo = release_pair(tmp_path, "more-itertools", "10.7.0", "10.8.0")
    result = gate(tmp_path, repo, "--shards", "2", base="v10.7.0")
    document = result.document
    assert document["status"] == "passed", (document["reasons"], document["unmeasured"])
    assert document["introduced"] == [] and document["skipped_at_head"] == []
    assert document["tests"]["head"] == 695 + 1 + 19866
    assert result.code == 0


@pytest.mark.skipif(
    not os.environ.get("LEDGER_TEST_REALWORLD_LARGE"),
    reason="networkx takes ~13 min of gate here; set LEDGER_TEST_REALWORLD_LARGE=1 to run it",
)
def test_networkx_3_4_2_to_3_5_passes(tmp_path: Path) -> None:
    """networkx: test classes inheriting test methods from a class in another file
    (`class TestMultiGraph(TestGraph)` in `classes/tests/test_multigraph.py`), tests inside the
    package (`networkx/*/tests/`), a package `conftest.py` with its own options and fixtures,
    `pytest.importorskip` of numpy/scipy/pandas (absent here: skipped at base and head alike),
    and `assortativity/tests/base_test.py`, a `*_test.py` file with no test (the shard's
    `missing-file` rejection names it: split off at once, measured empty alone).

    Ground truth, by hand at head (networkx 3.5, pytest 9.2.0, Python 3.11, no numpy):
    `python -m pytest networkx` -> 5479 passed, 302 skipped in 120 s; 262 test files; the same
    files in one process with the gate's plugin -> 5781 cases, 5781 distinct ids.
    A first gate (2 shards, 13 min on a loaded 2-core machine) passed with 5739 tests at head,
    not 5781: the 42 files that only skip themselves (module-level `importorskip`, pytest exit
    5 alone) were taken for empty files and left out of the plan; they are planned now.
    """
    repo = release_pair(tmp_path, "networkx", "3.4.2", "3.5")
    result = gate(tmp_path, repo, "--shards", "2", base="v3.4.2")
    document = result.document
    assert document["status"] == "passed", (document["reasons"], document["unmeasured"])
    assert document["introduced"] == [] and document["unmeasured"] == []
    assert document["tests"]["head"] == 5479 + 302
    assert result.code == 0


def _validators_env() -> str:
    """validators' own test environment, as its tox configuration declares it (`env_run_base`:
    the `testing` group, pytest >= 9.0.3, and the extra `crypto-eth-addresses`): `--env auto`
    reads no tox configuration, so without the extra its 18 Ethereum-address tests fail at
    base and head alike."""
    uv = find_uv()
    if uv is None:
        pytest.skip("uv is needed for validators' setup command")
    return f"{uv} pip install -q --python {{python}} .[crypto-eth-addresses] pytest>=9.0.3"


@opt_in
def test_validators_0_35_0_to_0_36_0_passes(tmp_path: Path) -> None:
    """validators: a `src/` layout (`src/validators`, `pythonpath = ["src"]`), `--doctest-modules`
    in addopts, pytest 9's native `[tool.pytest]` table at head (`[tool.pytest.ini_options]`
    at base), and parametrised ids with odd characters: escaped unicode
    (`test_domain.py::test_returns_true_on_valid_domain[kr\\xe4uter.com.-True-False]`,
    `[http://\\u4f8b\\u5b50.\\u6d4b\\u8bd5]`), brackets and `::` inside the brackets
    (`test_hostname.py::test_returns_true_on_valid_hostname[[::1]:22-False-False]`), spaces,
    slashes and stars (`test_cron.py::test_returns_true_on_valid_cron[*/5 * * * *]`).

    Ground truth, by hand at head (validators 0.36.0 with its tox environment: extra
    crypto-eth-addresses; pytest 9.2.0, Python 3.11): `python -m pytest` -> 1069 passed in 1 s
    (1071 collected ids, 0 duplicates).
    One test is honestly lost coverage: 0.36.0 dropped `JP000K0VF054` from the valid ISINs of
    `test_returns_true_on_valid_isin` (its file is still there), so the id that passed at base
    is no longer collected at head: `skipped-at-head`, reported by the default rule, not failed.
    """
    repo = release_pair(tmp_path, "validators", "0.35.0", "0.36.0")
    result = gate(tmp_path, repo, "--shards", "2", "--env", _validators_env(), base="v0.35.0")
    document = result.document
    assert document["status"] == "passed", (document["reasons"], document["unmeasured"])
    assert document["introduced"] == []
    assert document["skipped_at_head"] == [
        "tests/test_finance.py::test_returns_true_on_valid_isin[JP000K0VF054]"
    ]
    assert document["tests"]["head"] == 1069
    assert result.code == 0


@opt_in
def test_validators_with_a_bug_at_head_fails_with_exactly_pytests_failures(
    tmp_path: Path,
) -> None:
    """Mutation: domains are encoded as ASCII instead of IDNA, so every internationalised
    domain is invalid: the failing ids are escaped unicode with slashes and dots
    (`test_url.py::test_returns_true_on_valid_url[http://\\u27a1.ws/\\u4a39]`), 19 of them."""
    env = _validators_env()
    repo = release_pair(tmp_path, "validators", "0.35.0", "0.36.0")
    mutate(
        repo, "src/validators/domain.py",
        'encoded = value.encode("idna").decode("utf-8")',
        'encoded = value.encode("ascii").decode("utf-8")',
    )  # fmt: skip
    python = project_python(tmp_path, repo, ".[crypto-eth-addresses]", "pytest>=9.0.3")
    expected = plain_pytest_failures(repo, python=python)
    assert len(expected) == 19, sorted(expected)
    assert any("\\u" in test for test in expected)
    result = gate(tmp_path, repo, "--shards", "2", "--env", env, base="v0.35.0")
    document = result.document
    assert document["status"] == "failed" and result.code == 1
    assert set(document["introduced"]) == expected


def test_typeguard_4_6_0_to_4_6_1_passes(tmp_path: Path) -> None:
    """typeguard: a `src/` layout, `xfail_strict = true` (every `xfail` mark is
    `xfail(strict=True)`: 9 xfailed tests, e.g.
    `test_checkers.py::TestIntersectingProtocol::test_raises_for_non_member[range_str_specialized]`),
    the project's own pytest plugin (a `pytest11` entry point adding options), `pytester` in
    `tests/conftest.py`, a conftest `pytest_ignore_collect` hook leaving out `*_py312.py` files
    on Python 3.11, and tests that run `mypy` from the environment's `bin/` folder.

    Ground truth, by hand at head (typeguard 4.6.1, its `test` group: coverage, pytest, mypy;
    pytest 9.2.0, Python 3.11): `python -m pytest` with the environment's `bin` on PATH ->
    517 passed, 25 skipped, 9 xfailed in 5.4 s.
    Two tests are honestly lost coverage: 4.6.1 deleted `test_non_type_checked_decorated_func`
    (a copy of `test_non_type_checked_func`) from `tests/test_instrumentation.py`, which is
    still there, so both its parametrisations are `skipped-at-head` (reported, not failed).
    """
    repo = release_pair(tmp_path, "typeguard", "4.6.0", "4.6.1")
    result = gate(tmp_path, repo, "--shards", "2", base="v4.6.0")
    document = result.document
    assert document["status"] == "passed", (document["reasons"], document["unmeasured"])
    assert document["introduced"] == []
    assert document["skipped_at_head"] == [
        f"tests/test_instrumentation.py::test_non_type_checked_decorated_func[{how}]"
        for how in ("importhook", "typechecked")
    ]
    assert document["tests"]["head"] == 517 + 25 + 9
    assert result.code == 0


def test_typeguard_with_a_bug_at_head_fails_with_exactly_pytests_failures(
    tmp_path: Path,
) -> None:
    """Mutation: a protocol member that *is* callable is reported as not callable. Of the 25
    tests plain pytest fails, 3 are strict xfails that now pass (`XPASS(strict)`, e.g.
    `TestIntersectingProtocol::test_raises_for_non_member[range_str_specialized]`): a strict
    xfail passing is a failure, and the gate must count it as one."""
    repo = release_pair(tmp_path, "typeguard", "4.6.0", "4.6.1")
    mutate(
        repo, "src/typeguard/_checkers.py",
        "if not callable(subject_member):", "if callable(subject_member):",
    )  # fmt: skip
    python = project_python(tmp_path, repo, ".", "coverage[toml]>=7", "pytest>=7", "mypy>=1.2.0")
    expected = plain_pytest_failures(repo, python=python)
    assert len(expected) == 25, sorted(expected)
    assert "tests/test_checkers.py::TestIntersectingProtocol::test_raises_for_non_member" \
        "[range_str_specialized]" in expected  # fmt: skip
    result = gate(tmp_path, repo, "--shards", "2", base="v4.6.0")
    document = result.document
    assert document["status"] == "failed" and result.code == 1
    assert set(document["introduced"]) == expected


@opt_in
def test_parso_0_8_6_to_0_8_7_passes(tmp_path: Path) -> None:
    """parso: a root `conftest.py` with its own option (`pytest_addoption`: `--logging`),
    fixtures (the session fixture `clean_parso_cache`, applied to every test by `usefixtures`
    in `pytest.ini`), a `pytest_generate_tests` hook parametrising from data files, and
    `collect_ignore`; `addopts = --doctest-modules` with `testpaths = parso test`, so the
    package's own modules are test files too (3 doctests: `parso/__init__.py::parso`,
    `parso/tree.py::parso.tree.NodeOrLeaf.dump`, `parso/python/tree.py::parso.python.tree`);
    ids with spaces, parentheses and colons
    (`test_dump_tree.py::test_dump_parser_tree_not_top_level_module[node0-expected_dump0-def
    foo(x, y): return x + y]`).

    Ground truth, by hand at head (parso 0.8.7, extra `testing`: pytest, docopt; pytest 9.2.0,
    Python 3.11): `python -m pytest` -> 1989 passed in 8 s.
    A first gate discovered `test_*.py` files only: the 3 doctests were never run (1986 tests
    at head), so a bug caught only by a doctest would have passed the gate.
    """
    repo = release_pair(tmp_path, "parso", "0.8.6", "0.8.7")
    result = gate(tmp_path, repo, "--shards", "2", base="v0.8.6")
    document = result.document
    assert document["status"] == "passed", (document["reasons"], document["unmeasured"])
    assert document["introduced"] == [] and document["skipped_at_head"] == []
    assert document["tests"]["head"] == 1989
    assert result.code == 0


@opt_in
def test_parso_with_a_bug_at_head_fails_with_exactly_pytests_failures(tmp_path: Path) -> None:
    """Mutation: `dump()` indents twice as far as asked: a doctest in the package
    (`parso/tree.py::parso.tree.NodeOrLeaf.dump`) and two tests of `test/test_dump_tree.py`
    fail."""
    repo = release_pair(tmp_path, "parso", "0.8.6", "0.8.7")
    mutate(repo, "parso/tree.py", "indent_string = ' ' * indent", "indent_string = '  ' * indent")
    expected = plain_pytest_failures(repo, python=project_python(tmp_path, repo, ".[testing]"))
    assert "parso/tree.py::parso.tree.NodeOrLeaf.dump" in expected and len(expected) == 3
    result = gate(tmp_path, repo, "--shards", "2", base="v0.8.6")
    document = result.document
    assert document["status"] == "failed" and result.code == 1
    assert set(document["introduced"]) == expected


@opt_in
def test_markdown_it_py_4_2_0_to_4_3_0_passes(tmp_path: Path) -> None:
    """markdown-it-py: `pytest.importorskip("linkify_it")` of an optional dependency (the extra
    `linkify`, which the `testing` extra the gate installs does not bring), both module-level
    (`tests/test_linkify.py` skips itself whole) and inside a parametrised test (31 cases of
    `tests/test_port/test_fixtures.py::test_linkify`): skipped at base and head alike, so not
    lost coverage; `xfail_strict = true`; pytest-timeout (`timeout = 10` in the ini) and
    pytest-regressions from the extra; ids from fixture files with brackets, colons, quotes,
    escaped newlines and tabs
    (`test_fixtures.py::test_commonmark_extras[203-Regression test (tabs in lists, #830)-1. asd\\n
    2. asd\\n\\n---\\n\\n1. asd\\n\\t2. asd\\n-<ol>\\n...]`).

    Ground truth, by hand at head (markdown-it-py 4.3.0, extra `testing`; pytest 9.2.0,
    Python 3.11): `python -m pytest` -> 1158 passed, 32 skipped in 13 s.
    """
    repo = release_pair(tmp_path, "markdown-it-py", "4.2.0", "4.3.0")
    result = gate(tmp_path, repo, "--shards", "2", base="v4.2.0")
    document = result.document
    assert document["status"] == "passed", (document["reasons"], document["unmeasured"])
    assert document["introduced"] == [] and document["skipped_at_head"] == []
    assert document["tests"]["head"] == 1158 + 32
    assert result.code == 0


@opt_in
def test_markdown_it_py_with_a_bug_at_head_fails_with_exactly_pytests_failures(
    tmp_path: Path,
) -> None:
    """Mutation: a thematic break needs four markers instead of three: 23 tests fail, among
    them ids holding brackets, colons, quotes and escaped newlines
    (`test_commonmark_extras[52-Reference can be interrupted by other rules-[foo]: /url
    'title\\n - - -\\n'...]`, `test_no_end_newline[----<hr />\\n]`)."""
    repo = release_pair(tmp_path, "markdown-it-py", "4.2.0", "4.3.0")
    mutate(repo, "markdown_it/rules_block/hr.py", "if cnt < 3:", "if cnt < 4:")
    expected = plain_pytest_failures(repo, python=project_python(tmp_path, repo, ".[testing]"))
    assert len(expected) == 23, sorted(expected)
    assert any("[foo]: /url" in test for test in expected)
    result = gate(tmp_path, repo, "--shards", "2", base="v4.2.0")
    document = result.document
    assert document["status"] == "failed" and result.code == 1
    assert set(document["introduced"]) == expected
