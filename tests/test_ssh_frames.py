"""Answers from the host count only when whole and matching their sha256; faults are named."""

from __future__ import annotations

import hashlib
import json

import pytest

from release_ledger.adapters.executors.ssh.faults import classify_ssh_failure
from release_ledger.adapters.executors.ssh.remote import (
    FrameError,
    parse_frame,
    session_started,
    temporary_dir,
)

REPORT = b"<testsuites><testsuite tests='1'><testcase name='t'/></testsuite></testsuites>"
LOG = b"1 passed in 0.01s\n"


def answer(report: bytes | None = REPORT, log: bytes = LOG, **header_changes: object) -> bytes:
    header = {
        "exit_code": 0,
        "signal": None,
        "timed_out": False,
        "oom": False,
        "rss_kb": 40960,
        "seconds": 1.5,
        "report_size": -1 if report is None else len(report),
        "report_sha256": hashlib.sha256(report or b"").hexdigest(),
        "log_size": len(log),
        "log_sha256": hashlib.sha256(log).hexdigest(),
    } | header_changes
    prelude = b"release-ledger-started\nrelease-ledger-tmp /tmp/release-ledger.AbC123\n"
    return (
        prelude
        + b"release-ledger-frame "
        + json.dumps(header).encode()
        + b"\n"
        + (report or b"")
        + log
    )


def test_a_whole_answer_gives_the_report_and_log_tail_bytes_exactly() -> None:
    frame = parse_frame(b"motd printed by a login shell\n" + answer())
    assert (frame.report, frame.log_tail, frame.exit_code, frame.rss_kb) == (REPORT, LOG, 0, 40960)


def test_the_tracked_files_the_tests_changed_on_the_host_come_back() -> None:
    assert parse_frame(answer()).modified_files == ()
    frame = parse_frame(answer(modified_files=["tests/test_victim.py"]))
    assert frame.modified_files == ("tests/test_victim.py",)


def test_no_report_is_none_not_empty_bytes() -> None:
    assert parse_frame(answer(report=None)).report is None


def test_an_answer_cut_short_is_incomplete() -> None:
    with pytest.raises(FrameError, match="cut short") as raised:
        parse_frame(answer()[:-5])
    assert raised.value.complete is False


def test_bytes_that_do_not_match_their_sha256_are_rejected() -> None:
    tampered = answer().replace(b"testcase name='t'", b"testcase name='u'")
    with pytest.raises(FrameError, match="sha256") as raised:
        parse_frame(tampered)
    assert raised.value.complete is True


def test_no_header_at_all_is_no_answer() -> None:
    with pytest.raises(FrameError, match="no answer"):
        parse_frame(b"release-ledger-started\n")


def test_the_temporary_directory_is_read_only_when_it_has_the_expected_shape() -> None:
    assert temporary_dir(answer()) == "/tmp/release-ledger.AbC123"
    assert temporary_dir(b"release-ledger-tmp /etc\n") is None
    assert session_started(answer()) and not session_started(b"")


@pytest.mark.parametrize(
    ("stderr", "started", "reason"),
    [
        ("ssh: connect to host h port 22: Connection refused", False, "ssh-connect"),
        ("ssh: Could not resolve hostname nope: Name or service not known", False, "ssh-connect"),
        ("ssh: connect to host 10.9.9.9 port 22: Connection timed out", False, "ssh-connect"),
        ("kex_exchange_identification: read: Connection reset by peer", False, "ssh-connect"),
        ("ci@h: Permission denied (publickey).", False, "ssh-auth"),
        ("Host key verification failed.", False, "ssh-auth"),
        ("Connection to h closed by remote host.", True, "ssh-dropped"),
        ("client_loop: send disconnect: Broken pipe", True, "ssh-dropped"),
        ("Timeout, server h not responding.", True, "ssh-dropped"),
    ],
)
def test_ssh_client_failures_are_named(stderr: str, started: bool, reason: str) -> None:
    assert classify_ssh_failure(stderr, session_started=started) == reason
