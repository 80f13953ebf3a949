"""The resolved test invocation: a plain value, recorded on `EnvironmentPrepared`."""

from __future__ import annotations

from datetime import UTC, datetime

from release_ledger.domain import events as ev
from release_ledger.domain.invocation import (
    Target,
    TestInvocation,
    drop_options,
    option_groups,
    split_arguments,
    stable_node_id,
)
from release_ledger.projections.timeline import describe

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _prepared(**fields: object) -> ev.EnvironmentPrepared:
    return ev.EnvironmentPrepared(
        run_id="r", at=AT, revision="head", commit="c" * 40, where="local", status="ready",
        how="uv", **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def test_an_option_keeps_its_value_even_when_the_value_is_an_existing_path() -> None:
    words = ["--cov-config", "setup.cfg", "-n", "auto", "tests"]
    options, targets = split_arguments(words, positional=[4])
    assert options == ["--cov-config", "setup.cfg", "-n", "auto"]
    assert targets == ["tests"]


def test_a_shard_drops_options_that_stop_it_early_with_their_values() -> None:
    options = ["--maxfail", "3", "--cov-config", "setup.cfg", "-x", "--junitxml=out.xml", "-q"]
    assert drop_options(options, ["--maxfail", "-x", "--junitxml"]) == [
        "--cov-config", "setup.cfg", "-q",
    ]  # fmt: skip
    invocation = TestInvocation(options=tuple(options))
    assert invocation.shard_arguments(["tests/test_a.py"]) == [
        "--cov-config", "setup.cfg", "-q", "--no-cov", "tests/test_a.py",
    ]  # fmt: skip  (coverage, asked for, runs off in a shard: `with_coverage_off`)


def test_option_groups_keep_values_with_their_option() -> None:
    assert option_groups(["-p", "xdist", "-q", "--tb", "short"]) == [
        ["-p", "xdist"], ["-q"], ["--tb", "short"],
    ]  # fmt: skip


def test_an_installed_module_is_named_by_its_path_inside_site_packages() -> None:
    at_head = ".tox/py311/lib/python3.11/site-packages/pkg/mod.py::pkg.mod.f"
    at_base = "/cache/envs/abc/venv/lib/python3.11/site-packages/pkg/mod.py::pkg.mod.f"
    stable = "{site-packages}/pkg/mod.py::pkg.mod.f"
    assert stable_node_id(at_head) == stable_node_id(at_base) == stable
    assert stable_node_id("tests/test_a.py::test_x") == "tests/test_a.py::test_x"


def test_the_invocation_is_recorded_and_read_back_the_same() -> None:
    invocation = TestInvocation(
        source="tox:py311-tests", workdir=".tox", options=("--doctest-modules", "-n", "auto"),
        targets=(Target(path="pkg", installed=True), Target(path="tests")),
        env={"PYTHONDEVMODE": "1"}, posargs=("-n", "auto"),
    )  # fmt: skip
    event = _prepared(invocation=invocation)
    again = ev.EnvironmentPrepared.model_validate_json(event.model_dump_json())
    assert again.invocation == invocation
    assert "tests" in again.invocation.checkout_targets()
    assert again.invocation.installed_targets() == ["pkg"]


def test_an_event_recorded_before_the_invocation_reads_and_writes_the_same() -> None:
    event = _prepared()
    assert "invocation" not in event.model_dump(mode="json")
    assert ev.EnvironmentPrepared.model_validate_json(event.model_dump_json()).invocation is None


def test_ledger_show_names_the_invocation_and_its_source() -> None:
    invocation = TestInvocation(
        source="tox:py311-tests", workdir=".tox", options=("--doctest-modules",),
        targets=(Target(path="pkg", installed=True), Target(path="tests")), posargs=("-n", "auto"),
    )  # fmt: skip
    shown = describe(_prepared(invocation=invocation), {})
    assert "runs `pytest --doctest-modules {site-packages}/pkg tests` in .tox/" in shown
    assert "from tox:py311-tests" in shown
    assert "posargs default -n auto" in shown


def test_a_fallback_says_why() -> None:
    invocation = TestInvocation(source="default", fallback="tox could not read its configuration")
    assert "fallback: tox could not read its configuration" in invocation.describe()
