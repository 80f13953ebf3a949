"""Skips that come from the environment are told (issue 25 part 4): tests skipped at head and
at base because a module is missing are counted per module in the verdict, `ledger show` and
the approval report, with the setting that would bring them in, and never change a verdict.

Pure projections over synthetic runs here; tests/test_environment_skips_gate.py runs real
gates on small projects.
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from hypothesis import given
from hypothesis import strategies as st

from release_ledger.domain import events as ev
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.junit import TestCase
from release_ledger.domain.rules import get_rule
from release_ledger.domain.run_state import fold
from release_ledger.projections.approval import approval_report
from release_ledger.projections.environment_skips import (
    EnvironmentSkip,
    environment_skips,
    extras_requiring,
    missing_module,
    skipped_at_both,
)
from release_ledger.projections.timeline import timeline
from release_ledger.projections.verdict_view import verdict_document
from tests.runbuilder import RunBuilder

A = "tests/test_arrays.py"
B = "tests/test_plain.py"
NUMPY = "could not import 'numpy': No module named 'numpy'"
SCIPY = "No module named 'scipy.sparse'"
# networkx 3.4's wheel metadata, abridged: numpy and scipy only through `default`.
NETWORKX_REQUIRES = [
    'numpy>=1.24; extra == "default"',
    'scipy!=1.11.0,!=1.11.1,>=1.10; extra == "default"',
    'matplotlib>=3.7; extra == "default"',
    'pytest>=7.2; extra == "test"',
    'lxml>=4.6; extra == "extra"',
    'networkx[default,extra]; extra == "all"',
]
NETWORKX_EXTRAS = ["default", "developer", "doc", "extra", "test", "all"]


def report(cases: dict[str, tuple[str, str]]) -> bytes:
    """Plain pytest JUnit: `FILE::NAME` -> (outcome, skip message)."""
    body = []
    for test, (outcome, message) in cases.items():
        file, name = test.split("::", 1)
        classname = file[:-3].replace("/", ".")
        inner = f"<skipped message={quoteattr(message)}/>" if outcome == "skipped" else ""
        body.append(f'<testcase file="{file}" classname="{classname}" name="{name}">{inner}'
                    "</testcase>")  # fmt: skip
    skipped = sum(1 for outcome, _ in cases.values() if outcome == "skipped")
    return (
        f'<testsuites><testsuite name="pytest" tests="{len(cases)}" failures="0" errors="0" '
        f'skipped="{skipped}">{"".join(body)}</testsuite></testsuites>'
    ).encode()


def attempt(run: RunBuilder, revision: str, cases: dict[str, tuple[str, str]]) -> None:
    data = report(cases)
    run.artifacts[sha256_hex(data)] = data
    run.add(ev.ShardAttemptRecorded, shard="s01", attempt=1, revision=revision, files=[A, B],
            exit_code=0, report_hash=sha256_hex(data))  # fmt: skip


def gated(
    head: dict[str, tuple[str, str]],
    base: dict[str, tuple[str, str]],
    *,
    requires: list[str] | None = None,
    extras: list[str] | None = None,
    **environment: object,
) -> RunBuilder:
    """A run of one shard whose head and base reports are the cases given."""
    run = RunBuilder().release().release_files()
    for revision in ("base", "head"):
        run.environment(revision, project="networkx", requires_dist=requires or [],
                        provides_extra=extras or [], **environment)  # fmt: skip
    run.discover([A, B]).plan({"s01": [A, B]})
    attempt(run, "head", head)
    attempt(run, "base", base)
    run.add(ev.RunCompleted)
    return run


def numpy_everywhere() -> dict[str, tuple[str, str]]:
    return {
        f"{A}::test_dot": ("skipped", NUMPY),
        f"{A}::test_sum": ("skipped", NUMPY),
        f"{A}::test_sparse": ("skipped", SCIPY),
        f"{B}::test_plain": ("passed", ""),
        f"{B}::test_windows": ("skipped", "only on Windows"),
    }


def case(outcome: str, message: str | None, text: str | None = None) -> TestCase:
    return TestCase(A, "tests.test_arrays", "t", outcome, message, text)  # type: ignore[arg-type]


# --- reading the skip ------------------------------------------------------------------------


def test_a_skip_names_the_top_level_module_its_import_missed() -> None:
    assert missing_module(case("skipped", NUMPY)) == "numpy"
    assert missing_module(case("skipped", SCIPY)) == "scipy"
    # a unittest SkipTest made from the ImportError, and Python 2's words
    assert missing_module(case("skipped", "No module named yaml")) == "yaml"
    assert missing_module(case("skipped", None, "t.py:3: No module named 'lxml.etree'")) == "lxml"


def test_other_skips_and_other_outcomes_name_no_module() -> None:
    assert missing_module(case("skipped", "only on Windows")) is None
    assert missing_module(case("skipped", "cannot import name 'x' from 'numpy'")) is None
    assert missing_module(case("failed", NUMPY)) is None
    assert missing_module(case("passed", None)) is None


MODULES = st.sampled_from(["numpy", "scipy", "yaml"])
SKIPS = st.dictionaries(st.sampled_from([f"t.py::t{i}" for i in range(12)]), MODULES)


@given(SKIPS, SKIPS)
def test_only_tests_skipped_for_the_same_module_at_both_revisions_are_counted(
    head: dict[str, str], base: dict[str, str]
) -> None:
    counted = skipped_at_both(head, base)

    assert counted == skipped_at_both(base, head)
    assert {t for tests in counted.values() for t in tests} == {
        t for t in head if base.get(t) == head[t]
    }
    for module, tests in counted.items():
        assert tests and list(tests) == sorted(tests)
        assert all(head[t] == module == base[t] for t in tests)


def test_an_extra_brings_in_what_the_extras_it_names_of_its_own_project_do() -> None:
    requiring = extras_requiring("NetworkX", NETWORKX_REQUIRES)

    assert requiring["default"] == {"numpy", "scipy", "matplotlib"}
    assert requiring["all"] == {"numpy", "scipy", "matplotlib", "lxml"}
    assert requiring["test"] == {"pytest"}


# --- the projection --------------------------------------------------------------------------


def test_tests_skipped_for_a_missing_module_at_both_revisions_are_counted_per_module() -> None:
    run = gated(numpy_everywhere(), numpy_everywhere(), requires=NETWORKX_REQUIRES,
                extras=NETWORKX_EXTRAS, source="extras", extra="test")  # fmt: skip

    skips = environment_skips(fold(run.events, run.artifacts))

    assert [(s.module, s.tests) for s in skips] == [
        ("numpy", (f"{A}::test_dot", f"{A}::test_sum")),
        ("scipy", (f"{A}::test_sparse",)),
    ]
    assert [s.setting for s in skips] == [
        '[tool.release-ledger] extras = ["default"] would bring them in'
    ] * 2
    assert skips[0].extras == ("default", "all") and skips[0].distribution == "numpy"


def test_a_skip_at_one_revision_only_is_not_the_environments() -> None:
    base = numpy_everywhere() | {f"{A}::test_dot": ("passed", "")}  # numpy was there at base
    head = numpy_everywhere() | {f"{A}::test_sparse": ("passed", "")}

    run = gated(head, base)

    skips = environment_skips(fold(run.events, run.artifacts))

    assert [(s.module, len(s.tests)) for s in skips] == [("numpy", 1)]


def test_without_a_declared_extra_the_suggestion_is_the_declared_test_environment() -> None:
    tried = [ev.EnvironmentSource(source="tox", detail="tox env py312", outcome="used")]
    run = gated(numpy_everywhere(), numpy_everywhere(), source="tox", tried=tried)

    skips = environment_skips(fold(run.events, run.artifacts))

    assert skips[0].distribution is None and skips[0].extras == ()
    assert skips[0].setting == (
        "add numpy to the deps of tox env py312, or [tool.release-ledger] env = "
        '"{python} -m pip install . numpy pytest"'
    )


def test_an_import_name_unlike_its_distribution_is_matched_by_the_known_alias() -> None:
    yaml = {
        f"{A}::test_load": ("skipped", "could not import 'yaml': No module named 'yaml'"),
        f"{B}::test_plain": ("passed", ""),
    }
    run = gated(yaml, yaml, requires=['PyYAML>=6; extra == "yaml"'], extras=["yaml"])

    (skip,) = environment_skips(fold(run.events, run.artifacts))

    assert (skip.module, skip.distribution, skip.extras) == ("yaml", "pyyaml", ("yaml",))


def test_the_verdict_show_and_approval_tell_the_skips_and_the_status_is_unchanged() -> None:
    run = gated(numpy_everywhere(), numpy_everywhere(), requires=NETWORKX_REQUIRES,
                extras=NETWORKX_EXTRAS, source="extras", extra="test")  # fmt: skip
    events = list(enumerate(run.events, start=1))
    state = fold(run.events, run.artifacts)
    verdict = get_rule("default").decide(state)

    document = verdict_document(run.run_id, state, verdict)
    approval = approval_report(events, run.artifacts, get_rule("default").decide)
    completed = timeline(events, run.artifacts)[-1].text

    assert document["status"] == verdict.status == "passed"
    told = document["environment_skips"]
    assert [(s["module"], s["count"], s["files"]) for s in told] == [("numpy", 2, 1),
                                                                     ("scipy", 1, 1)]  # fmt: skip
    assert told[0]["text"] == (
        "numpy missing: 2 tests in 1 file, at head and base — "
        '[tool.release-ledger] extras = ["default"] would bring them in'
    )
    assert "3 tests skipped at head and base for a missing module: numpy 2, scipy 1" in completed
    (gate,) = [m for m in approval.metrics if m.name == "gate"]
    assert gate.verdict == "pass" and "gate" not in approval.summary
    assert "told, not judged: numpy missing: 2 tests" in gate.why
    assert "numpy missing" in approval.markdown


def test_earlier_report_formats_are_unchanged_by_the_skips() -> None:
    run = gated(numpy_everywhere(), numpy_everywhere(), requires=NETWORKX_REQUIRES,
                extras=NETWORKX_EXTRAS)  # fmt: skip
    passes = {f"{A}::test_dot": ("passed", ""), f"{B}::test_plain": ("passed", "")}
    plain = gated(passes, passes)
    decide = get_rule("default").decide

    for report_format in (1, 2, 3):
        told = approval_report(list(enumerate(run.events, start=1)), run.artifacts, decide,
                               report_format=report_format)  # fmt: skip
        assert "missing" not in told.markdown
    # a run with no such skip reads the same in format 4 as in format 3
    same = [approval_report(list(enumerate(plain.events, start=1)), plain.artifacts, decide,
                            report_format=f).markdown for f in (3, 4)]  # fmt: skip
    assert same[0] == same[1]


def test_an_environment_recorded_before_the_metadata_fields_reads_as_it_was_stored() -> None:
    stored = (
        '{"at":"2026-01-01T00:00:00Z","commit":"c","how":"uv","kind":"EnvironmentPrepared",'
        '"revision":"head","run_id":"r","status":"ready","where":"local"}'
    )
    event = ev.event_from_json(stored)

    assert isinstance(event, ev.EnvironmentPrepared)
    assert event.requires_dist == [] and event.provides_extra == []
    assert "requires_dist" not in ev.event_to_json(event)


def test_a_file_skipped_whole_at_import_is_told_apart_from_its_tests() -> None:
    skip = EnvironmentSkip(
        "numpy",
        ("tests/test_a.py::test_one", "tests/test_a.py::test_two", "tests/test_m.py::tests.test_m"),
        setting="S",
    )

    assert skip.whole_files == ("tests/test_m.py",)
    assert skip.line() == (
        "numpy missing: 2 tests in 1 file and 1 file skipped whole at import, at head and base — S"
    )


def test_a_matrix_counts_a_test_once_and_names_the_interpreters_missing_the_module() -> None:
    run = RunBuilder()
    started = run.events[0]
    assert isinstance(started, ev.RunStarted)
    lanes = [{"label": "3.11"}, {"label": "3.12"}]
    run.events[0] = started.model_copy(update={"options": {"interpreters": lanes}})
    run.discover([A, B]).plan({"s01": [A, B]})
    plain = {f"{A}::test_dot": ("passed", ""), f"{A}::test_sum": ("passed", ""),
             f"{B}::test_plain": ("passed", "")}  # fmt: skip
    for label, cases in (("3.11", numpy_everywhere()), ("3.12", plain)):
        for revision in ("head", "base"):
            data = report(cases)
            run.artifacts[sha256_hex(data)] = data
            run.add(ev.ShardAttemptRecorded, shard="s01", attempt=1, revision=revision,
                    files=[A, B], exit_code=0, report_hash=sha256_hex(data),
                    interpreter=label)  # fmt: skip

    skips = environment_skips(fold(run.events, run.artifacts))

    assert [(s.module, len(s.tests), s.interpreters) for s in skips] == [
        ("numpy", 2, ("3.11",)),
        ("scipy", 1, ("3.11",)),
    ]
    assert "at head and base on Python 3.11 — " in skips[0].line()
