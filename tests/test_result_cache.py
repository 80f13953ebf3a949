"""The result cache: base results reused per file, by content, from any earlier run.

A release candidate's head sweep becomes the next release's baseline; a changed file or
another environment is never reused; the reuse is an event that carries everything a
replay needs; two gate processes on one PostgreSQL ledger see each other's results."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.content import command_key, environment_key, result_key
from release_ledger.domain.run_state import fold
from release_ledger.ledger.read_side import cached_results
from release_ledger.ledger.result_cache import content_keys
from release_ledger.projections.content_index import READER
from release_ledger.projections.next_step import next_step
from release_ledger.projections.verdict_view import base_reuse
from tests.gatekit import GATE_DEFAULTS, events, gate, kinds, process_env, run_ledger
from tests.gitrepo import commit, make_repo, tag
from tests.ledgerkit import open_ledger
from tests.runbuilder import RunBuilder, junit

PASS = "def test_ok():\n    pass\n"
FAIL = "def test_bad():\n    assert 0\n"
A, B, C = "tests/test_a.py", "tests/test_b.py", "tests/test_c.py"


def _releases(tmp_path: Path) -> Path:
    """v1; v2 breaks test_a (introduced at v2); HEAD then breaks test_b."""
    repo = make_repo(tmp_path, {A: PASS, B: PASS, C: FAIL})
    tag(repo, "v1")
    commit(repo, {A: FAIL.replace("bad", "a_bad")}, "breaks a")
    tag(repo, "v2")
    return repo


def _base_attempts(evs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in evs if e["kind"] == "ShardAttemptRecorded" and e["revision"] == "base"]


@pytest.mark.slow
def test_a_head_sweep_is_the_next_gates_baseline(tmp_path: Path) -> None:
    repo = _releases(tmp_path)
    first = gate(tmp_path, repo, "--shards", "1", "--timeout", "60", base="v1")
    assert first.code == 1, first.stderr
    assert first.document["introduced"] == [f"{A}::test_a_bad"]
    first_id = first.document["run_id"]

    commit(repo, {B: FAIL.replace("bad", "b_bad")}, "breaks b")
    # Another shard count: reuse is per file, not per shard file set.
    second = gate(tmp_path, repo, "--shards", "2", "--timeout", "60", base="v2")
    assert second.code == 1, second.stderr
    document = second.document
    assert document["introduced"] == [f"{B}::test_b_bad"]
    assert document["preexisting"] == [f"{A}::test_a_bad", f"{C}::test_bad"]
    assert document["baseline_reused"] == [first_id]
    assert document["base_reuse"]["reused"] == {"files": 3, "tests": 3}
    assert document["base_reuse"]["fresh"] == {"files": 0, "tests": 0}

    evs = events(tmp_path, document["run_id"])
    assert _base_attempts(evs) == []  # no base run at all
    reused = [e for e in evs if e["kind"] == "BaselineReused"]
    assert {e["from_run"] for e in reused} == {first_id}
    assert {e["from_revision"] for e in reused} == {"head"}
    assert sorted(f for e in reused for f in e["files"]) == [A, B, C]
    for e in reused:  # names the run and the attempt, carries what the fold needs
        assert e["from_position"] and e["from_shard"] and e["report_hash"]
        assert sorted(e["source_files"]) == [A, B, C]

    show = run_ledger(tmp_path, "show", document["run_id"], "--json").document
    assert show["verdict"]["base_reuse"]["reused"] == {"files": 3, "tests": 3}
    replayed = run_ledger(tmp_path, "verdict", document["run_id"], "--json").document
    assert replayed["introduced"] == document["introduced"]
    assert run_ledger(tmp_path, "verify").code == 0


@pytest.mark.slow
def test_files_that_collect_nothing_at_base_are_reused_not_run_again(tmp_path: Path) -> None:
    """A helper module and a `test*.txt` without examples collect nothing: the head sweep
    declares them empty, and at the same commit they collect nothing again, so the next gate,
    whose base that commit is, runs no base attempt for them."""
    helper, text = "tests/test_helpers.py", "requirements/test.txt"
    repo = make_repo(tmp_path, {A: PASS, helper: "def helper():\n    return 1\n", text: "x\n"})
    tag(repo, "v1")
    commit(repo, {"README": "v2\n"}, "v2")
    tag(repo, "v2")
    first = gate(tmp_path, repo, "--shards", "1", "--env", "none", base="v1")
    assert first.code == 0, first.stderr
    commit(repo, {"README": "rc\n"}, "rc")
    second = gate(tmp_path, repo, "--shards", "1", "--env", "none", base="v2")
    assert second.code == 0, (second.stderr, second.document.get("unmeasured"))
    document = second.document
    assert document["base_reuse"]["reused"] == {"files": 3, "tests": 1}
    assert document["base_reuse"]["fresh"] == {"files": 0, "tests": 0}
    evs = events(tmp_path, document["run_id"])
    assert _base_attempts(evs) == []
    reused = {f for e in evs if e["kind"] == "BaselineReused" for f in e["files"]}
    assert reused == {A, helper, text}
    assert {e["file"] for e in evs if e["kind"] == "MeasurementReused"} == {A}


@pytest.mark.slow
def test_another_environment_is_not_reused(tmp_path: Path) -> None:
    repo = _releases(tmp_path)
    first = gate(tmp_path, repo, "--shards", "1", "--timeout", "60", base="v1")
    assert first.code == 1, first.stderr
    commit(repo, {B: PASS.replace("ok", "b_ok")}, "renames b")
    second = gate(tmp_path, repo, "--shards", "1", "--timeout", "60", "--env", "none", base="v2")
    assert second.code == 0, second.stderr  # b's test renamed: nothing introduced
    evs = events(tmp_path, second.document["run_id"])
    assert kinds(evs)["BaselineReused"] == 0
    assert len(_base_attempts(evs)) == 1
    assert second.document["base_reuse"]["fresh"]["files"] == 3


def _keyed_run(
    ledger_url: str, run_id: str, blob: str, env: str = "none", skipped: tuple[str, ...] = ()
) -> dict[str, str]:
    keys = content_keys("2" * 40, {A: blob, B: "b" * 40}, env, "3.11.9", ["pytest"], skipped)
    b = RunBuilder(run_id=run_id)
    b.discover([A, B]).plan({"s1": [A, B]})
    b.attempt("s1", "head", [A, B], {f"{A}::test_a": "failed", f"{B}::test_b": "passed"},
              commit=keys.commit, blobs=dict(keys.blobs), environment_key=keys.environment,
              command_key=keys.command)  # fmt: skip
    ledger = open_ledger(ledger_url)
    try:
        ledger.append(run_id, b.events, artifacts=b.artifacts)
    finally:
        ledger.close()
    return {f: k for f in (A, B) if (k := keys.result_key(f))}


def test_a_changed_file_at_the_same_path_is_not_reused(sqlite_url: str) -> None:
    cached = _keyed_run(sqlite_url, "a" * 32, blob="1" * 40)
    changed = content_keys("2" * 40, {A: "9" * 40, B: "b" * 40}, "none", "3.11.9", ["pytest"])
    other_env = content_keys("2" * 40, {A: "1" * 40, B: "b" * 40}, "auto", "3.11.9", ["pytest"])
    ledger = open_ledger(sqlite_url)
    try:
        assert set(cached_results(ledger, cached)) == {A, B}
        wanted = {f: k for f in (A, B) if (k := changed.result_key(f))}
        assert set(cached_results(ledger, wanted)) == {B}  # only the unchanged file
        wanted = {f: k for f in (A, B) if (k := other_env.result_key(f))}
        assert cached_results(ledger, wanted) == {}
        assert cached_results(ledger, cached, exclude_run="a" * 32) == {}
    finally:
        ledger.close()


def test_results_made_in_the_next_declared_source_answer_only_for_it(sqlite_url: str) -> None:
    """The commit's first source (a tox environment, say) was rejected and its shards ran in
    the next one (the group fallback): same commit, blobs, declarations and command, another
    invocation. Those results answer for a run that passes the same source by, never for one
    whose environment comes from the first source again."""
    cached = _keyed_run(sqlite_url, "a" * 32, blob="1" * 40, env="auto", skipped=("tox",))
    blobs = {A: "1" * 40, B: "b" * 40}
    first = content_keys("2" * 40, blobs, "auto", "3.11.9", ["pytest"])
    again = content_keys("2" * 40, blobs, "auto", "3.11.9", ["pytest"], ("tox",))
    ledger = open_ledger(sqlite_url)
    try:
        wanted = {f: k for f in (A, B) if (k := first.result_key(f))}
        assert cached_results(ledger, wanted) == {}
        wanted = {f: k for f in (A, B) if (k := again.result_key(f))}
        assert wanted == cached and set(cached_results(ledger, wanted)) == {A, B}
    finally:
        ledger.close()


def test_entries_keyed_before_sources_counted_stay_in_the_ledger_and_miss(
    sqlite_url: str,
) -> None:
    """An attempt recorded with the environment key alone (whatever source made it) still
    loads, folds and is indexed under its own key, and no lookup of now ever matches it."""
    blobs = {A: "1" * 40}
    old_environment = environment_key("auto", "3.11.9 pin:", blobs)
    command = command_key(["pytest"])
    b = RunBuilder(run_id="d" * 32)
    b.discover([A]).plan({"s1": [A]})
    b.attempt("s1", "head", [A], {f"{A}::test_a": "passed"}, commit="2" * 40, blobs=blobs,
              environment_key=old_environment, command_key=command)  # fmt: skip
    ledger = open_ledger(sqlite_url)
    try:
        ledger.append("d" * 32, b.events, artifacts=b.artifacts)
        assert fold(ledger.events("d" * 32), b.artifacts).shards["s1"].attempts["head"]
        old = result_key("2" * 40, "1" * 40, old_environment, command, READER)
        assert set(cached_results(ledger, {A: old})) == {A}
        now = content_keys("2" * 40, blobs, "auto", "3.11.9", ["pytest"]).result_key(A)
        assert now is not None and now != old
        assert cached_results(ledger, {A: now}) == {}
    finally:
        ledger.close()


def test_an_unmeasured_attempt_and_an_unkeyed_one_are_not_cached(sqlite_url: str) -> None:
    keys = content_keys("2" * 40, {A: "1" * 40}, "none", "3.11.9", ["pytest"])
    keyed = {"commit": keys.commit, "blobs": dict(keys.blobs),
             "environment_key": keys.environment, "command_key": keys.command}  # fmt: skip
    b = RunBuilder(run_id="c" * 32)
    b.discover([A]).plan({"s1": [A]})
    b.attempt("s1", "head", [A], {f"{A}::test_a": "passed"}, signal=9, **keyed)
    b.attempt("s1", "head", [A], {f"{A}::test_a": "passed"}, attempt=2)  # no keys
    ledger = open_ledger(sqlite_url)
    try:
        ledger.append("c" * 32, b.events, artifacts=b.artifacts)
        key = keys.result_key(A)
        assert key is not None
        assert cached_results(ledger, {A: key}) == {}
    finally:
        ledger.close()


def _reuse(run: RunBuilder, shard: str, files: list[str], source: list[str],
           cases: dict[str, str]) -> None:  # fmt: skip
    data = junit(cases)
    from release_ledger.domain.chain import sha256_hex

    digest = sha256_hex(data)
    run.artifacts[digest] = data
    failing = any(o == "failed" for o in cases.values())
    run.add(ev.BaselineReused, base="2" * 40, from_run="e" * 32, shard=shard, files=files,
            exit_code=1 if failing else 0, report_hash=digest, source_files=source,
            from_position=5, from_shard="s9", from_attempt=1, from_revision="head")  # fmt: skip


def test_a_partly_reused_base_runs_only_the_rest_and_joins_both() -> None:
    b = RunBuilder()
    b.discover([A, B, C]).plan({"s1": [A, B, C]})
    b.attempt("s1", "head", [A, B, C], {f"{A}::t": "failed", f"{B}::t": "passed",
                                        f"{C}::t": "failed"})  # fmt: skip
    # A's and C's base results come from an earlier attempt that ran A, C and another file.
    _reuse(
        b,
        "s1",
        [A, C],
        [A, C, "tests/test_x.py"],
        {f"{A}::t": "passed", f"{C}::t": "failed", "tests/test_x.py::t": "passed"},
    )
    state = fold(b.events, b.artifacts)
    step = next_step(state, rounds=2)
    assert step.kind == "run"
    assert [(r.shard, r.revision, r.files) for r in step.runs] == [("s1", "base", (B,))]
    b.attempt("s1", "base", [B], {f"{B}::t": "passed"})
    state = fold(b.events, b.artifacts)
    latest = state.shards["s1"].latest("base")
    assert latest is not None and latest.assessment.measured
    assert latest.reused_files == (A, C)
    assert base_reuse(state) == {
        "fresh": {"files": 1, "tests": 1},
        "reused": {"files": 2, "tests": 2},
        "from": ["e" * 32],
    }
    from release_ledger.domain.rules import get_rule

    verdict = get_rule("default").decide(state)
    assert verdict.preexisting == (f"{C}::t",)
    assert f"{A}::t" in verdict.introduced or next_step(state, rounds=2).kind == "isolate"


def test_a_reused_report_that_no_longer_reads_as_a_measurement_is_unmeasured() -> None:
    """The reader on replay judges the earlier report again: a source attempt that exited 0
    with a failing report is no measurement, so neither is the base built on it."""
    b = RunBuilder()
    b.discover([A]).plan({"s1": [A]})
    b.attempt("s1", "head", [A], {f"{A}::t": "passed"})
    data = junit({f"{A}::t": "failed"})
    from release_ledger.domain.chain import sha256_hex

    b.artifacts[sha256_hex(data)] = data
    b.add(ev.BaselineReused, base="2" * 40, from_run="e" * 32, shard="s1", files=[A],
          exit_code=0, report_hash=sha256_hex(data), source_files=[A], from_position=5)  # fmt: skip
    state = fold(b.events, b.artifacts)
    latest = state.shards["s1"].latest("base")
    assert latest is not None and not latest.assessment.measured
    assert "reused base result" in latest.assessment.detail


@pytest.mark.slow
@pytest.mark.postgres
def test_two_gate_processes_on_postgresql_reuse_each_others_results(
    tmp_path: Path, postgres_url: str
) -> None:
    repo = _releases(tmp_path)
    env = process_env(tmp_path)

    def run_gate(base: str) -> dict[str, object]:
        argv = [
            os.environ.get("PYTHON", "python"), "-m", "release_ledger", "gate", "--base", base,
            "--repo", str(repo), *GATE_DEFAULTS, "--shards", "1", "--timeout", "60", "--json",
            "--ledger", postgres_url,
        ]  # fmt: skip
        import sys

        argv[0] = sys.executable
        done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 1, done.stderr
        document: dict[str, object] = json.loads(done.stdout)
        return document

    first = run_gate("v1")
    commit(repo, {B: FAIL.replace("bad", "b_bad")}, "breaks b")
    second = run_gate("v2")
    assert second["baseline_reused"] == [first["run_id"]]
    assert second["introduced"] == [f"{B}::test_b_bad"]
    reuse = second["base_reuse"]
    assert isinstance(reuse, dict) and reuse["reused"]["files"] == 3
