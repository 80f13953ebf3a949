"""Every read is as strict as `ledger verify` (issue 26, part 5): what a forger with write
access to the database (but not the key file beside it) changes is never answered from.

- a kept reading edited from `failed` to `passed` and resealed with an unkeyed digest;
- a remembered verdict status set to `passed` by SQL;
- a report's bytes replaced (a failed run must not read as unmeasured);
- the last event deleted and the run index fixed to match (verify, resume and expire).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

from release_ledger.ledger import kept_readings, queries
from release_ledger.ledger.bootstrap import opened
from release_ledger.ledger.service import Ledger
from tests.adversarial.kit import failed_run, ph, state_at
from tests.gatekit import run_ledger

RUN = "b" * 32


def _stored(tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "ledger" / "ledger.db"
    url = f"sqlite:///{path}"
    with opened(url) as ledger:
        failed_run(ledger, RUN)
        queries.run_reading(ledger, RUN)  # kept, as after `ledger show`
    return url, path


def test_a_kept_reading_resealed_without_the_key_is_not_believed(tmp_path: Path) -> None:
    url, _ = _stored(tmp_path)
    with opened(url) as ledger:
        kept = ledger.store.kept_reading(RUN)
        assert kept is not None and '"status":"failed"' in kept.body
        forged = kept.body.replace('"status":"failed"', '"status":"passed"')
        head = json.dumps([RUN, kept.length, kept.tip, kept.code]).encode()
        unkeyed = hashlib.sha256(head + b"\n" + forged.encode()).hexdigest()
        mark = ph(ledger)
        ledger.store.execute_raw(
            f"UPDATE ledger_readings SET body = {mark}, seal = {mark} WHERE run_id = {mark}",
            (zlib.compress(forged.encode()), unkeyed, RUN),
        )

    shown = run_ledger(tmp_path, "verdict", RUN, "--json")

    assert shown.code == 1
    assert json.loads(shown.stdout)["status"] == "failed"
    assert "verdict under rule default: failed" in run_ledger(tmp_path, "show", RUN).stdout


def test_a_verdict_status_set_by_hand_is_computed_again(tmp_path: Path) -> None:
    url, _ = _stored(tmp_path)
    listed = json.loads(run_ledger(tmp_path, "runs", "--json").stdout)
    assert [r["status"] for r in listed] == ["failed"]
    with opened(url) as ledger:
        ledger.store.execute_raw(f"UPDATE ledger_status SET verdict = 'passed' WHERE run_id = {ph(ledger)}", (RUN,))  # noqa: E501

    listed = json.loads(run_ledger(tmp_path, "runs", "--json").stdout)

    assert [r["status"] for r in listed] == ["failed"]


def test_replaced_report_bytes_make_every_reading_command_say_broken(tmp_path: Path) -> None:
    url, _ = _stored(tmp_path)
    with opened(url) as ledger:
        mark = ph(ledger)
        (digest,) = [
            str(row[0])
            for row in ledger.store._query("SELECT sha256 FROM ledger_artifacts")
            if b"failure" in ledger.store.artifact(str(row[0])) or b""  # the failing report
        ][:1]
        ledger.store.execute_raw(
            f"UPDATE ledger_artifacts SET data = {mark} WHERE sha256 = {mark}",
            (b"<testsuite/>", digest),
        )

    for command in (["show", RUN], ["verdict", RUN], ["approve", RUN], ["report", RUN, "--html",
                    str(tmp_path / "page.html")]):  # fmt: skip
        result = run_ledger(tmp_path, *command)
        assert result.code == 1, (command, result.stdout, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "is broken" in lines[0] and digest in lines[0], command
    assert run_ledger(tmp_path, "verify").code == 1


def _drop_last_event_and_fix_the_index(ledger: Ledger) -> None:
    mark = ph(ledger)
    length = int(ledger.store.tip(RUN)[0])
    new_tip = state_at(ledger, RUN, length - 1)[10:74].decode()
    ledger.store.execute_raw(
        f"DELETE FROM ledger_events WHERE originator_id = {mark} AND originator_version = {mark}",
        (RUN, length),
    )
    ledger.store.execute_raw(
        f"UPDATE ledger_runs SET length = {mark}, tip = {mark} WHERE run_id = {mark}",
        (length - 1, new_tip, RUN),
    )


def test_a_run_cut_short_with_its_index_fixed_is_broken_for_verify_resume_and_expire(
    tmp_path: Path,
) -> None:
    url, _ = _stored(tmp_path)
    with opened(url) as ledger:
        before = ledger.store.tip(RUN)
        _drop_last_event_and_fix_the_index(ledger)

    verified = run_ledger(tmp_path, "verify", RUN, "--json")
    assert verified.code == 1
    (result,) = json.loads(verified.stdout)["runs"]
    assert result["ok"] is False and "sealed run" in result["problem"]
    for command in (["resume", RUN], ["expire", "--run", RUN], ["show", RUN]):
        done = run_ledger(tmp_path, *command)
        assert done.code == 1, (command, done.stdout, done.stderr)
        assert "is broken" in done.stderr, command
    with opened(url) as ledger:
        assert ledger.store.tip(RUN)[0] == before[0] - 1  # nothing was appended to it


def test_a_forger_cannot_reseal_a_kept_reading_with_the_old_unkeyed_seal_either(
    tmp_path: Path,
) -> None:
    """The seal is keyed: what `kept_readings` writes is not what sha256 alone gives."""
    url, path = _stored(tmp_path)
    assert (path.parent / "ledger.db.key").stat().st_mode & 0o777 == 0o600
    with opened(url) as ledger:
        kept = ledger.store.kept_reading(RUN)
        assert kept is not None
        head = json.dumps([RUN, kept.length, kept.tip, kept.code]).encode()
        assert kept.seal != hashlib.sha256(head + b"\n" + kept.body.encode()).hexdigest()
        assert kept_readings.run_reading(ledger, RUN)["verdict"]["status"] == "failed"
