"""An interpreter matrix (`--python 3.11,3.12,3.13` or `auto`): each interpreter is a lane of
one run with its own environments and shard runs; the verdict is per interpreter and overall.

Pure tests fold synthetic matrix runs; the end-to-end ones run real gates on the CPython
versions this machine has (pyenv's 3.9–3.13 here), skipped with the reason where it lacks them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from release_ledger.adapters import interpreters
from release_ledger.adapters.executors.env_installer import find_uv
from release_ledger.adapters.executors.port import per_interpreter
from release_ledger.domain import events as ev
from release_ledger.domain.errors import BadInput
from release_ledger.domain.rules import get_rule
from release_ledger.domain.run_state import fold, lane
from release_ledger.domain.verdict import Verdict, combine
from tests import gatekit
from tests.gatekit import events, run_ledger
from tests.gitrepo import commit, make_repo, tag
from tests.runbuilder import RunBuilder

MATRIX = ("3.11", "3.12", "3.13")


# --- reading what a project declares --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "label"),
    [("3.12", "3.12"), ("py312", "3.12"), ("python3.9", "3.9"), ("3.13.0", "3.13"),
     ("cp310", "3.10"), ("py3", None), ("lint", None), ("3", None)],
)  # fmt: skip
def test_a_version_is_read_from_the_names_projects_and_tools_give_it(
    text: str, label: str | None
) -> None:
    assert interpreters.label_of(text) == label


def test_declared_versions_come_from_classifiers_and_tox_within_requires_python() -> None:
    pyproject = {
        "project": {
            "requires-python": ">=3.10",
            "classifiers": [
                "Programming Language :: Python :: 3",
                "Programming Language :: Python :: 3.9",
                "Programming Language :: Python :: 3.12",
            ],
        }
    }

    found = interpreters.declared_labels(pyproject, ["py311-django42", "py39", "lint", "py313"])

    assert found == ["3.11", "3.12", "3.13"]  # 3.9 is outside requires-python


def test_requires_python_admits_a_version_line_when_any_of_its_releases_fits() -> None:
    assert interpreters.supports(">=3.8.1", "3.8")
    assert not interpreters.supports(">=3.8,<3.13", "3.13")
    assert interpreters.supports("", "3.13")
    assert interpreters.supports("not a specifier", "3.13")


# --- executors per interpreter ---------------------------------------------------------------


def test_an_executors_built_in_interpreter_follows_the_lane_and_a_template_is_filled() -> None:
    assert per_interpreter("python3", "3.12", "python3", "--remote-python") == "python3.12"
    assert per_interpreter("python:3.11-slim", "3.13", "python:3.11-slim", "--image") == (
        "python:3.13-slim"
    )
    assert per_interpreter("reg/py:{python}", "3.12", "python:3.11-slim", "--image") == (
        "reg/py:3.12"
    )
    assert per_interpreter("/opt/py/bin/python", "", "python3", "--remote-python") == (
        "/opt/py/bin/python"
    )


def test_a_fixed_interpreter_setting_is_refused_in_a_matrix_naming_the_template() -> None:
    with pytest.raises(BadInput, match=r"--image 'corp/py311:1' names one interpreter.*\{python\}"):
        per_interpreter("corp/py311:1", "3.12", "python:3.11-slim", "--image")


# --- the fold and the verdict ------------------------------------------------------------------


def matrix_run(outcomes: dict[str, str]) -> RunBuilder:
    """A run on `outcomes`' interpreters, one shard each; `outcomes[label]` is the head
    outcome of `tests/test_a.py::test_a` there (it passes at base everywhere)."""
    run = RunBuilder()
    started = run.events[0]
    assert isinstance(started, ev.RunStarted)
    recorded = [{"label": label, "path": "", "version": f"{label}.0"} for label in outcomes]
    run.events[0] = started.model_copy(update={"options": {"interpreters": recorded}})
    run.add(ev.TestFilesDiscovered, files=["tests/test_a.py"])
    for label, outcome in outcomes.items():
        planned = [ev.PlannedShard(id="s01", files=["tests/test_a.py"], rss_mb=50, seconds=1)]
        run.add(ev.ShardsPlanned, budget_mb=8192.0, count=1, shards=planned, interpreter=label)
        for revision, case in (("head", outcome), ("base", "passed")):
            run.attempt("s01", revision, ["tests/test_a.py"], {"tests/test_a.py::test_a": case},
                        interpreter=label)  # fmt: skip
        if outcome == "failed":
            for revision, case in (("head", "failed"), ("base", "passed")):
                run.add(ev.IsolationRecorded, file="tests/test_a.py", revision=revision,
                        exit_code=1 if case == "failed" else 0, interpreter=label,
                        report_hash=_report(run, case))  # fmt: skip
    return run


def _report(run: RunBuilder, outcome: str) -> str:
    from release_ledger.domain.chain import sha256_hex
    from tests.runbuilder import junit

    data = junit({"tests/test_a.py::test_a": outcome})
    run.artifacts[sha256_hex(data)] = data
    return sha256_hex(data)


def test_each_interpreter_is_folded_apart_and_the_run_fails_naming_the_one_that_broke() -> None:
    run = matrix_run({"3.11": "passed", "3.12": "passed", "3.13": "failed"})

    state = fold(run.events, run.artifacts)
    verdict = get_rule("default").decide(state)

    assert list(state.matrix) == ["3.11", "3.12", "3.13"]
    assert [len(lane(state, label).shards["s01"].attempts["head"]) for label in MATRIX] == [1, 1, 1]
    assert lane(state, "3.13").interpreter == "3.13"
    assert verdict.status == "failed"
    assert verdict.introduced == ("tests/test_a.py::test_a",)
    assert verdict.reasons == ("Python 3.13: 1 failures introduced at head",)
    assert [(label, v.status) for label, v in verdict.interpreters] == [
        ("3.11", "passed"), ("3.12", "passed"), ("3.13", "failed"),
    ]  # fmt: skip
    document = verdict.as_dict()
    assert document["interpreters"]["3.12"]["status"] == "passed"
    assert document["interpreters"]["3.13"]["introduced"] == ["tests/test_a.py::test_a"]


def test_an_interpreter_left_unmeasured_leaves_the_matrix_unmeasured_naming_its_shard() -> None:
    run = matrix_run({"3.11": "passed", "3.12": "passed"})
    planned = [ev.PlannedShard(id="s01", files=["tests/test_a.py"], rss_mb=50, seconds=1)]
    run.add(ev.ShardsPlanned, budget_mb=8192.0, count=1, interpreter="3.13", shards=planned)
    recorded = [{"label": label, "path": "", "version": ""} for label in MATRIX]
    started = run.events[0]
    assert isinstance(started, ev.RunStarted)
    run.events[0] = started.model_copy(update={"options": {"interpreters": recorded}})
    run.attempt("s01", "head", ["tests/test_a.py"], None, signal=9, interpreter="3.13")

    verdict = get_rule("default").decide(fold(run.events, run.artifacts))

    assert verdict.status == "unmeasured"
    assert [u.shard for u in verdict.unmeasured] == ["3.13/s01"]
    assert verdict.unmeasured[0].detail.startswith("Python 3.13")


def test_a_run_without_a_matrix_folds_and_serialises_as_before() -> None:
    run = RunBuilder().discover(["tests/test_a.py"]).plan({"s01": ["tests/test_a.py"]})
    run.attempt("s01", "head", ["tests/test_a.py"], {"tests/test_a.py::test_a": "passed"})
    run.attempt("s01", "base", ["tests/test_a.py"], {"tests/test_a.py::test_a": "passed"})

    state = fold(run.events, run.artifacts)
    verdict = get_rule("default").decide(state)

    assert state.matrix == {} and state.interpreter == ""
    assert verdict.status == "passed" and verdict.interpreters == ()
    assert "interpreters" not in verdict.as_dict()
    assert all('"interpreter"' not in ev.event_to_json(e) for e in run.events)


STATUSES = ("passed", "failed", "unmeasured", "awaiting", "parked")


@given(st.lists(st.sampled_from(STATUSES), min_size=1, max_size=4))
def test_the_matrix_is_as_bad_as_its_worst_interpreter(statuses: list[str]) -> None:
    lanes = [(f"3.{10 + i}", Verdict("default", 2, status)) for i, status in enumerate(statuses)]

    combined = combine(lanes, "default", 2)

    if "failed" in statuses:
        assert combined.status == "failed"
    elif "parked" in statuses:
        assert combined.status == "parked"
    elif "awaiting" in statuses:
        assert combined.status == "awaiting"
    elif "unmeasured" in statuses:
        assert combined.status == "unmeasured"
    else:
        assert combined.status == "passed"
    assert [label for label, _ in combined.interpreters] == [label for label, _ in lanes]


# --- real gates on this machine's interpreters --------------------------------------------


def _have(*labels: str) -> dict[str, interpreters.Interpreter]:
    found = interpreters.available(find_uv(), wanted=labels)
    missing = [label for label in labels if label not in found]
    if missing:
        pytest.skip(f"CPython {', '.join(missing)} not on this machine")
    return found


PYPROJECT = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    '[project]\nname = "mpkg"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
    'classifiers = ["Programming Language :: Python :: 3.11",'
    ' "Programming Language :: Python :: 3.12", "Programming Language :: Python :: 3.13"]\n'
    '[project.optional-dependencies]\ntest = ["pytest"]\n'
)
TESTS = (
    "from mpkg import answer\n\n"
    "def test_answer():\n    assert answer() == 42\n\n"
    "def test_other():\n    assert True\n"
)


def _matrix_repo(tmp_path: Path) -> Path:
    """A package whose head breaks on Python 3.13 only."""
    repo = make_repo(tmp_path, {
        "pyproject.toml": PYPROJECT,
        "mpkg/__init__.py": "def answer():\n    return 42\n",
        "tests/test_a.py": TESTS,
    })  # fmt: skip
    tag(repo, "v1")
    commit(repo, {"mpkg/__init__.py": (
        "import sys\n\ndef answer():\n    return 41 if sys.version_info >= (3, 13) else 42\n"
    )})  # fmt: skip
    return repo


def _document(result: gatekit.Result) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.mark.slow
def test_a_head_that_breaks_on_one_interpreter_fails_the_matrix_naming_it(tmp_path: Path) -> None:
    found = _have(*MATRIX)
    repo = _matrix_repo(tmp_path)

    result = gatekit.gate(tmp_path, repo, "--python", ",".join(MATRIX), "--no-release-builds")

    assert result.code == 1, (result.stdout, result.stderr)
    document = _document(result)
    assert document["status"] == "failed"
    assert document["introduced"] == ["tests/test_a.py::test_answer"]
    assert document["reasons"] == ["Python 3.13: 1 failures introduced at head"]
    assert {k: v["status"] for k, v in document["interpreters"].items()} == {
        "3.11": "passed", "3.12": "passed", "3.13": "failed",
    }  # fmt: skip
    run_id = document["run_id"]
    recorded = events(tmp_path, run_id)
    started = recorded[0]
    assert [i["label"] for i in started["options"]["interpreters"]] == list(MATRIX)
    prepared = [e for e in recorded if e["kind"] == "EnvironmentPrepared"]
    assert sorted((e["interpreter"], e["revision"], e["python_version"]) for e in prepared) == (
        sorted((label, rev, found[label].version) for label in MATRIX for rev in ("head", "base"))
    )
    attempts = [e for e in recorded if e["kind"] == "ShardAttemptRecorded"]
    assert {e["interpreter"] for e in attempts} == set(MATRIX)
    # Every command names the matrix.
    shown = run_ledger(tmp_path, "show", run_id).stdout
    assert "Python 3.11: passed" in shown and "Python 3.13: failed" in shown
    assert "Python 3.13: s01 attempt 1 at head: exit 1" in shown
    approved = run_ledger(tmp_path, "approve", run_id).stdout
    assert "failed (3.11 passed, 3.12 passed, 3.13 failed)" in approved
    versions = ", ".join(found[label].version for label in MATRIX)
    assert f"python {versions} against >=3.11" in approved
    html = tmp_path / "gate.html"
    assert run_ledger(tmp_path, "report", run_id, "--html", str(html)).code == 0
    assert "<h2>Interpreters</h2>" in html.read_text()
    assert run_ledger(tmp_path, "verify", run_id).code == 0
    rebuilt = run_ledger(tmp_path, "rebuild", "--check")
    assert rebuilt.code == 0, rebuilt.stderr

    # A second gate of the same pair reuses each interpreter's base results, never another's.
    again = gatekit.gate(tmp_path, repo, "--python", ",".join(MATRIX), "--no-release-builds")
    assert again.code == 1
    second = events(tmp_path, _document(again)["run_id"])
    reused = [e for e in second if e["kind"] == "BaselineReused"]
    assert sorted(e["interpreter"] for e in reused) == list(MATRIX)
    base_runs = [
        e for e in second if e["kind"] == "ShardAttemptRecorded" and e["revision"] == "base"
    ]
    assert base_runs == []


@pytest.mark.slow
def test_auto_takes_the_versions_the_project_declares_that_this_machine_has(
    tmp_path: Path,
) -> None:
    _have("3.11", "3.12")
    from release_ledger.ledger.settings import interpreters_for

    repo = _matrix_repo(tmp_path)
    chosen = [i.label for i in interpreters_for(repo, "HEAD", "auto")]

    available = interpreters.available(find_uv(), wanted=MATRIX)
    assert chosen == [label for label in MATRIX if label in available]


def test_an_interpreter_that_is_not_on_the_machine_is_exit_2_naming_those_found(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": "def test_b():\n    pass\n"})

    result = gatekit.gate(tmp_path, repo, "--python", "3.11,2.1", "--no-release-builds")

    assert result.code == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("ledger: error: --python 2.1: not on this machine (found: ")
    assert "3.11" in lines[0] or "none" in lines[0]
    listed = run_ledger(tmp_path, "runs", "--json")
    assert listed.code != 0 or json.loads(listed.stdout) == []


def test_auto_for_a_project_that_names_no_version_is_exit_2(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": "def test_b():\n    pass\n"})

    result = gatekit.gate(tmp_path, repo, "--python", "auto", "--no-release-builds")

    assert result.code == 2
    assert "--python auto: the project names no Python version" in result.stderr


@pytest.mark.slow
def test_an_interrupted_matrix_resumes_with_the_interpreters_it_recorded(tmp_path: Path) -> None:
    _have("3.11", "3.12")
    from release_ledger.ledger.bootstrap import gate as wiring
    from release_ledger.ledger.bootstrap import opened
    from release_ledger.ledger.gate import GateProcess, start
    from release_ledger.ledger.settings import gate_options

    repo = _matrix_repo(tmp_path)
    options = gate_options({"repo": str(repo), "base": "v1", "python": "3.11,3.12",
                            "release_builds": False})  # fmt: skip
    url = gatekit.ledger_url(tmp_path)
    with opened(url) as ledger:
        run_id = start(ledger, options)
        lanes = wiring._lanes(options, ledger, ledger.started(run_id).base)
        try:  # only the first interpreter's lane runs before the "interruption"
            GateProcess(ledger, run_id, lanes[0].executor, interpreter="3.11", finish=False).drive()
        finally:
            wiring._close(lanes)
        document = wiring.resume_gate(ledger, run_id, gatekit_observer())

    assert document["status"] == "passed"
    assert list(document["interpreters"]) == ["3.11", "3.12"]
    recorded = events(tmp_path, run_id)
    heads = [e["interpreter"] for e in recorded
             if e["kind"] == "ShardAttemptRecorded" and e["revision"] == "head"]  # fmt: skip
    assert heads == ["3.11", "3.12"]  # the first lane was not run again


def gatekit_observer() -> Any:
    from release_ledger.ledger.gate import QuietObserver

    return QuietObserver()


@pytest.mark.slow
@pytest.mark.parametrize("label", ["3.8", "3.9"])
def test_the_gates_plugin_writes_its_report_on_the_oldest_interpreters_a_matrix_runs(
    tmp_path: Path, label: str
) -> None:
    """The plugin runs inside every interpreter of the matrix, not only the gate's own."""
    import subprocess

    from release_ledger.adapters.pytest_plugin import PLUGIN_DIR, PLUGIN_MODULE

    found = _have(label)[label]
    uv = find_uv()
    if uv is None:
        pytest.skip("uv is needed to make the interpreter's venv")
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", found.path, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    installed = subprocess.run([uv, "pip", "install", "-q", "--python", python, "pytest"],
                               capture_output=True, text=True, check=False)  # fmt: skip
    if installed.returncode != 0:
        pytest.skip(f"pytest could not be installed for Python {label}: {installed.stderr[-200:]}")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(
        "import pytest\n\ndef test_a():\n    pass\n\n@pytest.mark.skip(reason='x')\n"
        "def test_b():\n    pass\n\n@pytest.mark.xfail(reason='y')\ndef test_c():\n    assert 0\n"
    )
    junit = tmp_path / "junit.xml"

    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", PLUGIN_MODULE, f"--junitxml={junit}",
         "tests/test_a.py"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PLUGIN_DIR)},
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert "release-ledger.complete" in junit.read_text()
