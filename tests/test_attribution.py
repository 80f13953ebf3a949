"""Which change introduced a failure (issue 25, part 7): head's introduced failures are run
again at head with base's package set; one that passes there was introduced by the dependency
change, one that still fails by the code. The default rule fails on both; `code-only` reports
the first without failing on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.attribution import CODE, DEPENDENCIES, UNKNOWN, causes, moves_text
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.rules import get_rule
from release_ledger.domain.run_state import fold
from release_ledger.ledger.steps.attribute import package_moves
from release_ledger.projections.next_step import next_step, pending_attribution
from release_ledger.projections.timeline import describe
from tests import gatekit
from tests.gitrepo import commit, make_repo, tag
from tests.runbuilder import RunBuilder, junit

BASE_PACKAGES = "iniconfig==1.1.1\npytest==8.3.0\n"
HEAD_PACKAGES = "iniconfig==2.1.0\npytest==8.3.0\nnewdep==1.0\n"
FILES = ["tests/test_code.py", "tests/test_dep.py"]
CODE_TEST, DEP_TEST = "tests/test_code.py::test_code", "tests/test_dep.py::test_dep"


def _run(
    rule: str = "default", *, head_packages: str = HEAD_PACKAGES, env: str = "auto",
    code_fails: bool = True,
) -> RunBuilder:  # fmt: skip
    run = RunBuilder(rule=rule)
    started = run.events[0]
    assert isinstance(started, ev.RunStarted)
    run.events[0] = started.model_copy(update={"options": {"attribution": True, "env": env}})
    run.environment("head", head_packages).environment("base", BASE_PACKAGES)
    run.discover(FILES).plan({"s1": FILES})
    head = {DEP_TEST: "failed", CODE_TEST: "failed" if code_fails else "passed"}
    run.attempt("s1", "head", FILES, head)
    run.attempt("s1", "base", FILES, {DEP_TEST: "passed", CODE_TEST: "passed"})
    for file, test in ((FILES[0], CODE_TEST), (FILES[1], DEP_TEST)):
        run.isolation(file, "head", {test: head[test]})
        run.isolation(file, "base", {test: "passed"})
    return run


def _attributed(run: RunBuilder, cases: dict[str, str] | None, **fields: Any) -> RunBuilder:
    report_hash = None
    if cases is not None:
        data = junit(cases)
        report_hash = sha256_hex(data)
        run.artifacts[report_hash] = data
    tests = sorted(cases or {CODE_TEST: "", DEP_TEST: ""})
    run.add(
        ev.AttributionRecorded,
        tests=tests,
        files=sorted({t.split("::")[0] for t in tests}),
        moved=package_moves(BASE_PACKAGES, HEAD_PACKAGES),
        exit_code=1 if cases and "failed" in cases.values() else 0,
        report_hash=report_hash,
        **fields,
    )
    return run


def _state(run: RunBuilder) -> Any:
    return fold(run.events, run.artifacts)


def test_introduced_failures_are_attributed_once_the_package_sets_differ() -> None:
    state = _state(_run())
    assert pending_attribution(state) == (CODE_TEST, DEP_TEST)
    step = next_step(state, rounds=2)
    assert step.kind == "attribute" and step.tests == (CODE_TEST, DEP_TEST)
    assert step.files == tuple(FILES)
    done = _state(_attributed(_run(), {CODE_TEST: "failed", DEP_TEST: "passed"}))
    assert pending_attribution(done) == ()  # recorded once, never redone on resume


@pytest.mark.parametrize(
    ("head_packages", "env", "attribution"),
    [(BASE_PACKAGES, "auto", True), (HEAD_PACKAGES, "none", True), (HEAD_PACKAGES, "auto", False)],
    ids=["same-packages", "env-none", "run-from-before"],
)
def test_nothing_is_attributed_without_two_package_sets_the_gate_made(
    head_packages: str, env: str, attribution: bool
) -> None:
    run = _run(head_packages=head_packages, env=env)
    if not attribution:
        started = run.events[0]
        run.events[0] = started.model_copy(update={"options": {"env": env}})
    assert pending_attribution(_state(run)) == ()


def test_a_failure_that_passes_with_bases_packages_is_the_dependency_changes() -> None:
    state = _state(_attributed(_run(), {CODE_TEST: "failed", DEP_TEST: "passed"}))
    found = causes(state)
    assert {t: c.cause for t, c in found.items()} == {CODE_TEST: CODE, DEP_TEST: DEPENDENCIES}

    default = get_rule("default").decide(state)
    assert default.status == "failed"
    assert default.introduced == (CODE_TEST, DEP_TEST)  # the default rule fails on both
    assert default.causes == {CODE_TEST: CODE, DEP_TEST: DEPENDENCIES}
    assert "iniconfig 1.1.1 → 2.1.0" in default.moved
    assert any("1 by the dependency change: " in r for r in default.reasons)
    document = default.as_dict()
    assert document["attribution"]["causes"][DEP_TEST] == "dependencies"

    lenient = get_rule("code-only").decide(state)
    assert lenient.status == "failed" and lenient.introduced == (CODE_TEST,)
    assert lenient.introduced_by_dependencies == (DEP_TEST,)


def test_the_approval_report_and_the_html_page_name_the_dependency_change() -> None:
    from release_ledger.projections.checks import gate_value
    from release_ledger.projections.html_report import classification_html

    state = _state(_attributed(_run(), {CODE_TEST: "failed", DEP_TEST: "passed"}))
    verdict = get_rule("default").decide(state)
    assert "1 introduced by the dependency change (iniconfig 1.1.1 → 2.1.0" in gate_value(verdict)
    html = classification_html(verdict)
    assert "introduced by" in html and "the dependency change" in html and DEP_TEST in html


def test_code_only_passes_a_head_broken_by_its_dependencies_alone() -> None:
    run = _attributed(_run(code_fails=False), {DEP_TEST: "passed"})
    state = _state(run)
    assert get_rule("default").decide(state).status == "failed"
    lenient = get_rule("code-only").decide(state)
    assert lenient.status == "passed" and lenient.introduced == ()
    assert lenient.introduced_by_dependencies == (DEP_TEST,)


def test_bases_packages_that_do_not_install_leave_the_cause_unknown() -> None:
    error = "head requires iniconfig>=2 but base's set pins iniconfig==1.1.1"
    state = _state(_attributed(_run(), None, environment_error=error))
    found = causes(state)
    assert {c.cause for c in found.values()} == {UNKNOWN}
    assert error in found[DEP_TEST].why
    assert get_rule("code-only").decide(state).introduced == (CODE_TEST, DEP_TEST)


def test_a_runs_verdict_document_is_unchanged_without_an_attribution() -> None:
    document = get_rule("default").decide(_state(_run())).as_dict()
    assert "attribution" not in document and "introduced_by_dependencies" not in document


def test_the_timeline_names_each_failures_cause_and_what_moved() -> None:
    run = _attributed(_run(), {CODE_TEST: "failed", DEP_TEST: "passed"})
    text = describe(run.events[-1], run.artifacts)
    assert "iniconfig 1.1.1 → 2.1.0" in text and "newdep (none) → 1.0" in text
    assert f"{DEP_TEST} passes (dependencies)" in text and f"{CODE_TEST} fails (code)" in text


def test_package_moves_name_changed_added_and_removed_packages() -> None:
    moved = package_moves("a==1\nb==2\nc==3\n", "a==1\nb==3\nd==4\n")
    assert moves_text(moved) == ["b 2 → 3", "c 3 → (none)", "d (none) → 4"]


def _project(version: str, dependency: str) -> str:
    return (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "shiny"\nversion = "{version}"\ndependencies = ["{dependency}"]\n'
        '[project.optional-dependencies]\ntest = ["pytest"]\n'
    )


@pytest.mark.slow
def test_a_gate_names_the_dependency_change_and_the_code_change_apart(tmp_path: Path) -> None:
    """A real gate: head loosens `iniconfig<2` to `iniconfig` (2.x resolves) and breaks its
    own code; one test checks iniconfig's version, one the code."""
    repo = make_repo(tmp_path, {
        "pyproject.toml": _project("1.0", "iniconfig<2"),
        "src/shiny/__init__.py": "VALUE = 1\n",
        "tests/test_code.py": "import shiny\n\n\ndef test_code():\n    assert shiny.VALUE == 1\n",
        "tests/test_dep.py": (
            "from importlib.metadata import version\n\n\n"
            "def test_dep():\n    assert version('iniconfig').startswith('1.')\n"
        ),
    })  # fmt: skip
    tag(repo, "v1")
    commit(repo, {"pyproject.toml": _project("1.1", "iniconfig"),
                  "src/shiny/__init__.py": "VALUE = 2\n"})  # fmt: skip

    result = gatekit.gate(tmp_path, repo, "--no-release-builds")

    assert result.code == 1, result.stderr
    document = result.document
    assert document["introduced"] == [CODE_TEST, DEP_TEST]
    assert document["attribution"]["causes"] == {CODE_TEST: CODE, DEP_TEST: DEPENDENCIES}
    assert any(m.startswith("iniconfig 1.") for m in document["attribution"]["moved"])
    recorded = [e for e in gatekit.events(tmp_path, document["run_id"])
                if e["kind"] == "AttributionRecorded"]  # fmt: skip
    assert len(recorded) == 1 and recorded[0]["environment_error"] == ""

    run_id = document["run_id"]
    replayed = gatekit.run_ledger(tmp_path, "verdict", run_id, "--rule", "code-only", "--json")
    assert replayed.code == 1
    assert replayed.document["introduced"] == [CODE_TEST]
    assert replayed.document["introduced_by_dependencies"] == [DEP_TEST]
    shown = gatekit.run_ledger(tmp_path, "show", run_id).stdout
    assert f"introduced by {DEP_TEST}: the dependency change" in shown
    assert f"introduced by {CODE_TEST}: the code" in shown
    assert "passes (dependencies)" in shown  # the timeline's line of the rerun
