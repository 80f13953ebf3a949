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
    base_has_ci: bool = True  # False: the base release's sdist holds no CI configuration


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
        Mutation("mkdocs/utils/__init__.py", "r'^\\d{3}\\.html?$'", "r'^\\d{3}\\.html$'"),
        runner="unittest",
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
        "codespell",
        "2.4.2",
        "2.4.3",
        "tests run the project's console script (`subprocess.run(['codespell', ...])`)",
        "tox run -e unitest",
        Mutation(
            "codespell_lib/_codespell.py",
            "return main(*sys.argv[1:])",
            "return main(*sys.argv[2:])",
        ),
    ),
)


# Failing sets the project's own CI command gave (`--ci`), per pair: base, head, mutant head.
EXPECTED_MEASURED = "not yet measured"
EXPECTED: dict[str, dict[str, list[str]]] = {}


def expected_introduced(pair: Pair, mutant: bool) -> set[str] | None:
    """The tests CI fails at head (or the mutant's head) and not at base; None: not measured."""
    truth = EXPECTED.get(pair.name)
    if truth is None:
        return None
    return set(truth["mutant" if mutant else "head"]) - set(truth["base"])


def pair_named(name: str) -> Pair:
    return next(pair for pair in PAIRS if pair.name == name)
