"""Rules judge a run's state: classification, unmeasured shards, precedence, per rule."""

from __future__ import annotations

from release_ledger.domain.rules import REGISTRY, get_rule
from release_ledger.domain.run_state import fold
from release_ledger.projections.next_step import next_step
from tests.runbuilder import RunBuilder

A, B = "tests/test_a.py", "tests/test_b.py"


def verdict(builder: RunBuilder, rule: str = "default"):  # type: ignore[no-untyped-def]
    return get_rule(rule).decide(fold(builder.events, builder.artifacts))


def two_shard_run() -> RunBuilder:
    return RunBuilder().discover([A, B]).plan({"s01": [A], "s02": [B]})


def test_clean_run_passes_under_every_rule() -> None:
    run = two_shard_run()
    for shard, file in (("s01", A), ("s02", B)):
        for rev in ("head", "base"):
            run.attempt(shard, rev, [file], {f"{file}::test_x": "passed"})
    for name in REGISTRY:
        assert verdict(run, name).status == "passed"


def test_classifies_introduced_preexisting_and_fixed() -> None:
    run = two_shard_run()
    run.attempt("s01", "head", [A], {f"{A}::t1": "failed", f"{A}::t2": "failed"})
    run.attempt("s01", "base", [A], {f"{A}::t1": "passed", f"{A}::t2": "failed"})
    run.attempt("s02", "head", [B], {f"{B}::t3": "passed"})
    run.attempt("s02", "base", [B], {f"{B}::t3": "failed"})
    result = verdict(run)
    assert result.status == "failed"
    assert result.introduced == (f"{A}::t1",)
    assert result.preexisting == (f"{A}::t2",)
    assert result.fixed == (f"{B}::t3",)


def test_failure_not_reproduced_alone_is_flaky_and_only_strict_fails_on_it() -> None:
    run = two_shard_run()
    run.attempt("s01", "head", [A], {f"{A}::t1": "failed"})
    run.attempt("s01", "base", [A], {f"{A}::t1": "passed"})
    run.attempt("s02", "head", [B], {f"{B}::t3": "passed"})
    run.attempt("s02", "base", [B], {f"{B}::t3": "passed"})
    run.isolation(A, "head", {f"{A}::t1": "passed"})
    run.isolation(A, "base", {f"{A}::t1": "passed"})
    assert verdict(run).flaky == (f"{A}::t1",)
    assert verdict(run).status == "passed"
    assert verdict(run, "strict").status == "failed"


def test_preexisting_failure_fails_only_zero_failures() -> None:
    run = two_shard_run()
    run.attempt("s01", "head", [A], {f"{A}::t1": "failed"})
    run.attempt("s01", "base", [A], {f"{A}::t1": "failed"})
    run.attempt("s02", "head", [B], {f"{B}::t3": "passed"})
    run.attempt("s02", "base", [B], {f"{B}::t3": "passed"})
    assert verdict(run).status == "passed"
    assert verdict(run, "strict").status == "passed"
    assert verdict(run, "zero-failures").status == "failed"


def test_skip_is_unmeasured_under_strict_only() -> None:
    run = two_shard_run()
    run.attempt("s01", "head", [A], {f"{A}::t1": "skipped"})
    run.attempt("s01", "base", [A], {f"{A}::t1": "skipped"})  # skipped at both: no lost coverage
    run.attempt("s02", "head", [B], {f"{B}::t3": "passed"})
    run.attempt("s02", "base", [B], {f"{B}::t3": "passed"})
    assert verdict(run).status == "passed"
    strict = verdict(run, "strict")
    assert strict.status == "unmeasured"
    assert [u.reason for u in strict.unmeasured] == ["skipped"]


def test_dead_shard_is_unmeasured_never_passed_and_in_the_retry_set() -> None:
    run = two_shard_run()
    run.attempt("s01", "head", [A], None, signal=9)
    run.attempt("s01", "base", [A], {f"{A}::t1": "passed"})
    run.attempt("s02", "head", [B], {f"{B}::t3": "passed"})
    run.attempt("s02", "base", [B], {f"{B}::t3": "passed"})
    result = verdict(run)
    assert result.status == "unmeasured"
    assert result.retry_shards == ("s01",)
    (entry,) = result.unmeasured
    assert (entry.shard, entry.reason, entry.culprits) == ("s01", "signal", (A,))


def test_introduced_failure_outranks_an_unmeasured_shard() -> None:
    run = two_shard_run()
    run.attempt("s01", "head", [A], None, signal=9)
    run.attempt("s01", "base", [A], {f"{A}::t1": "passed"})
    run.attempt("s02", "head", [B], {f"{B}::t3": "failed"})
    run.attempt("s02", "base", [B], {f"{B}::t3": "passed"})
    assert verdict(run).status == "failed"


def test_next_step_retries_only_the_unmeasured_revision_then_bisects() -> None:
    run = RunBuilder().discover([A, B]).plan({"s01": [A, B]})
    run.attempt("s01", "head", [A, B], None, signal=9)
    run.attempt("s01", "base", [A, B], {f"{A}::t1": "passed", f"{B}::t2": "passed"})
    step = next_step(fold(run.events, run.artifacts), rounds=1)
    assert step.kind == "run"
    assert [(r.shard, r.revision, r.attempt) for r in step.runs] == [("s01", "head", 2)]
    run.attempt("s01", "head", [A, B], None, signal=9, attempt=2)
    step = next_step(fold(run.events, run.artifacts), rounds=1)
    assert step.kind == "split"
    assert step.splits[0].children == (("s01.1", (A,)), ("s01.2", (B,)))


def test_new_file_at_head_runs_only_at_head_and_its_failures_are_introduced() -> None:
    run = RunBuilder().discover([A, B], missing_at_base=[B]).plan({"s01": [A], "s02": [B]})
    state = fold(run.events, run.artifacts)
    requested = {(r.shard, r.revision) for r in next_step(state, rounds=2).runs}
    assert requested == {("s01", "head"), ("s01", "base"), ("s02", "head")}
    run.attempt("s01", "head", [A], {f"{A}::t1": "passed"})
    run.attempt("s01", "base", [A], {f"{A}::t1": "passed"})
    run.attempt("s02", "head", [B], {f"{B}::t9": "failed"})
    run.isolation(B, "head", {f"{B}::t9": "failed"})
    result = verdict(run)
    assert result.introduced == (f"{B}::t9",)


def test_a_failure_whose_file_does_not_collect_alone_is_introduced_not_flaky() -> None:
    """Found on toolz with a broken import at head: in the shard the tests ran and failed, the
    file alone failed to collect, so its tests were missing from the run alone. Missing is no
    evidence of a pass: the failure is introduced, never flaky (which the default rule passes)."""
    run = two_shard_run()
    run.attempt("s01", "head", [A], {f"{A}::t1": "failed"})
    run.attempt("s01", "base", [A], {f"{A}::t1": "passed"})
    run.attempt("s02", "head", [B], {f"{B}::t3": "passed"})
    run.attempt("s02", "base", [B], {f"{B}::t3": "passed"})
    run.isolation(A, "head", {f"{A}::tests.test_a": "error"})
    result = verdict(run)
    assert result.introduced == (f"{A}::t1",) and result.flaky == ()
    assert result.status == "failed"
