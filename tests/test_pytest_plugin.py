"""The gate's pytest plugin, run for real: small suites in temporary folders, run by pytest in a
subprocess with the gate's default command, and read back as the gate reads them.

Set `LEDGER_TEST_PYTEST8_PYTHON` to an interpreter with pytest 8 (and pytest-subtests) to run
every test here under pytest 8 as well; pytest 9 is the one installed with the gate.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from release_ledger.adapters.pytest_plugin import PLUGIN_DIR, PLUGIN_MODULE, with_plugin_path
from release_ledger.domain.assessment import assess, plugin_running_file
from release_ledger.domain.execution import DEFAULT_PYTEST_COMMAND, expand_command
from release_ledger.domain.junit import Rejection, Report, read_report, test_id

INTERPRETERS = [pytest.param(sys.executable, id="installed")]
if os.environ.get("LEDGER_TEST_PYTEST8_PYTHON"):
    INTERPRETERS.append(pytest.param(os.environ["LEDGER_TEST_PYTEST8_PYTHON"], id="pytest8"))


@pytest.fixture(params=INTERPRETERS)
def python(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@dataclass
class Ran:
    exit_code: int | None
    signal: int | None
    report: bytes | None
    log: bytes


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def run_pytest(python: str, root: Path, files: list[str], *extra: str) -> Ran:
    junit = root / "out" / "junit.xml"
    argv = expand_command(DEFAULT_PYTEST_COMMAND, python=python, junit=str(junit), files=files)
    env = with_plugin_path({k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run(
        [*argv, *extra], cwd=root, env=env, capture_output=True, timeout=120, check=False
    )
    code = proc.returncode
    return Ran(
        code if code >= 0 else None,
        -code if code < 0 else None,
        junit.read_bytes() if junit.is_file() else None,
        proc.stdout + proc.stderr,
    )


def read(ran: Ran, files: list[str]) -> Report:
    assert ran.report is not None, ran.log.decode()
    result = read_report(ran.report, files)
    assert isinstance(result, Report), f"{result}\n{ran.log.decode()}"
    return result


def outcomes(report: Report) -> dict[str, str]:
    return {test_id(case): case.outcome for case in report.cases}


def measured(ran: Ran, files: list[str]) -> bool:
    return assess(
        exit_code=ran.exit_code, signal=ran.signal, timed_out=False, oom=False,
        infrastructure_failure=None, report=ran.report, log_tail=ran.log, files=files,
    ).measured  # fmt: skip


def test_the_plugin_module_is_self_contained() -> None:
    """It must import in any environment with pytest: stdlib and pytest only."""
    source = (PLUGIN_DIR / f"{PLUGIN_MODULE}.py").read_text()
    imports = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imports <= {"__future__", "contextlib", "json", "os", "re", "signal", "sys", "tempfile",
                       "threading", "time", "xml",
                       "typing", "pytest", "resource"}, imports  # fmt: skip
    assert f"-p {PLUGIN_MODULE}" in " ".join(DEFAULT_PYTEST_COMMAND)


def test_pods_are_sent_the_plugin_and_the_command_that_loads_it() -> None:
    import json

    from release_ledger.adapters.executors.kubernetes.jobs import MemberSettings, job_manifest
    from release_ledger.domain.execution import ShardRun

    run = ShardRun(run_id="r", shard_id="s1", attempt=1, revision="head", commit="a" * 40,
                   files=("tests/test_a.py",), command=DEFAULT_PYTEST_COMMAND)  # fmt: skip
    manifest = job_manifest(run, name="j", source="file:///x", settings=MemberSettings(),
                            git_image="git", reservation_mb=4096)  # fmt: skip
    runner = manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    spec = json.loads(runner[3])
    assert spec["plugin_source"] == (PLUGIN_DIR / f"{PLUGIN_MODULE}.py").read_text()
    assert spec["plugin_module"] == PLUGIN_MODULE
    assert runner[4:].count(PLUGIN_MODULE) == 1  # `-p release_ledger_pytest`


def test_with_plugin_path_puts_the_plugin_folder_first_once() -> None:
    env = with_plugin_path({"PYTHONPATH": f"/x{os.pathsep}{PLUGIN_DIR}", "HOME": "/h"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(PLUGIN_DIR), "/x"]
    assert env["HOME"] == "/h"
    assert with_plugin_path({})["PYTHONPATH"] == str(PLUGIN_DIR)


GRAPH = """
class TestGraph:
    def test_add(self):
        assert True

    def test_remove(self):
        assert True
"""
MULTIGRAPH = """
from tests.test_graph import TestGraph


class TestMultiGraph(TestGraph):
    def test_multi(self):
        assert True
"""


def test_inherited_test_methods_belong_to_the_file_that_collected_them(
    python: str, tmp_path: Path
) -> None:
    write(tmp_path, {"tests/__init__.py": "", "tests/test_graph.py": GRAPH,
                     "tests/test_multigraph.py": MULTIGRAPH})  # fmt: skip
    files = ["tests/test_multigraph.py"]
    ran = run_pytest(python, tmp_path, files)
    assert ran.exit_code == 0, ran.log.decode()
    report = read(ran, files)  # only the collecting file is expected: nothing unexpected
    assert report.plugin and report.files == {"tests/test_multigraph.py"}
    assert "tests/test_multigraph.py::TestMultiGraph::test_add" in outcomes(report)
    assert set(outcomes(report).values()) == {"passed"}
    assert measured(ran, files)


def test_plain_pytest_junit_of_inherited_tests_names_the_collecting_file_as_culprit(
    tmp_path: Path,
) -> None:
    """Without the plugin, pytest names the defining file: rejected, and the rejection points
    at the file of the shard that collected the case (found from the classname)."""
    write(tmp_path, {"tests/__init__.py": "", "tests/test_graph.py": GRAPH,
                     "tests/test_multigraph.py": MULTIGRAPH})  # fmt: skip
    junit = tmp_path / "plain.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
         f"--junitxml={junit}", "tests/test_multigraph.py"],
        cwd=tmp_path, capture_output=True, check=False, timeout=120,
    )  # fmt: skip
    result = read_report(junit.read_bytes(), ["tests/test_multigraph.py"])
    assert isinstance(result, Rejection) and result.code == "unexpected-file"
    assert result.files == ("tests/test_multigraph.py",)


UNITTEST_SUBTESTS = """
import unittest


class T(unittest.TestCase):
    def test_sub(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertNotEqual(i, 1)

    def test_sub_ok(self):
        for i in range(3):
            with self.subTest("msg", i=i):
                pass

    def test_repeated(self):
        for _ in range(2):
            with self.subTest():
                pass

    def test_objects(self):
        for it in (iter(range(2)), iter(range(3))):
            with self.subTest(iterable=it):
                pass
"""


def test_unittest_subtests_are_test_cases_of_their_own_and_counts_add_up(
    python: str, tmp_path: Path
) -> None:
    write(tmp_path, {"tests/test_sub.py": UNITTEST_SUBTESTS})
    files = ["tests/test_sub.py"]
    ran = run_pytest(python, tmp_path, files)
    assert ran.exit_code == 1, ran.log.decode()
    report = read(ran, files)
    seen = outcomes(report)
    failed = sorted(t for t, o in seen.items() if o == "failed")
    assert "tests/test_sub.py::T::test_sub (i=1)" in failed
    assert "tests/test_sub.py::T::test_sub (i=0)" not in failed
    if report.subtests:  # pytest 9, or pytest 8 with pytest-subtests
        assert seen["tests/test_sub.py::T::test_sub (i=0)"] == "passed"
        assert seen["tests/test_sub.py::T::test_sub_ok [msg] (i=2)"] == "passed"
        assert seen["tests/test_sub.py::T::test_repeated (<subtest>) #2"] == "passed"
        # No memory address in an id (it would differ between base and head):
        assert seen["tests/test_sub.py::T::test_objects (iterable=<range_iterator object>) #2"]
        assert report.subtests == 10
        assert report.tests == 4 + 10
    assert measured(ran, files), "the report agrees with pytest's exit code and summary"


SUBTESTS_FIXTURE = """
def test_fixture(subtests):
    for i in range(3):
        with subtests.test(msg="m", i=i):
            assert i != 2


def test_fixture_ok(subtests):
    for i in range(2):
        with subtests.test(i=i):
            pass
"""


def _has_subtests_fixture(python: str) -> bool:
    probe = (
        "import pytest, importlib.util, sys;"
        "ok = int(pytest.__version__.split('.')[0]) >= 9 or "
        "importlib.util.find_spec('pytest_subtests') is not None;"
        "sys.exit(0 if ok else 1)"
    )
    return subprocess.run([python, "-c", probe], check=False).returncode == 0


def test_the_subtests_fixture_reports_each_subtest_under_its_parent(
    python: str, tmp_path: Path
) -> None:
    if not _has_subtests_fixture(python):
        pytest.skip("no subtests fixture here: pytest < 9 without pytest-subtests")
    write(tmp_path, {"tests/test_fixture.py": SUBTESTS_FIXTURE})
    files = ["tests/test_fixture.py"]
    ran = run_pytest(python, tmp_path, files)
    assert ran.exit_code == 1, ran.log.decode()
    report = read(ran, files)
    seen = outcomes(report)
    assert seen["tests/test_fixture.py::test_fixture [m] (i=2)"] == "failed"
    assert seen["tests/test_fixture.py::test_fixture [m] (i=0)"] == "passed"
    assert seen["tests/test_fixture.py::test_fixture_ok (i=1)"] == "passed"
    assert report.subtests == 5
    assert measured(ran, files)


def test_per_file_markers_hold_seconds_and_memory(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n",
                     "tests/test_b.py": "def test_b():\n    pass\n"})  # fmt: skip
    files = ["tests/test_a.py", "tests/test_b.py"]
    ran = run_pytest(sys.executable, tmp_path, files)
    report = ran.report or b""
    assert report.count(b'name="release-ledger.file-start" value="rss_kb=') == 2
    assert report.count(b'name="release-ledger.file-end" value="seconds=') == 2
    # The completion marker, then what finishing the session took, close the report.
    assert re.search(
        rb'<properties><property name="release-ledger.complete" value="2" />'
        rb'<property name="release-ledger.finish" value="kb=\d+" /></properties></testsuites>$',
        report.rstrip(),
    )
    assert re.search(rb'name="release-ledger.baseline" value="rss_kb=\d+"', report)
    assert report.count(b"collect_kb=") == 2
    log = ran.log.decode()
    assert (
        log.index("release-ledger: start tests/test_a.py")
        < log.index("release-ledger: end tests/test_a.py")
        < log.index("release-ledger: start tests/test_b.py")
    )
    assert plugin_running_file(log, files) is None  # every file ended


KILLER = "import os, signal\n\n\ndef test_dies():\n    os.kill(os.getpid(), signal.SIGKILL)\n"


def test_a_shard_killed_mid_file_names_the_running_file(python: str, tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n",
                     "tests/test_b.py": KILLER,
                     "tests/test_c.py": "def test_c():\n    pass\n"})  # fmt: skip
    files = ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"]
    ran = run_pytest(python, tmp_path, files)
    assert ran.signal == signal.SIGKILL
    assert ran.report is None  # written only at the end, atomically: never half a report
    assert plugin_running_file(ran.log.decode(), files) == "tests/test_b.py"


def test_a_session_stopped_early_is_rejected_as_truncated(python: str, tmp_path: Path) -> None:
    write(
        tmp_path, {"tests/test_a.py": "def test_a():\n    assert 0\n\n\ndef test_b():\n    pass\n"}
    )
    files = ["tests/test_a.py"]
    ran = run_pytest(python, tmp_path, files, "-x")
    assert ran.exit_code == 1 and ran.report is not None
    result = read_report(ran.report, files)
    assert isinstance(result, Rejection) and result.code == "truncated", result
    assert "stopped early" in result.message


def test_a_plugin_report_without_its_completion_marker_is_truncated(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    files = ["tests/test_a.py"]
    ran = run_pytest(sys.executable, tmp_path, files)
    assert ran.report is not None and isinstance(read_report(ran.report, files), Report)
    well_formed_but_cut = re.sub(
        rb'<properties><property name="release-ledger.complete" value="1" />.*?</properties>',
        b"",
        ran.report,
    )
    assert well_formed_but_cut != ran.report
    result = read_report(well_formed_but_cut, files)
    assert isinstance(result, Rejection) and result.code == "truncated"


def test_collection_errors_and_module_skips_are_cases_of_their_file(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_broken.py": "import nonexistent_module_xyz\n",
                     "tests/test_opt.py": "import pytest\n\npytest.importorskip('nope_xyz')\n",
                     "tests/test_ok.py": "def test_ok():\n    pass\n"})  # fmt: skip
    files = ["tests/test_broken.py", "tests/test_ok.py", "tests/test_opt.py"]
    ran = run_pytest(sys.executable, tmp_path, files)
    report = read(ran, files)
    seen = outcomes(report)
    assert seen["tests/test_broken.py::tests.test_broken"] == "error"
    assert seen["tests/test_opt.py::tests.test_opt"] == "skipped"
    assert seen["tests/test_ok.py::test_ok"] == "passed"


def test_the_running_file_is_named_only_when_exactly_one_file_was_running() -> None:
    files = ["tests/test_a.py", "tests/test_b.py"]
    sequential = "release-ledger: start tests/test_a.py\nrelease-ledger: end tests/test_a.py\n"
    assert plugin_running_file(sequential + "release-ledger: start tests/test_b.py\n", files) == (
        "tests/test_b.py"
    )
    # pytest-xdist: files run at once on several workers; the one still running is named...
    parallel = "release-ledger: start tests/test_a.py\nrelease-ledger: start tests/test_b.py\n"
    assert plugin_running_file(parallel + "release-ledger: end tests/test_b.py\n", files) == (
        "tests/test_a.py"
    )
    # ...but of two running when the shard died, neither is known to be the culprit.
    assert plugin_running_file(parallel, files) is None
    assert plugin_running_file("release-ledger: start elsewhere.py\n", files) is None


XDIST_FILES = {
    "tests/test_a.py": "import time\n\n\ndef test_a1():\n    time.sleep(0.2)\n\n\n"
    "def test_a2():\n    pass\n",
    "tests/test_b.py": "import pytest\n\n\n@pytest.mark.parametrize('n', range(4))\n"
    "def test_b(n):\n    assert n != 2\n",
    "tests/test_c.py": "import os\n\n\ndef test_c1():\n    pass\n\n\n"
    "def test_dies():\n    os._exit(3)\n\n\ndef test_c3():\n    pass\n",
}


# `--dist loadfile` is not given a crashing worker: xdist 3.8's own scheduler fails then
# (INTERNALERROR, KeyError in loadscope's `_assign_work_unit`), with or without the plugin.
@pytest.mark.parametrize("dist", ["load", "loadfile"])
def test_under_xdist_workers_mark_their_files_and_the_report_is_complete(
    tmp_path: Path, dist: str
) -> None:
    """`-n 2` (as a project's own addopts may ask): the controller writes the report from the
    workers' marks: every file has its start and end markers in the log and in the report
    (memory from the worker, seconds summed over the workers), outcomes are pytest's, and a
    test whose worker crashed is a failed case of its file, counted as finished."""
    xdist = pytest.importorskip("xdist")
    site = str(Path(xdist.__file__).resolve().parent.parent)  # xdist and execnet live here
    crash = dist == "load"
    write(tmp_path, XDIST_FILES)
    if not crash:
        quiet = XDIST_FILES["tests/test_c.py"].replace("os._exit(3)", "pass")
        write(tmp_path, {"tests/test_c.py": quiet})
    files = sorted(XDIST_FILES)
    junit = tmp_path / "out" / "junit.xml"
    argv = expand_command(DEFAULT_PYTEST_COMMAND, python=sys.executable, junit=str(junit),
                          files=files)  # fmt: skip
    env = with_plugin_path({k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    env["PYTHONPATH"] += os.pathsep + site
    proc = subprocess.run(
        [*argv, "-n", "2", "--dist", dist], cwd=tmp_path, env=env, capture_output=True,
        timeout=120, check=False,
    )  # fmt: skip
    ran = Ran(proc.returncode, None, junit.read_bytes() if junit.is_file() else None,
              proc.stdout + proc.stderr)  # fmt: skip
    assert b"gw1" in ran.log or b"gw0" in ran.log, ran.log.decode()  # xdist did run
    report = read(ran, files)
    assert outcomes(report) == {
        "tests/test_a.py::test_a1": "passed",
        "tests/test_a.py::test_a2": "passed",
        **{f"tests/test_b.py::test_b[{n}]": "failed" if n == 2 else "passed" for n in range(4)},
        "tests/test_c.py::test_c1": "passed",
        "tests/test_c.py::test_dies": "failed" if crash else "passed",
        "tests/test_c.py::test_c3": "passed",
    }
    data = ran.report or b""
    assert data.count(b'name="release-ledger.file-start" value="rss_kb=') == 3
    assert data.count(b'name="release-ledger.file-end" value="seconds=') == 3
    assert b'name="release-ledger.complete" value="9"' in data
    suite_a = data[data.index(b'<testsuite name="tests/test_a.py"') :]
    seconds = float(suite_a.split(b'value="seconds=', 1)[1].split(b" ", 1)[0])
    assert seconds >= 0.2
    rss = int(suite_a.split(b"rss_kb=", 1)[1].split(b" ", 1)[0])
    assert rss > 0
    log = ran.log.decode()
    for file in files:
        assert log.index(f"release-ledger: start {file}") < log.index(f"release-ledger: end {file}")
    assert plugin_running_file(log, files) is None  # every file ended
    assert measured(ran, files)


def test_under_xdist_the_files_that_collect_nothing_are_declared_empty(tmp_path: Path) -> None:
    """The controller collects nothing itself: it names the given files no worker collected
    an item of (a helper module, a `test*.txt` without examples) from the workers' ids, so
    the report accounts for every file and is not rejected as incomplete."""
    xdist = pytest.importorskip("xdist")
    site = str(Path(xdist.__file__).resolve().parent.parent)
    write(tmp_path, {
        "tests/test_a.py": "def test_a():\n    pass\n",
        "tests/test_helpers.py": "def helper():\n    return 1\n",
        "requirements/test.txt": "pytest\n",
    })  # fmt: skip
    files = ["requirements/test.txt", "tests/test_a.py", "tests/test_helpers.py"]
    junit = tmp_path / "out" / "junit.xml"
    argv = expand_command(DEFAULT_PYTEST_COMMAND, python=sys.executable, junit=str(junit),
                          files=files)  # fmt: skip
    env = with_plugin_path({k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    env["PYTHONPATH"] += os.pathsep + site
    proc = subprocess.run([*argv, "-n", "2"], cwd=tmp_path, env=env, capture_output=True,
                          timeout=120, check=False)  # fmt: skip
    ran = Ran(proc.returncode, None, junit.read_bytes() if junit.is_file() else None,
              proc.stdout + proc.stderr)  # fmt: skip
    assert b"2 workers" in ran.log, ran.log.decode()  # xdist did run
    report = read(ran, files)
    assert outcomes(report) == {"tests/test_a.py::test_a": "passed"}
    assert report.empty_files == frozenset({"requirements/test.txt", "tests/test_helpers.py"})
