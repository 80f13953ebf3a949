"""Tampering with stored events or artifacts is found by `Ledger.verify` and `ledger verify`,
which name the run and the first broken position; an intact ledger verifies clean."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from release_ledger.domain import events as ev
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.errors import BrokenRun
from release_ledger.ledger.service import Ledger
from tests.adversarial.kit import ph, set_state, state_at
from tests.ledgerkit import measured, open_ledger, run_cli, start_run

REPORT = b"<testsuite name='a' tests='3' failures='0'/>"


@pytest.fixture
def filled(ledger_url: str) -> Iterator[tuple[Ledger, str, str]]:
    """A ledger with a victim run of 6 events (event 4 references REPORT) and a bystander."""
    ledger = open_ledger(ledger_url)
    bystander = start_run(ledger)
    ledger.append(bystander, [measured(ledger, bystander, i) for i in range(3)])
    run = start_run(ledger)
    ledger.append(run, [measured(ledger, run, 1), measured(ledger, run, 2)])
    ledger.record(
        run,
        ev.ShardAttemptRecorded,
        artifacts={sha256_hex(REPORT): REPORT},
        shard="s1",
        attempt=1,
        revision="head",
        files=["tests/a.py"],
        exit_code=0,
        report_hash=sha256_hex(REPORT),
    )
    ledger.append(run, [measured(ledger, run, 3), measured(ledger, run, 4)])
    yield ledger, run, bystander
    ledger.close()


def _delete(ledger: Ledger, run: str, position: int) -> None:
    mark = ph(ledger)
    ledger.store.execute_raw(
        f"DELETE FROM ledger_events WHERE originator_id = {mark} AND originator_version = {mark}",
        (run, position),
    )


def _broken(ledger: Ledger, run: str) -> tuple[bool, int | None, str]:
    (result,) = ledger.verify(run)
    assert result.run_id == run
    return result.ok, result.position, result.problem or ""


def _cli_verify(url: str, run: str, tmp_path: Path) -> tuple[int, dict[str, object], str]:
    done = run_cli("verify", run[:8], "--json", "--ledger", url, cwd=tmp_path)
    assert done.stderr == ""
    document = json.loads(done.stdout)
    (entry,) = document["runs"]
    assert entry["run_id"] == run
    return done.returncode, entry, str(document["ok"])


def test_intact_ledger_verifies(
    filled: tuple[Ledger, str, str], ledger_url: str, tmp_path: Path
) -> None:
    ledger, run, bystander = filled
    assert [(r.run_id, r.ok, r.events) for r in ledger.verify()] == sorted(
        [(run, True, 6), (bystander, True, 4)]
    )
    code, entry, ok = _cli_verify(ledger_url, run, tmp_path)
    assert (code, entry["ok"], entry["position"], ok) == (0, True, None, "True")
    done = run_cli("verify", "--ledger", ledger_url, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.count("intact") == 2


def test_edited_event_is_found(
    filled: tuple[Ledger, str, str], ledger_url: str, tmp_path: Path
) -> None:
    ledger, run, bystander = filled
    state = state_at(ledger, run, 3)
    assert b'"rss_mb":2.0' in state
    set_state(ledger, run, 3, state.replace(b'"rss_mb":2.0', b'"rss_mb":1.0'))
    ok, position, problem = _broken(ledger, run)
    assert (ok, position) == (False, 3) and "edited" in problem
    code, entry, _ = _cli_verify(ledger_url, run, tmp_path)
    assert (code, entry["ok"], entry["position"]) == (1, False, 3)
    assert [r.ok for r in ledger.verify(bystander)] == [True]


def test_event_replaced_by_garbage_is_found(filled: tuple[Ledger, str, str]) -> None:
    ledger, run, _ = filled
    set_state(ledger, run, 2, b"\xff\x00not an event")
    assert _broken(ledger, run)[:2] == (False, 2)


def test_rehashed_edit_still_breaks_the_next_link(filled: tuple[Ledger, str, str]) -> None:
    """An editor who recomputes the edited event's own hash still breaks its successor."""
    from release_ledger.domain.chain import decode_state, link

    ledger, run, _ = filled
    header, payload = decode_state(state_at(ledger, run, 3))
    _, state = link(header["prev"], payload.replace(b'"rss_mb":2.0', b'"rss_mb":1.0'))
    set_state(ledger, run, 3, state)
    ok, position, problem = _broken(ledger, run)
    assert (ok, position) == (False, 4) and "predecessor" in problem


def test_deleted_event_is_found(
    filled: tuple[Ledger, str, str], ledger_url: str, tmp_path: Path
) -> None:
    ledger, run, _ = filled
    _delete(ledger, run, 2)
    ok, position, problem = _broken(ledger, run)
    assert (ok, position) == (False, 2) and "missing" in problem
    code, entry, _ = _cli_verify(ledger_url, run, tmp_path)
    assert (code, entry["position"]) == (1, 2)


def test_reordered_events_are_found(
    filled: tuple[Ledger, str, str], ledger_url: str, tmp_path: Path
) -> None:
    ledger, run, _ = filled
    second, third = state_at(ledger, run, 2), state_at(ledger, run, 3)
    set_state(ledger, run, 2, third)
    set_state(ledger, run, 3, second)
    ok, position, problem = _broken(ledger, run)
    assert (ok, position) == (False, 2) and "reordered" in problem
    code, entry, _ = _cli_verify(ledger_url, run, tmp_path)
    assert (code, entry["position"]) == (1, 2)


def test_deleted_last_event_is_found_by_the_run_index(
    filled: tuple[Ledger, str, str], ledger_url: str, tmp_path: Path
) -> None:
    ledger, run, _ = filled
    _delete(ledger, run, 6)
    ok, position, problem = _broken(ledger, run)
    assert (ok, position) == (False, 6) and "run index records 6 events but 5" in problem
    code, entry, _ = _cli_verify(ledger_url, run, tmp_path)
    assert (code, entry["position"]) == (1, 6)


def test_truncation_with_a_forged_index_length_is_found_by_the_tip(
    filled: tuple[Ledger, str, str],
) -> None:
    ledger, run, _ = filled
    _delete(ledger, run, 6)
    mark = ph(ledger)
    ledger.store.execute_raw(f"UPDATE ledger_runs SET length = 5 WHERE run_id = {mark}", (run,))
    ok, position, problem = _broken(ledger, run)
    assert (ok, position) == (False, 5) and "chain tip" in problem


def test_event_copied_from_another_run_is_found(filled: tuple[Ledger, str, str]) -> None:
    ledger, run, bystander = filled
    set_state(ledger, bystander, 2, state_at(ledger, run, 2))
    (result,) = ledger.verify(bystander)
    assert (result.ok, result.position) == (False, 2)


def test_altered_artifact_is_found(
    filled: tuple[Ledger, str, str], ledger_url: str, tmp_path: Path
) -> None:
    ledger, run, bystander = filled
    mark = ph(ledger)
    ledger.store.execute_raw(
        f"UPDATE ledger_artifacts SET data = {mark} WHERE sha256 = {mark}",
        (REPORT.replace(b"0", b"1"), sha256_hex(REPORT)),
    )
    ok, position, problem = _broken(ledger, run)
    assert (ok, position) == (False, 4) and "no longer matches" in problem
    code, entry, ok_all = _cli_verify(ledger_url, run, tmp_path)
    assert (code, entry["position"], ok_all) == (1, 4, "False")
    assert [r.ok for r in ledger.verify(bystander)] == [True]


def test_deleted_artifact_is_found(filled: tuple[Ledger, str, str]) -> None:
    ledger, run, _ = filled
    mark = ph(ledger)
    ledger.store.execute_raw(
        f"DELETE FROM ledger_artifacts WHERE sha256 = {mark}", (sha256_hex(REPORT),)
    )
    ok, position, problem = _broken(ledger, run)
    assert (ok, position) == (False, 4) and "missing" in problem


def test_verify_all_names_the_broken_run_in_text(
    filled: tuple[Ledger, str, str], ledger_url: str, tmp_path: Path
) -> None:
    ledger, run, bystander = filled
    _delete(ledger, run, 5)
    done = run_cli("verify", "--ledger", ledger_url, cwd=tmp_path)
    assert done.returncode == 1
    assert f"{run}: BROKEN at position 5" in done.stdout
    assert f"{bystander}: intact (4 events)" in done.stdout


def test_stream_missing_from_the_run_index_is_found(filled: tuple[Ledger, str, str]) -> None:
    ledger, run, _ = filled
    mark = ph(ledger)
    ledger.store.execute_raw(f"DELETE FROM ledger_runs WHERE run_id = {mark}", (run,))
    broken = [r for r in ledger.verify() if not r.ok]
    assert [(r.run_id, r.position) for r in broken] == [(run, 1)]


def test_header_fast_path_reads_what_json_reads() -> None:
    from release_ledger.domain.chain import decode_state, link

    _, state = link("ab" * 32, b'{"kind":"RunCompleted"}')
    header, payload = decode_state(state)
    raw_header = json.loads(state.partition(b"\n")[0])
    assert header == raw_header and payload == b'{"kind":"RunCompleted"}'
    odd = b'{"prev": "x", "hash": "y"}\n{}'  # another layout still decodes, through json
    assert decode_state(odd) == ({"prev": "x", "hash": "y"}, b"{}")
    from release_ledger.domain.chain import split_state

    assert split_state(state) == (header["hash"], header["prev"], payload)
    assert split_state(odd) == ("y", "x", b"{}")


def test_payload_stored_under_another_kind_is_refused_and_found(
    filled: tuple[Ledger, str, str],
) -> None:
    ledger, run, _ = filled
    mark = ph(ledger)
    ledger.store.execute_raw(
        f"UPDATE ledger_events SET topic = {mark} WHERE originator_id = {mark} "
        f"AND originator_version = 2",
        ("RunCompleted", run),
    )
    with pytest.raises(BrokenRun, match=r"broken at position 2 .stored RunCompleted holds a Fi"):
        ledger.read(run)
    ok, position, problem = _broken(ledger, run)
    assert (ok, position) == (False, 2) and "stored kind" in problem


def _forge_tip(ledger: Ledger, run: str) -> None:
    """Delete the last event and make the run index agree on the length (not the tip)."""
    _delete(ledger, run, 6)
    mark = ph(ledger)
    ledger.store.execute_raw(f"UPDATE ledger_runs SET length = 5 WHERE run_id = {mark}", (run,))


def _rehash(ledger: Ledger, run: str) -> None:
    from release_ledger.domain.chain import decode_state, link

    header, payload = decode_state(state_at(ledger, run, 3))
    set_state(ledger, run, 3, link(header["prev"], payload.replace(b"2.0", b"1.0"))[1])


@pytest.mark.parametrize(
    "tamper",
    [
        lambda led, run: set_state(
            led, run, 3, state_at(led, run, 3).replace(b'"rss_mb":2.0', b'"rss_mb":1.0')
        ),
        lambda led, run: set_state(led, run, 2, b"\xff\x00not an event"),
        _rehash,
        lambda led, run: _delete(led, run, 2),
        lambda led, run: (
            (second := state_at(led, run, 2)),
            set_state(led, run, 2, state_at(led, run, 3)),
            set_state(led, run, 3, second),
        ),
        lambda led, run: _delete(led, run, 6),
        _forge_tip,
    ],
    ids=["edited", "garbage", "rehashed", "deleted", "reordered", "last-deleted", "forged-tip"],
)
def test_the_run_list_shows_a_tampered_run_as_broken(
    filled: tuple[Ledger, str, str], tamper: Any
) -> None:
    """`ledger runs` checks each listed run's chain in one read of the page (on PostgreSQL
    by the server's own sha256): the tampered run is `broken`, its neighbour is not."""
    from release_ledger.ledger import read_side

    ledger, run, bystander = filled
    before = {row["run_id"]: row["status"] for row in read_side.list_runs(ledger)}
    assert before[run] != "broken" and before[bystander] != "broken"
    tamper(ledger, run)
    after = {row["run_id"]: row["status"] for row in read_side.list_runs(ledger)}
    assert after[run] == "broken"
    assert after[bystander] == before[bystander]
