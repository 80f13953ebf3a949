"""Real release pairs, one per class of issue 37, with what the project's own CI gave.

Each pair is two consecutive releases of a real project (built from their public sdists by
`tests/realworld/sdists.release_pair`) and a *mutant*: the same pair with a one-line bug
committed at head. `EXPECTED` holds the failing tests the project's own CI command (`Pair.ci`,
run in a checkout of each revision) reported at base, at head and at the mutant's head, measured
by `python bench/ci_pairs.py --ci` on the date and with the tools named in `EXPECTED_MEASURED`.
The gate is right on a pair when it fails exactly the tests CI fails at head and not at base
(`expected_introduced`), and passes when there are none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Pair:
    name: str
    base: str
    head: str
    klass: str  # the class of issue 37 the pair stands for
    ci: str  # the project's own CI command (shell words), run in the checkout
    mutation: Mutation
    runner: str = "pytest"  # how the CI's failures are read: pytest (JUnit) or unittest (stderr)
    unittest_top: str = ""  # unittest's top-level folder (`discover -s DIR`), as a path prefix
    base_has_ci: bool = True  # False: the base release's sdist holds no CI configuration
    junit: str = ""  # where the CI command writes its own JUnit report (its option wins)


PAIRS: tuple[Pair, ...] = (
    Pair(
        "structlog",
        "25.5.0",
        "26.1.0",
        "tox factor envs, factor-conditional dependency group (`3.1{0-5}-tests`, "
        "`dependency_groups = tests: tests`)",
        "tox run -e 3.11-tests",
        Mutation(
            "src/structlog/_log_levels.py",
            'if method_name == "exception":\n        return "error"',
            'if method_name == "exception":\n        return "exception"',
        ),
    ),
    Pair(
        "glom",
        "24.11.0",
        "25.12.0",
        "tox `--doctest-modules {envsitepackagesdir}/glom` with `changedir = .tox`",
        "tox run -e py311",
        Mutation("glom/core.py", "        all_args_text += ', '", "        all_args_text += ','"),
    ),
    Pair(
        "attrs",
        "25.4.0",
        "26.1.0",
        "tox `pytest {posargs:-n auto}` (factor env `py311-tests`, uv lock runner)",
        "tox run -e py311-tests",
        Mutation(
            "src/attr/converters.py",
            "            return default.factory()",
            "            return default.factory",
        ),
    ),
    Pair(
        "svcs",
        "26.1.0",
        "26.2.0",
        "dynamic version (hatch-vcs) and a lock file (`uv-venv-lock-runner`), tox `3.11-tests`",
        "tox run -e 3.11-tests",
        Mutation(
            "src/svcs/_core.py",
            "(num_services={len(self._services)})",
            "(num_services={len(self._services) + 1})",
        ),
    ),
    Pair(
        "python-slugify",
        "8.0.4",
        "9.0.0",
        "unittest suite in `test.py` (tox `{posargs:test.py test_release.py}`, factor deps)",
        "tox run -e py3.11-text_unidecode",
        Mutation(
            "slugify/slugify.py",
            "NUMBERS_PATTERN = re.compile(r'(?<=\\d),(?=\\d)')",
            "NUMBERS_PATTERN = re.compile(r'(?<=\\d);(?=\\d)')",
        ),
        base_has_ci=False,  # 8.0.4's sdist holds no tests and no tox.ini: all new at head
    ),
    Pair(
        "mkdocs",
        "1.6.0",
        "1.6.1",
        'hatch env `test` with `python -m unittest discover -s mkdocs -p "*tests.py"`',
        # `hatch run test.py3.11-default:test` cannot load the sdist's pyproject.toml (its env
        # collector `mkdocs.integration` reads mkdocs.yml, which the sdist leaves out): the
        # hatch env's own definition (features i18n, coverage; its `test` script) instead.
        "uv venv -q --python 3.11 .ci-venv && uv pip install -q --python .ci-venv/bin/python"
        " -e .[i18n] coverage && .ci-venv/bin/python -m unittest discover -s mkdocs"
        " -p '*tests.py'",
        Mutation(
            "mkdocs/utils/__init__.py",
            "relurl = '/'.join(rel_parts) or '.'",
            "relurl = '/'.join(rel_parts) or './'",
        ),
        runner="unittest",
        unittest_top="mkdocs/",
    ),
    Pair(
        "environ-config",
        "24.1.0",
        "26.1.0",
        "nox session `tests` (`nox -s tests-3.11`; installs `.[tests]` at base, the PEP 735 group "
        "`tests` at head)",
        "nox -s tests-3.11",
        Mutation(
            "src/environ/_environ_config.py",
            'in ("1", "true", "yes")',
            'in ("true", "yes")',
        ),
    ),
    Pair(
        "nbstripout",
        "0.9.0",
        "0.9.1",
        "tests run the project's console script (`nbstripout -t` in a bash subshell, "
        "`NBSTRIPOUT_EXE` default `nbstripout`)",
        # No CI configuration in the sdist; the project's workflow installs the package and
        # tests/requirements.txt and runs pytest in the activated environment.
        "uv venv -q --python 3.11 .ci-venv && uv pip install -q --python .ci-venv/bin/python"
        " . -r tests/requirements.txt && PATH=$PWD/.ci-venv/bin:$PATH .ci-venv/bin/python -m"
        " pytest",
        Mutation(
            "nbstripout/_nbstripout.py",
            "parser.add_argument('--textconv', '-t',",
            "parser.add_argument('--textconv', '-T',",
        ),
    ),
    Pair(
        "pyproject-api",
        "1.12.0",
        "1.12.1",
        "tox.toml `{posargs:...}` default whose option values are paths (`--junitxml "
        "{work_dir}/junit.xml`, `--cov {env_site_packages_dir}/pyproject_api`, `--cov "
        "{tox_root}/tests`) and `--cov-fail-under=100`; a pylock.toml",
        # Its package environment builds on 3.15 (`env_pkg_base.default_base_python`), which
        # this machine lacks: the wheel is built on 3.11 instead, nothing else changed.
        "tox run -e 3.11 -x env_pkg_base.default_base_python=3.11",
        Mutation(
            "src/pyproject_api/_util.py",
            "path.unlink()\n            path.mkdir()",
            "path.unlink()\n            path.touch()",
        ),
        junit=".tox/junit.3.11.xml",
    ),
)


def failing_sets(
    at_base: Iterable[str], new_at_head: Iterable[str] = (), mutant_breaks: Iterable[str] = ()
) -> dict[str, list[str]]:
    """The failing sets of one pair, each sorted: base fails `at_base`; head fails those and
    `new_at_head`; the mutant's head those of head and `mutant_breaks`. In every pair measured
    so far each set holds the one before it (neither head nor the mutant fixed a test)."""
    head = {*at_base, *new_at_head}
    return {
        "base": sorted(set(at_base)),
        "head": sorted(head),
        "mutant": sorted({*head, *mutant_breaks}),
    }


# nbstripout's `tests/test_end_to_end.py` cases that its CI command fails at both revisions
# (the sdist leaves out `tests/e2e_notebooks`): every case of its parametrized end-to-end
# tests, each with its first parameter False and True. The other parameters, as pytest names
# them:
_NB_DRY_RUNS = (
    "test_metadata.ipynb-extra_args0-True",
    "test_zeppelin.zpln-extra_args1-True",
    "test_nochange.ipynb-extra_args2-False",
)
_NB_EXPECTED = (  # (notebook, expected output) of `argsN`, N its position here
    ("test_drop_empty_cells.ipynb", "test_drop_empty_cells_dontdrop.ipynb.expected"),
    ("test_drop_empty_cells.ipynb", "test_drop_empty_cells.ipynb.expected"),
    ("test_drop_tagged_cells.ipynb", "test_drop_tagged_cells_dontdrop.ipynb.expected"),
    ("test_drop_tagged_cells.ipynb", "test_drop_tagged_cells.ipynb.expected"),
    ("test_execution_timing.ipynb", "test_execution_timing.ipynb.expected"),
    ("test_max_size.ipynb", "test_max_size.ipynb.expected"),
    ("test_max_size.ipynb", "test_max_size.ipynb.expected_sequential_id"),
    ("test_empty_metadata.ipynb", "test_empty_metadata.ipynb.expected"),
    ("test_metadata.ipynb", "test_metadata.ipynb.expected"),
    ("test_metadata.ipynb", "test_metadata_extra_keys.ipynb.expected"),
    ("test_metadata.ipynb", "test_metadata_keep_count.ipynb.expected"),
    ("test_metadata.ipynb", "test_metadata_keep_output.ipynb.expected"),
    ("test_metadata.ipynb", "test_metadata_keep_output_keep_count.ipynb.expected"),
    ("test_metadata_notebook.ipynb", "test_metadata_notebook.ipynb.expected"),
    ("test_keep_metadata_keys.ipynb", "test_keep_metadata_keys.ipynb.expected"),
    ("test_metadata_period.ipynb", "test_metadata_period.ipynb.expected"),
    ("test_strip_init_cells.ipynb", "test_strip_init_cells.ipynb.expected"),
    ("test_nbformat2.ipynb", "test_nbformat2.ipynb.expected"),
    ("test_nbformat45.ipynb", "test_nbformat45.ipynb.expected"),
    ("test_nbformat45.ipynb", "test_nbformat45.ipynb.expected_sequential_id"),
    ("test_missing_nbformat.ipynb", "test_missing_nbformat.ipynb.expected"),
    ("test_unicode.ipynb", "test_unicode.ipynb.expected"),
    ("test_widgets.ipynb", "test_widgets.ipynb.expected"),
    ("test_zeppelin.zpln", "test_zeppelin.zpln.expected"),
)
_NB_ERRORS = (
    "test_metadata.ipynb-expected_errs0-extra_args0",
    "test_metadata_exception.ipynb-expected_errs1-extra_args1",
    "test_invalid_json.ipynb-expected_errs2-extra_args2",
)


def _nbstripout_end_to_end() -> list[str]:
    module = "tests/test_end_to_end.py::"
    cases = [f"test_dry_run_{how}[{flag}-{case}]"
             for how in ("args", "stdin") for flag in (False, True) for case in _NB_DRY_RUNS]
    cases += [f"test_end_to_end_{how}[{flag}-{notebook}-{expected}-args{n}]"
              for how in ("file", "stdin") for flag in (False, True)
              for n, (notebook, expected) in enumerate(_NB_EXPECTED)]
    cases += [f"test_make_errors[{case}]" for case in _NB_ERRORS]
    return [module + case for case in cases]  # fmt: skip


# Failing sets the project's own CI command gave (`--ci`), per pair: base, head, mutant head.
EXPECTED_MEASURED = (
    "2026-12-04, CPython 3.11.7; tox 4.67.17 with tox-uv 1.37.1, nox 2026.10.20, hatch 1.18.2,"
    " uv 0.13.9; each environment resolved by the CI tool as PyPI stood that day (pytest 9.2.0)"
)
EXPECTED: dict[str, dict[str, list[str]]] = {
    "structlog": failing_sets([], mutant_breaks=[
        "tests/test_stdlib.py::TestAddLogLevel::test_log_level_alias_normalized[exception-error]",
        "tests/test_testing.py::TestCaptureLogs::test_captures_log_level_mapping",
    ]),
    "glom": failing_sets([], mutant_breaks=[
        "glom/core.py::glom.core.format_invocation",
        "glom/test/test_basic.py::test_coalesce",
        "glom/test/test_check.py::test_check_basic",
        "glom/test/test_reduction.py::test_fold",
        "glom/test/test_reduction.py::test_sum_integers",
        "glom/test/test_scope_vars.py::test_vars",
    ]),
    "attrs": failing_sets(
        ["tests/test_converters.py::TestPipe::test_wrapped_annotation"],
        mutant_breaks=["tests/test_converters.py::TestDefaultIfNone::test_none_factory"],
    ),
    "svcs": failing_sets([], mutant_breaks=[
        "tests/test_registry.py::TestRegistry::test_repr_counts",
        "tests/test_registry.py::TestRegistry::test_repr_empty",
    ]),
    "python-slugify": failing_sets([], mutant_breaks=[
        "test.py::TestSlugify::test_numbers_and_symbols",
        "test.py::TestSlugifyUnicode::test_numbers_and_symbols",
        "test_release.py::ReleaseRegressionTests::test_legacy_goldens_and_differential",
    ]),
    "mkdocs": failing_sets([
        "mkdocs/tests/cli_tests.py::CLITests::test_build_config_file",
        "mkdocs/tests/cli_tests.py::CLITests::test_gh_deploy_config_file",
        "mkdocs/tests/cli_tests.py::CLITests::test_serve_config_file",
        "mkdocs/tests/config/config_tests.py::ConfigTests::test_error_on_pages",
    ], mutant_breaks=[
        "mkdocs/tests/build_tests.py::BuildTests::test_context_base_url_homepage",
        "mkdocs/tests/build_tests.py::BuildTests::test_context_base_url_homepage_use_directory_urls",
        "mkdocs/tests/structure/file_tests.py::TestFiles::test_get_relative_url_use_directory_urls",
        "mkdocs/tests/utils/utils_tests.py::UtilsTests::test_get_relative_url",
        "mkdocs/tests/utils/utils_tests.py::UtilsTests::test_get_relative_url_empty",
    ]),
    "environ-config": failing_sets([], mutant_breaks=[
        "tests/test_environ_config.py::TestEnvironConfig::test_bool_var[1]",
    ]),
    "nbstripout": failing_sets(_nbstripout_end_to_end(), new_at_head=[
        "tests/test_end_to_end.py::test_newline_behavior",
        "tests/test_end_to_end.py::test_nochange_notebook_unchanged",
    ], mutant_breaks=[
        "tests/test_diff_from_bash_subshells.py::test_diff_with_process_substitution_diff",
        "tests/test_git_integration.py::test_git_diff_diff",
        "tests/test_git_integration.py::test_git_diff_extrakeys",
        "tests/test_git_integration.py::test_git_diff_keepmetadatakeys",
    ]),
    "pyproject-api": failing_sets(
        ["tests/test_frontend_setuptools.py::test_result_missing"],
        mutant_breaks=["tests/test_util.py::test_ensure_empty_dir_on_path_file"],
    ),
}  # fmt: skip


_SITE = re.compile(r"^(?:.*?site-packages/|\{site-packages\}/)")  # tox's path; the gate's name


# A subtest's id in the gate's report: `PARENT [MSG] (K=V, ...)` (the plugin's naming).
_SUBTEST = re.compile(r"^(.*?::[^\s\[]+(?:\[[^\]]*\])?) [\[(].*$")


def normalized(test: str) -> str:
    """A test id as both sides name it: an installed module by its path inside the package
    (tox runs glom's doctests from `.tox/py311/lib/python3.11/site-packages/glom/core.py`);
    a failed subtest by its test, as unittest's runner names it (`FAIL: test_x (...) (i=1)`
    is test_x failing), where the gate names each subtest."""
    return _SUBTEST.sub(r"\1", _SITE.sub("", test))


def expected_introduced(pair: Pair, mutant: bool) -> set[str] | None:
    """The tests CI fails at head (or the mutant's head) and not at base; None: not measured."""
    truth = EXPECTED.get(pair.name)
    if truth is None:
        return None
    return set(truth["mutant" if mutant else "head"]) - set(truth["base"])


def pair_named(name: str) -> Pair:
    return next(pair for pair in PAIRS if pair.name == name)
