"""Answers from the host count only when whole and matching their sha256; faults are named."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from release_ledger.adapters.executors.ssh.faults import classify_ssh_failure
from release_ledger.adapters.executors.ssh.remote import (
    CLEANUP_SCRIPT,
    FrameError,
    parse_frame,
    remote_command,
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
    ("line", "read"),
    [
        (b"/scratch/ci-1/release-ledger.AbC123", True),  # a host's own TMPDIR
        (b"/home/ci user/.tmp/release-ledger.AbC123", True),  # a space, a dot folder
        (b"/release-ledger.AbC123", True),  # TMPDIR=/
        (b"/scratch/../etc/release-ledger.AbC123", False),
        (b"/scratch/./release-ledger.AbC123", False),
        (b"/scratch/..", False),
        (b"//release-ledger.AbC123", False),
        (b"scratch/release-ledger.AbC123", False),
        (b"/scratch/release-ledger.AbC123/../../etc", False),
        (b"/scratch/release-ledger.", False),
    ],
)
def test_a_temporary_directory_anywhere_absolute_is_read_but_never_one_that_climbs(
    line: bytes, read: bool
) -> None:
    assert (temporary_dir(b"release-ledger-tmp " + line + b"\n") is not None) is read


def cleanup_on_host(tmpdir: str | None, *folders: Path) -> None:
    """Run the cleanup script here as the host's login shell would, with this `TMPDIR`."""
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    if tmpdir is not None:
        env["TMPDIR"] = tmpdir
    command = remote_command(CLEANUP_SCRIPT, os.environ["PATH"], "-", *map(str, folders))
    subprocess.run(["/bin/sh", "-c", command], env=env, check=True, capture_output=True)


def test_the_hosts_cleanup_removes_only_shard_folders_in_its_own_tmpdir(tmp_path: Path) -> None:
    own, other = tmp_path / "own", tmp_path / "other"
    folders = []
    for parent in (own, other):
        parent.mkdir()
        folders.append(Path(tempfile.mkdtemp(prefix="release-ledger.", dir=parent)))
    not_a_shard = own / "kept"
    not_a_shard.mkdir()
    cleanup_on_host(f"{own}/", *folders, not_a_shard)  # a trailing slash is the same folder
    assert [f.exists() for f in folders] == [False, True]
    assert not_a_shard.exists()


@pytest.mark.parametrize("tmpdir", [None, "relative/tmp"])
def test_without_an_absolute_tmpdir_the_hosts_cleanup_means_tmp(
    tmpdir: str | None, tmp_path: Path
) -> None:
    in_tmp = Path(tempfile.mkdtemp(prefix="release-ledger.", dir="/tmp"))
    elsewhere = Path(tempfile.mkdtemp(prefix="release-ledger.", dir=tmp_path))
    try:
        cleanup_on_host(tmpdir, in_tmp, elsewhere)
        assert not in_tmp.exists() and elsewhere.exists()
    finally:
        subprocess.run(["rm", "-rf", str(in_tmp)], check=False)


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
