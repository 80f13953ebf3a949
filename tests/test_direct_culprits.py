"""Evidence that names a file sends the gate straight to it: a rejection naming a file of the
shard is not retried (it is not transient) and the named file is split off alone; the plugin's
markers naming the file running when a shard died do the same after the retries."""

from __future__ import annotations

from release_ledger.domain import events as ev
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.run_state import fold
from release_ledger.projections.next_step import next_step
from tests.runbuilder import RunBuilder

A, B, C, D = (f"tests/test_{x}.py" for x in "abcd")


def test_a_report_missing_a_file_is_not_retried_and_that_file_is_split_off() -> None:
    run = RunBuilder().discover([A, B, C, D]).plan({"s01": [A, B, C, D]})
    cases = {f"{f}::test_x": "passed" for f in (A, B, D)}  # C collected nothing
    run.attempt("s01", "head", [A, B, C, D], cases)
    run.attempt("s01", "base", [A, B, C, D], {f"{f}::test_x": "passed" for f in (A, B, C, D)})
    state = fold(run.events, run.artifacts)
    latest = state.shards["s01"].latest("head")
    assert latest is not None and latest.assessment.culprits == (C,)
    step = next_step(state, rounds=2)
    assert step.kind == "split", step  # no retry round first, although 2 are allowed
    [split] = step.splits
    assert split.children == (("s01.1", (C,)), ("s01.2", (A, B, D)))


def test_a_shard_killed_while_the_plugin_says_a_file_runs_splits_off_that_file() -> None:
    run = RunBuilder().discover([A, B, C, D]).plan({"s01": [A, B, C, D]})
    log = (
        f"release-ledger: start {A}\n{A} .\nrelease-ledger: end {A}\n"
        f"release-ledger: start {B}\n{B} ..\n"
    ).encode()
    digest = sha256_hex(log)
    run.artifacts[digest] = log
    run.add(
        ev.ShardAttemptRecorded, shard="s01", attempt=1, revision="head", files=[A, B, C, D],
        exit_code=None, signal=9, log_tail_hash=digest,
    )  # fmt: skip
    run.attempt("s01", "base", [A, B, C, D], {f"{f}::test_x": "passed" for f in (A, B, C, D)})
    state = fold(run.events, run.artifacts)
    assert next_step(state, rounds=1).kind == "run"  # a death may be transient: retried
    run.add(
        ev.ShardAttemptRecorded, shard="s01", attempt=2, revision="head", files=[A, B, C, D],
        exit_code=None, signal=9, log_tail_hash=digest,
    )  # fmt: skip
    state = fold(run.events, run.artifacts)
    latest = state.shards["s01"].latest("head")
    assert latest is not None and latest.running == B and latest.last_started == B
    [split] = next_step(state, rounds=1).splits
    assert split.children == (("s01.1", (B,)), ("s01.2", (A, C, D)))
    assert split.reason == "signal"


def test_without_evidence_naming_a_file_the_shard_is_halved() -> None:
    run = RunBuilder().discover([A, B, C, D]).plan({"s01": [A, B, C, D]})
    run.attempt("s01", "head", [A, B, C, D], None, signal=9)
    run.attempt("s01", "base", [A, B, C, D], {f"{f}::test_x": "passed" for f in (A, B, C, D)})
    [split] = next_step(fold(run.events, run.artifacts), rounds=0).splits
    assert split.children == (("s01.1", (A, B)), ("s01.2", (C, D)))


def test_a_shard_timed_out_while_a_file_runs_is_not_retried_whole() -> None:
    """Each retry of a timed-out shard costs the whole timeout: the file the plugin names is
    split off at once (on a first gate a hang is bounded only by `--timeout`)."""
    run = RunBuilder().discover([A, B, C, D]).plan({"s01": [A, B, C, D]})
    log = f"release-ledger: start {A}\n{A} .\nrelease-ledger: end {A}\nrelease-ledger: start {C}\n"
    digest = sha256_hex(log.encode())
    run.artifacts[digest] = log.encode()
    run.add(
        ev.ShardAttemptRecorded, shard="s01", attempt=1, revision="base", files=[A, B, C, D],
        exit_code=None, signal=9, timed_out=True, log_tail_hash=digest,
    )  # fmt: skip
    run.attempt("s01", "head", [A, B, C, D], {f"{f}::test_x": "passed" for f in (A, B, C, D)})
    step = next_step(fold(run.events, run.artifacts), rounds=2)
    assert step.kind == "split", step  # no retry round, although 2 are allowed
    [split] = step.splits
    assert split.children == (("s01.1", (C,)), ("s01.2", (A, B, D)))
    assert split.reason == "timeout"


def test_a_shard_timed_out_with_no_file_named_is_retried() -> None:
    run = RunBuilder().discover([A, B]).plan({"s01": [A, B]})
    run.add(
        ev.ShardAttemptRecorded, shard="s01", attempt=1, revision="base", files=[A, B],
        exit_code=None, signal=9, timed_out=True,
    )  # fmt: skip
    run.attempt("s01", "head", [A, B], {f"{f}::test_x": "passed" for f in (A, B)})
    assert next_step(fold(run.events, run.artifacts), rounds=2).kind == "run"


def test_bisection_children_run_their_files_in_the_projects_collection_order() -> None:
    """The halves of a shard that keeps dying, and the rest beside a named file, hold their
    files in the order the project's own run collects them, not by name."""
    order = [D, C, B, A]
    run = RunBuilder().discover([A, B, C, D], order=order).plan({"s01": [A, B, C, D]})
    for revision in ("head", "base"):
        run.add(
            ev.ShardAttemptRecorded, shard="s01", attempt=1, revision=revision,
            files=[A, B, C, D], exit_code=None, signal=9,
        )  # fmt: skip
    [split] = next_step(fold(run.events, run.artifacts), rounds=0).splits
    assert split.children == (("s01.1", (D, C)), ("s01.2", (B, A)))

    named = RunBuilder().discover([A, B, C, D], order=order).plan({"s01": [A, B, C, D]})
    named.attempt("s01", "head", [A, B, C, D], {f"{f}::test_x": "passed" for f in (A, B, D)})
    named.attempt("s01", "base", [A, B, C, D], {f"{f}::test_x": "passed" for f in (A, B, C, D)})
    [split] = next_step(fold(named.events, named.artifacts), rounds=2).splits
    assert split.children == (("s01.1", (C,)), ("s01.2", (D, B, A)))
