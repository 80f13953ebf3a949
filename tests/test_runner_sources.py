"""nox sessions and hatch environments read by nox and hatch themselves, and declared test
commands other than pytest's default discovery run under pytest.

Real noxfiles executed by nox's own machinery (commands captured, none run), real
`hatch env show --json`; nothing is installed here (tests/test_runner_gates.py runs gates).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from release_ledger.adapters.discovery import discover_test_files
from release_ledger.adapters.executors import (
    environment,
    hatch_reader,
    invocation_source,
    nox_reader,
    runners,
)

VERSION = "{}.{}".format(*sys.version_info[:2])
OTHER = "3.9" if VERSION != "3.9" else "3.10"
PROJECT = '[project]\nname = "pkg"\nversion = "1.0"\n'


def project(tmp_path: Path, files: dict[str, str]) -> str:
    root = tmp_path / "checkout"
    for rel, text in {"pkg/__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return str(root)


def sources(root: str) -> list[dict[str, object]]:
    return environment.declared_sources(root, VERSION, [], dict(os.environ))


NOXFILE = f"""
import nox

@nox.session
def lint(session):
    session.install("ruff")
    session.run("ruff", "check", ".")

@nox.session(python=["{OTHER}", "{VERSION}"])
def tests(session):
    session.install("-e", ".[test]", "iniconfig>=1")
    session.install("-r", "requirements/test.txt")
    session.env["FROM_SESSION"] = "1"
    with session.chdir("tests"):
        session.run("pytest", "-p", "no:cacheprovider", *session.posargs or ["unit"],
                    env={{"FROM_RUN": "2"}})
"""


def test_the_nox_session_for_this_interpreter_is_read_by_running_it_with_commands_captured(
    tmp_path: Path,
) -> None:
    root = project(tmp_path, {"noxfile.py": NOXFILE, "tests/unit/test_a.py": "",
                              "requirements/test.txt": "packaging\n"})  # fmt: skip

    source = nox_reader.nox_source(root, VERSION + ".1", dict(os.environ))

    assert source["detail"] == f"nox session tests-{VERSION}"
    assert source["extras"] == ["test"]
    assert source["requirements"] == ["iniconfig>=1"]
    assert source["files"] == ["requirements/test.txt"]
    assert source["install_project"] is True
    assert source["set_env"] == {"FROM_SESSION": "1", "FROM_RUN": "2"}
    # the session's `posargs or [...]` default, applied by the session itself
    assert source["invocation"] == {
        "runner": "pytest", "source": f"nox:tests-{VERSION}", "workdir": "tests",
        "words": ["-p", "no:cacheprovider", "unit"], "env": {"FROM_SESSION": "1", "FROM_RUN": "2"},
        "posargs": ["unit"],
    }  # fmt: skip
    # nothing was run: no virtual environment, no .nox folder
    assert not (Path(root) / ".nox").exists()


def test_a_nox_session_that_runs_uv_sync_installs_what_uv_sync_does(tmp_path: Path) -> None:
    """`uv sync` reads the lock (the source's runner says so) and adds its default groups
    (`dev`, or `[tool.uv] default-groups`) unless the session keeps them out."""
    noxfile = f"""
import nox

@nox.session(python="{VERSION}")
def tests(session):
    session.run_install("uv", "sync", "--extra", "test", "--group", "cov")
    session.run("pytest")

@nox.session(python="{OTHER}")
def bare(session):
    session.run_install("uv", "sync", "--no-default-groups")
    session.run("pytest")
"""
    groups = '[dependency-groups]\ndev = ["iniconfig"]\ncov = ["coverage"]\n'
    root = project(tmp_path, {"noxfile.py": noxfile, "pyproject.toml": PROJECT + groups})

    [synced, *_] = sources(root)
    bare = nox_reader.nox_source(root, OTHER, dict(os.environ))

    assert synced["source"] == "nox" and synced["runner"] == "uv sync"
    assert synced["extras"] == ["test"]
    assert synced["requirements"] == ["coverage", "iniconfig"]  # --group cov, then dev
    assert bare["runner"] == "uv sync" and bare["no_default_groups"] is True


def test_nox_comes_after_tox_and_before_the_other_sources(tmp_path: Path) -> None:
    tox = "[tox]\nenv_list = py\n[testenv]\ndeps = pytest\ncommands = pytest\n"
    hatch = '[tool.hatch.envs.test]\ndependencies = ["pytest"]\n[tool.hatch.envs.test.scripts]\n'
    hatch += 'test = "pytest"\n'
    root = project(tmp_path, {
        "tox.ini": tox, "noxfile.py": NOXFILE, "tests/unit/test_a.py": "",
        "pyproject.toml": PROJECT + hatch + '[dependency-groups]\ntest = ["pytest"]\n',
    })  # fmt: skip

    kinds = [s["source"] for s in sources(root)]

    assert kinds == ["tox", "nox", "hatch", "dependency-group", "pytest"]
    assert environment.PRECEDENCE[:4] == ("tox", "nox", "hatch", "dependency-group")


def test_an_unreadable_noxfile_is_one_line_and_the_next_source_follows(tmp_path: Path) -> None:
    root = project(tmp_path, {
        "noxfile.py": "import nox\nraise RuntimeError('broken noxfile')\n",
        "pyproject.toml": PROJECT + '[dependency-groups]\ntest = ["pytest"]\n',
    })  # fmt: skip

    found = sources(root)

    assert [s["source"] for s in found] == ["nox", "dependency-group", "pytest"]
    error = str(found[0]["unreadable"])
    assert "\n" not in error and "Traceback" not in error
    assert error.startswith("nox could not read the noxfile")


def test_a_noxfile_without_a_test_session_for_this_interpreter_says_so(tmp_path: Path) -> None:
    noxfile = f"import nox\n\n@nox.session(python='{OTHER}')\ndef tests(session):\n"
    noxfile += "    session.run('pytest')\n"
    root = project(tmp_path, {"noxfile.py": noxfile})

    found = sources(root)

    assert found[0]["source"] == "nox"
    assert found[0]["unreadable"] == (
        f"no nox session for Python {VERSION} runs tests (sessions: tests (Python {OTHER}))"
    )


HATCH = """
[tool.hatch.envs.default]
dependencies = ["six"]

[tool.hatch.envs.test]
dependencies = ["iniconfig"]
features = ["tests"]
env-vars = { FROM_HATCH = "1" }

[tool.hatch.envs.test.scripts]
unit = "python -m unittest discover -s pkg -p '*tests.py' {args}"
cov = ["unit", "coverage report"]

[[tool.hatch.envs.test.matrix]]
python = ["OTHER", "VERSION"]
""".replace("OTHER", OTHER).replace("VERSION", VERSION)


def test_the_hatch_test_environment_and_its_unittest_script_are_read_by_hatch(
    tmp_path: Path,
) -> None:
    root = project(tmp_path, {"pyproject.toml": PROJECT + HATCH})

    source = hatch_reader.hatch_source(root, VERSION + ".2", dict(os.environ))

    assert source["detail"] == f"hatch env test.py{VERSION}, script unit"
    assert source["extras"] == ["tests"]
    assert source["requirements"] == ["iniconfig"]
    assert source["set_env"] == {"FROM_HATCH": "1"}
    assert source["command"] == "python -m unittest discover -s pkg -p '*tests.py'"
    assert source["invocation"] == {
        "runner": "unittest", "source": f"hatch:test.py{VERSION}:unit", "workdir": "",
        "words": ["discover", "-s", "pkg", "-p", "*tests.py"], "env": {"FROM_HATCH": "1"},
    }  # fmt: skip


def test_hatch_test_is_a_source_only_where_the_project_configures_it(tmp_path: Path) -> None:
    plain = project(tmp_path / "plain", {"pyproject.toml": PROJECT})
    configured = project(tmp_path / "configured", {
        "pyproject.toml": PROJECT + '[tool.hatch.envs.hatch-test]\nextra-dependencies = ["six"]\n'
    })  # fmt: skip

    assert not hatch_reader.hatch_declared(plain)
    source = hatch_reader.hatch_source(configured, VERSION, dict(os.environ))

    assert source["detail"] == f"hatch env hatch-test.py{VERSION}, script run"
    assert "six" in source["requirements"]  # type: ignore[operator]
    assert source["invocation"]["runner"] == "pytest"  # type: ignore[index]


def test_an_unreadable_hatch_configuration_is_one_line_and_the_next_source_follows(
    tmp_path: Path,
) -> None:
    broken = '[tool.hatch.envs.test]\ndependencies = "pytest"\n[tool.hatch.envs.test.scripts]\n'
    broken += 'test = "pytest"\n'
    root = project(tmp_path, {"pyproject.toml": PROJECT + broken})

    found = sources(root)

    assert [s["source"] for s in found] == ["hatch", "pytest"]
    assert found[0]["unreadable"] == (
        "hatch could not read its configuration: TypeError: Field "
        "`tool.hatch.envs.test.dependencies` must be an array"
    )


def test_unittest_discovery_runs_under_pytest_with_its_start_directory_and_pattern(
    tmp_path: Path,
) -> None:
    words = ["discover", "-s", "pkg", "-p", "*tests.py", "-v"]

    found = runners.unittest_under_pytest(words, "", str(tmp_path))

    assert found == {
        "options": ["-o", "python_files=*tests.py"], "targets": [{"path": "pkg"}],
        "start_directory": "pkg", "pattern": "*tests.py",
    }  # fmt: skip


def test_a_bare_unittest_run_uses_unittests_default_pattern_and_named_modules_are_files(
    tmp_path: Path,
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test.py").write_text("")

    bare = runners.unittest_under_pytest([], "sub", str(tmp_path))
    named = runners.unittest_under_pytest(["test.T.test_x"], "sub", str(tmp_path))
    script = runners.declared(["python", "test.py"], "")

    assert bare["options"] == ["-o", "python_files=test*.py"]
    assert bare["targets"] == [{"path": "sub"}]
    assert named["options"] == ["-o", "python_files=test.py"]
    assert named["targets"] == [{"path": "sub/test.py::T::test_x"}]
    assert script == {"runner": "unittest", "workdir": "", "words": ["test.py"]}


def test_commands_the_gate_cannot_run_under_pytest_are_not_test_commands() -> None:
    assert runners.is_test_command(["coverage", "run", "-m", "pytest", "-q"])
    assert runners.is_test_command(["python", "-X", "dev", "-m", "pytest"])
    assert not runners.is_test_command(["python", "runtests.py"])
    assert not runners.is_test_command(["python", "-c", "import pytest"])
    assert not runners.is_test_command(["ruff", "check", "."])
    assert not runners.is_test_command(["python", "-m", "pip", "install", "pytest"])


def test_where_pytests_rules_find_no_file_unittests_default_pattern_finds_test_py(
    tmp_path: Path,
) -> None:
    (tmp_path / "test.py").write_text("import unittest\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "helpers.py").write_text("")
    assert discover_test_files(tmp_path) == ["test.py"]

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    assert discover_test_files(tmp_path) == ["tests/test_a.py"]


def test_a_tox_command_running_a_test_module_as_a_script_is_unittest_under_pytest() -> None:
    assert invocation_source.command_runner("python test.py") == ("unittest", ["test.py"])
    assert invocation_source.command_runner("python setup.py test") is None


def test_hatch_environment_plugins_are_never_installed_into_the_gates_interpreter(
    tmp_path: Path,
) -> None:
    """hatch is not run (it would install them into the gate's interpreter): the test
    environment is read from the tables as written, and the source says so."""
    plugin = '[tool.hatch.env]\nrequires = ["hatch-pip-compile"]\n'
    plugin += '[tool.hatch.env.collectors.docs]\npath = "mkdocs.yml"\n'
    hatch = """
[tool.hatch.envs.default]
dependencies = ["iniconfig"]
[tool.hatch.envs.test]
features = ["tests"]
extra-dependencies = ["six"]
[tool.hatch.envs.test.scripts]
test = 'python -m unittest discover -s pkg -p "*tests.py"'
[[tool.hatch.envs.test.matrix]]
python = ["3.8", "VERSION"]
type = ["default", "min-req"]
[tool.hatch.envs.test.overrides]
matrix.type.features = [{ value = "min-versions", if = ["min-req"] }]
[tool.hatch.envs.style]
type = "pip-compile"
[tool.hatch.envs.style.scripts]
test = "pytest"
""".replace("VERSION", VERSION)
    root = project(tmp_path, {"pyproject.toml": PROJECT + plugin + hatch})

    found = sources(root)

    why = "hatch needs environment plugins the gate does not install (hatch-pip-compile)"
    assert found[0]["source"] == "hatch"
    assert found[0]["detail"] == (
        f"hatch env test.py{VERSION}, script test (read from its tables as written: {why})"
    )
    assert found[0]["extras"] == ["tests"]
    assert found[0]["requirements"] == ["iniconfig", "six"]
    assert found[0]["invocation"]["runner"] == "unittest"  # type: ignore[index]
    assert found[0]["invocation"]["words"] == [  # type: ignore[index]
        "discover", "-s", "pkg", "-p", "*tests.py"
    ]


def test_hatch_plugins_and_no_test_script_as_written_is_one_line_and_the_next_source(
    tmp_path: Path,
) -> None:
    plugin = '[tool.hatch.env]\nrequires = ["hatch-pip-compile"]\n'
    hatch = '[tool.hatch.envs.lint.scripts]\ncheck = "ruff check ."\n'
    root = project(tmp_path, {"pyproject.toml": PROJECT + plugin + hatch})

    found = sources(root)

    assert [s["source"] for s in found] == ["hatch", "pytest"]
    assert found[0]["unreadable"] == (
        "hatch needs environment plugins the gate does not install (hatch-pip-compile); "
        f"as written, no hatch environment for Python {VERSION} has a script that runs tests"
    )


HATCH_DETACHED = """
[project.optional-dependencies]
extra = ["six"]
[tool.hatch.envs.default]
dependencies = ["iniconfig"]
features = ["extra"]
[tool.hatch.envs.default.scripts]
check = "pytest -q"
[tool.hatch.envs.test]
detached = true
dependencies = ["pytest"]
[tool.hatch.envs.test.scripts]
test = "pytest tests"
[tool.hatch.envs.unit-tests]
template = "test"
extra-dependencies = ["packaging"]
"""


@pytest.mark.parametrize(("env", "requirements"), [
    ("test", ["pytest"]), ("unit-tests", ["pytest", "packaging"])
])  # fmt: skip
def test_a_detached_hatch_environment_as_written_installs_no_project_and_inherits_nothing(
    tmp_path: Path, env: str, requirements: list[str]
) -> None:
    """`detached = true` is its own template and skips the install (and so does an
    environment templated on it): read from the tables as written exactly as hatch reads
    the same tables where it can be run."""
    plugin = '[tool.hatch.env]\nrequires = ["hatch-pip-compile"]\n'
    tables = PROJECT + HATCH_DETACHED
    if env == "unit-tests":  # the test environment's script, left to its child
        tables = tables.replace('test = "pytest tests"', 'lint = "ruff check ."')
        tables += '[tool.hatch.envs.unit-tests.scripts]\ntest = "pytest tests"\n'
    by_hatch = hatch_reader.hatch_source(
        project(tmp_path / "hatch", {"pyproject.toml": tables}), VERSION, dict(os.environ)
    )
    as_written = hatch_reader.hatch_source(
        project(tmp_path / "written", {"pyproject.toml": plugin + tables}),
        VERSION, dict(os.environ),
    )  # fmt: skip

    for source in (by_hatch, as_written):
        assert str(source["detail"]).startswith(f"hatch env {env}, script test")
        assert source["install_project"] is False
        assert source["extras"] == []  # the default environment's features not inherited
        assert source["requirements"] == requirements  # nor its dependencies
        assert source["command"] == by_hatch["command"]
    assert "as written" in str(as_written["detail"])


def test_the_modules_sent_to_build_hosts_define_each_name_once() -> None:
    """They are concatenated into one program there (`programs.py`): a name defined twice
    would silently be the later module's in the earlier one."""
    import ast

    from release_ledger.adapters.executors import programs

    seen: dict[str, str] = {}
    clashes = []
    for module in programs.REMOTE_PARTS:
        tree = ast.parse((programs._HERE / module).read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                if node.name in seen:
                    clashes.append((node.name, seen[node.name], module))
                seen[node.name] = module
    assert clashes == []


def test_the_gates_tools_are_found_beside_its_interpreter_before_path() -> None:
    """tox, hatch and uv are found by one rule (`env_installer.find_tool`): the gate's own
    environment first, whatever PATH says."""
    import sys

    from release_ledger.adapters.executors.env_installer import find_tool

    beside = os.path.join(os.path.dirname(sys.executable), "hatch")
    assert find_tool("hatch") == beside
    assert find_tool("no-such-tool-of-the-gate") is None



# The template's script (`default`), which the test environment inherits and may name.
HATCH_TEMPLATE = '[tool.hatch.envs.default.scripts]\ncheck = "pytest -q {args:tests/unit -x}"\n'


@pytest.mark.parametrize(
    ("script", "words", "posargs"),
    [
        ('"pytest {args:tests}"', ["tests"], ["tests"]),  # its default, recorded
        ('"pytest {args} --strict-markers"', ["--strict-markers"], []),  # nothing
        ('"check"', ["-q", "tests/unit", "-x"], ["tests/unit", "-x"]),  # the template's
        (  # a script naming another: its arguments follow that one's lines
            '["check --no-header", "- python -m pytest {args:docs}"]',
            ["-q", "tests/unit", "-x", "--no-header"], ["tests/unit", "-x"],
        ),
        ('["- python -m pytest {args:docs}"]', ["docs"], ["docs"]),  # run on whatever the exit
    ],
)
def test_a_hatch_scripts_args_default_is_what_runs_and_is_recorded(
    tmp_path: Path, script: str, words: list[str], posargs: list[str]
) -> None:
    """As `hatch run test` with no arguments: `{args:X}` is X and `{args}` nothing; the
    default is recorded as the invocation's `posargs`, as tox's `{posargs:X}` is."""
    config = f"{HATCH_TEMPLATE}[tool.hatch.envs.test.scripts]\ntest = {script}\n"
    root = project(tmp_path, {"pyproject.toml": PROJECT + config})

    source = hatch_reader.hatch_source(root, VERSION, dict(os.environ))

    assert source["detail"] == "hatch env test, script test"
    invocation = source["invocation"]
    assert invocation["words"] == words  # type: ignore[index]
    assert invocation.get("posargs", []) == posargs  # type: ignore[union-attr]


def test_a_script_line_hatch_left_unformatted_is_read_as_hatch_runs_it() -> None:
    assert hatch_reader.without_args("pytest {args:tests -x} --co {args}") == "pytest tests -x --co"
    assert hatch_reader.without_args("- pytest {args}") == "- pytest"
