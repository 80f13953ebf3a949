"""The tox environment and test command a project declares, read by tox and told apart by
pytest's own parser: pure parts here, real tox and real environments in
tests/test_declared_invocation.py."""

from __future__ import annotations

from release_ledger.adapters.executors import environment
from release_ledger.adapters.executors.invocation_source import (
    POSARGS_SENTINEL,
    choose_tox_env,
    command_runner,
    posargs_default,
    relative_word,
    tox_candidates,
    unittest_discovery,
)
from release_ledger.adapters.executors.local import collected_items
from release_ledger.domain import invocation


def _env(spec: str, *commands: str) -> dict[str, object]:
    return {"base_python": [spec], "commands": list(commands)}


def test_the_env_list_environment_of_this_interpreter_that_runs_the_tests_is_chosen() -> None:
    listed = {
        "py310-tests": _env("py310", "pytest tests"),
        "py311-lint": _env("py311", "ruff check"),
        "py311-tests": _env("py311", "python -m pytest tests"),
        "docs": _env("/usr/bin/python3", "sphinx-build docs out"),
    }
    assert choose_tox_env(listed, "3.11.7") == "py311-tests"
    assert choose_tox_env({"3.11": _env("3.11", "pytest")}, "3.11.2") == "3.11"


def test_an_env_without_a_python_factor_that_runs_tests_comes_before_the_ad_hoc_one() -> None:
    listed = {"lint": _env("/usr/bin/python3", "ruff"), "tests": _env("/usr/bin/python3", "pytest")}
    assert choose_tox_env(listed, "3.12.1") == "tests"
    assert choose_tox_env({"lint": _env("/usr/bin/python3", "ruff")}, "3.12.1") is None


def test_the_runner_is_found_behind_python_m_and_coverage() -> None:
    assert command_runner("coverage run -m pytest -q tests") == ("pytest", ["-q", "tests"])
    assert command_runner("/x/bin/python -m pytest tests") == ("pytest", ["tests"])
    assert command_runner("python -m unittest discover -s pkg -p '*tests.py'") == (
        "unittest", ["discover", "-s", "pkg", "-p", "*tests.py"],
    )  # fmt: skip
    assert command_runner("sphinx-build -b html docs out") is None


def test_posargs_defaults_are_the_words_where_the_sentinel_stands() -> None:
    with_defaults = ["--doctest-modules", "tests", "-n", "auto", "-q"]
    with_sentinel = ["--doctest-modules", "tests", POSARGS_SENTINEL, "-q"]
    assert posargs_default(with_defaults, with_sentinel) == ["-n", "auto"]
    assert posargs_default(["tests"], ["tests"]) == []


def test_paths_are_named_relative_to_the_working_directory_or_inside_site_packages() -> None:
    site = "/repo/.tox/py311/lib/python3.11/site-packages"
    assert relative_word(site + "/pkg", "/repo", site, ".tox") == "{site-packages}/pkg"
    assert relative_word("/repo/tests", "/repo", site, ".tox") == "../tests"
    assert relative_word("--cov-config=/repo/setup.cfg", "/repo", site, "") == (
        "--cov-config=setup.cfg"
    )
    assert relative_word("auto", "/repo", site, "") == "auto"
    # after a report's kind (pytest-cov), as tox's {work_dir} names the build's clone
    assert relative_word("html:/repo/.tox/3.11/tmp/htmlcov", "/repo", site, "") == (
        "html:.tox/3.11/tmp/htmlcov"
    )
    assert relative_word("--cov-report=xml:/repo/.tox/c.xml", "/repo", site, "") == (
        "--cov-report=xml:.tox/c.xml"
    )
    assert relative_word("html:/elsewhere/htmlcov", "/repo", site, "") == "html:/elsewhere/htmlcov"


def test_unittest_discovery_names_its_start_directory_and_pattern() -> None:
    found = unittest_discovery(["discover", "-s", "pkg", "-p", "*tests.py"])
    assert found == {"start_directory": "pkg", "pattern": "*tests.py"}


def test_a_shard_drops_the_same_options_here_as_in_the_domain() -> None:
    assert environment.STOPPING_OPTIONS == invocation.STOPPING_OPTIONS
    options = ["--maxfail", "2", "-x", "--cov-config", "setup.cfg", "--junitxml=r.xml", "-q"]
    assert environment.shard_options(options) == invocation.with_coverage_off(
        invocation.drop_options(options, invocation.STOPPING_OPTIONS)
    )


def test_a_shard_runs_declared_coverage_off_it_measures_the_whole_run() -> None:
    """A shard's share of the suite never meets `--cov-fail-under=100` (pytest exits 1 with
    no test failed) and the declared report paths name tox's folders: coverage is off."""
    declared = ["--cov", "{site-packages}/pkg", "--cov-fail-under=100", "--cov-report",
                "html:/build/.tox/htmlcov", "-q"]  # fmt: skip
    assert environment.shard_options(declared) == [*declared, "--no-cov"]
    assert invocation.with_coverage_off(declared) == [*declared, "--no-cov"]
    assert environment.shard_options(["-q", "--cover-me"]) == ["-q", "--cover-me"]
    assert environment.shard_options(["--cov=pkg", "--no-cov"]) == ["--cov=pkg", "--no-cov"]


def test_collected_items_name_installed_modules_inside_site_packages() -> None:
    site = "/cache/envs/k/venv/lib/python3.11/site-packages"
    output = (
        "created: 2/2 workers\n"
        "release-ledger-item\t/w/tests/test_b.py\ttests/test_b.py::test_b[a b]\n"
        f"release-ledger-item\t{site}/pkg/mod.py\tmod.py::pkg.mod.f\n"
        "release-ledger-item\t/elsewhere/x.py\tx.py::t\n"
        "3 tests collected in 0.01s\n"
    )
    ids = collected_items(output, "/w")
    assert ids == ["tests/test_b.py::test_b[a b]", "{site-packages}/pkg/mod.py::pkg.mod.f"]
    assert invocation.collected_files([*ids, "tests/test_b.py::test_c"]) == [
        "tests/test_b.py", "{site-packages}/pkg/mod.py",
    ]  # fmt: skip


def test_only_environments_this_interpreter_can_be_are_read_for_their_commands() -> None:
    specs = {
        "py37": {"base_python": ["py37"]},
        "py311": {"base_python": ["py311"]},
        "lint": {"base_python": ["/usr/bin/python3"]},
        "docs": {"base_python": ["python3.8"]},
    }
    assert tox_candidates(specs, "3.11.7") == ["py311", "lint"]
