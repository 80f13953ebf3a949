"""2. Reads verify before they decide. A run whose events were edited (even with the chain
recomputed) or whose stored bytes no longer decode is never given a verdict, a timeline, an
approval or an audit: one line, exit 1, "run … is broken at position N", nothing appended,
no traceback. On today's main `verdict` said `passed` for an edited failed run, `approve`
appended to it, and a flipped byte made `show`/`verdict`/`export`/`runs` crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from release_ledger.ledger.service import Ledger
from tests.adversarial.kit import failed_run, rehash_from, set_state, state_at
from tests.gatekit import ledger_url, run_ledger
from tests.ledgerkit import open_ledger

READERS = [
    ("verdict",),
    ("show",),
    ("approve",),
    ("audit",),
    ("export",),
    ("resume",),
]


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    ledger = open_ledger(ledger_url(tmp_path))
    failed_run(ledger)
    return ledger


def _flip_outcome(ledger: Ledger, run: str) -> None:
    """The head attempt's report made to look passing: edit the stored event (position 5)
    so that it references the base report, and recompute every later hash."""
    head, base = state_at(ledger, run, 5), state_at(ledger, run, 6)
    head_hash = head.split(b'"report_hash":"', 1)[1][:64]
    base_hash = base.split(b'"report_hash":"', 1)[1][:64]
    forged = head.replace(head_hash, base_hash).replace(b'"exit_code":1', b'"exit_code":0')
    assert forged != head
    set_state(ledger, run, 5, forged)
    rehash_from(ledger, run, 5)


def _one_line_exit_1(tmp_path: Path, *args: str) -> str:
    result = run_ledger(tmp_path, *args)  # raises if the command crashed (a traceback)
    assert result.code == 1, (args, result.code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is broken at position" in lines[0], result.stderr
    assert "ledger verify" in lines[0]
    return lines[0]


@pytest.mark.parametrize("command", READERS, ids=lambda c: c[0])
def test_an_edited_failed_run_is_refused_by_every_reader(
    tmp_path: Path, ledger: Ledger, command: tuple[str, ...]
) -> None:
    run = "a" * 32
    _flip_outcome(ledger, run)
    length = ledger.store.tip(run)[0]
    line = _one_line_exit_1(tmp_path, *command, run)
    assert f"run {run}" in line
    assert ledger.store.tip(run)[0] == length  # nothing appended (no ApprovalIssued, no resume)


def test_questions_refuse_a_broken_run(tmp_path: Path, ledger: Ledger) -> None:
    _flip_outcome(ledger, "a" * 32)
    _one_line_exit_1(tmp_path, "questions", "--run", "a" * 32)


@pytest.mark.parametrize("command", [*READERS, ("runs",)], ids=lambda c: c[0])
def test_a_flipped_byte_that_breaks_the_json_is_one_line_not_a_traceback(
    tmp_path: Path, ledger: Ledger, command: tuple[str, ...]
) -> None:
    run = "a" * 32
    state = state_at(ledger, run, 3)
    header, payload = state.split(b"\n", 1)
    set_state(ledger, run, 3, header + b"\n" + payload.replace(b'"', b"'", 1))
    if command == ("runs",):
        result = run_ledger(tmp_path, "runs", "--json")
        assert result.code == 0 and '"status": "broken"' in result.stdout, result.stdout
        return
    assert "position 3" in _one_line_exit_1(tmp_path, *command, run)


def test_the_store_refuses_to_hand_out_a_broken_stream(tmp_path: Path, ledger: Ledger) -> None:
    from release_ledger.domain.errors import BrokenRun

    run = "a" * 32
    _flip_outcome(ledger, run)
    with pytest.raises(BrokenRun) as broken:
        ledger.read(run)
    # The recomputed chain is whole; only the run index's recorded tip gives it away.
    assert broken.value.position == 9
    verify = run_ledger(tmp_path, "verify", run)
    assert verify.code == 1


def test_reuse_skips_a_broken_earlier_run(tmp_path: Path, ledger: Ledger) -> None:
    """The result cache names earlier runs: a broken one is passed over, never trusted."""
    from release_ledger.ledger.read_side import cached_results
    from release_ledger.ledger.result_cache import content_keys
    from tests.runbuilder import RunBuilder

    keys = content_keys("2" * 40, {"tests/test_a.py": "b" * 40}, "none", "3.11", ["pytest"])
    key = keys.result_key("tests/test_a.py")
    assert key is not None
    keyed = {
        "commit": keys.commit,
        "blobs": dict(keys.blobs),
        "environment_key": keys.environment,
        "command_key": keys.command,
    }
    for run in ("d" * 32, "e" * 32):
        b = RunBuilder(run_id=run)
        b.discover(["tests/test_a.py"]).plan({"s1": ["tests/test_a.py"]})
        b.attempt("s1", "base", ["tests/test_a.py"], {"tests/test_a.py::test_a": "passed"},
                  **keyed)  # fmt: skip
        ledger.append(run, b.events, artifacts=b.artifacts)
    assert {h.run_id for h in cached_results(ledger, {"tests/test_a.py": key}).values()} <= {
        "d" * 32,
        "e" * 32,
    }
    for run in ("d" * 32, "e" * 32):  # break the newest source: the other one is taken
        found = cached_results(ledger, {"tests/test_a.py": key})["tests/test_a.py"].run_id
        if found != run:
            continue
        stored = state_at(ledger, run, 5)
        set_state(ledger, run, 5, stored.replace(b'"attempt":1', b'"attempt":7'))
        again = cached_results(ledger, {"tests/test_a.py": key})
        assert again["tests/test_a.py"].run_id != run
        break


def test_an_event_stored_behind_the_index_is_refused_while_concurrent_appends_are_not(
    ledger: Ledger,
) -> None:
    """Reads take the index first: events a writer commits meanwhile are not a break, but
    more events than the index has ever counted are."""
    from release_ledger.domain.errors import BrokenRun

    run = "a" * 32
    stored = len(ledger.read(run))
    ledger.store.execute_raw("UPDATE ledger_runs SET length = length - 1 WHERE run_id = ?", (run,))
    with pytest.raises(BrokenRun) as broken:
        ledger.read(run)
    assert f"{stored} events are stored but the run index records {stored - 1}" in str(broken.value)
