"""Every read and write of the command line is bounded (issue 38, part 6): an output that is a
device or lands on a full disk, a key or bundle that never ends or nests 200,000 deep, a
`--views` file that is the user's own: one line on stderr, exit 2, nothing written. Before:
a traceback (`--out /dev/full`), a read for ever (`--key /dev/zero`), a RecursionError, and
the user's notes overwritten by a SQLite database. Real `ledger` processes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from release_ledger.adapters.executors import sandbox
from tests.adversarial.kit import failed_run
from tests.gatekit import ledger_command, ledger_url, process_env
from tests.ledgerkit import open_ledger

RUN = "a" * 32


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "ledger").mkdir()
    ledger = open_ledger(ledger_url(tmp_path))
    try:
        failed_run(ledger, RUN)
    finally:
        ledger.close()
    return tmp_path


def ledger(workdir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ledger_command(workdir, *args), cwd=workdir, env=process_env(workdir),
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2 with one `ledger: error:` line naming `words`, and no traceback."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledger: error: "), done.stderr
    assert all(word in lines[0] for word in words), lines[0]


def approvals(workdir: Path) -> int:
    done = ledger(workdir, "export", RUN)
    return done.stdout.count('"ApprovalIssued"') + done.stdout.count('"AttestationIssued"')


@pytest.mark.parametrize("command", [("approve", RUN), ("attest", RUN)])
def test_an_output_that_is_a_device_is_one_line_and_nothing_is_recorded(
    workdir: Path, command: tuple[str, ...]
) -> None:
    done = ledger(workdir, *command, "--out", "/dev/full")
    one_line(done, "--out /dev/full", "not a regular file")
    assert approvals(workdir) == 0


def test_report_outputs_that_are_devices_are_refused(workdir: Path) -> None:
    one_line(ledger(workdir, "report", RUN, "--html", "/dev/full"), "--html /dev/full")
    one_line(ledger(workdir, "report", RUN, "--junit-out", "/dev/null"), "--junit-out")


def test_an_output_on_a_full_disk_is_one_line_and_the_old_file_is_untouched(
    workdir: Path,
) -> None:
    if sandbox.bwrap() is None or shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is missing or cannot make namespaces here: no small disk")
    disk = workdir / "small"
    disk.mkdir()
    report = disk / "report.md"
    script = (
        f"echo old > {report} && head -c 1000000 /dev/zero > {disk}/filler 2>/dev/null; "
        f"{' '.join(ledger_command(workdir, 'approve', RUN, '--out', str(report)))}"
    )
    argv = [shutil.which("bwrap") or "bwrap", "--bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc", "--size", str(64 * 1024), "--tmpfs", str(disk),
            "--", "sh", "-c", script + f"; code=$?; cat {report}; exit $code"]  # fmt: skip
    done = subprocess.run(argv, cwd=workdir, env=process_env(workdir), capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout.rstrip().endswith("old")  # what the disk held is what it held before
    errors = [line for line in done.stderr.splitlines() if line.startswith("ledger: error")]
    assert errors == [f"ledger: error: --out {report}: cannot write: No space left on device"]
    assert "Traceback" not in done.stderr


def test_a_key_that_never_ends_is_refused_not_read_for_ever(workdir: Path) -> None:
    one_line(ledger(workdir, "attest", RUN, "--key", "/dev/zero", timeout=30), "--key /dev/zero")
    big = workdir / "big.key"
    big.write_bytes(b"-----BEGIN PRIVATE KEY-----\n" + b"A" * 200_000)
    big.chmod(0o600)
    one_line(ledger(workdir, "attest", RUN, "--key", str(big)), "larger than 64 KiB")
    assert approvals(workdir) == 0


def test_a_bundle_or_key_that_never_ends_or_waits_for_a_writer_is_refused(
    workdir: Path,
) -> None:
    key = workdir / "release.key"
    assert ledger(workdir, "attest", "--generate-key", str(key)).returncode == 0
    public = f"{key}.pub"
    one_line(ledger(workdir, "verify-attestation", "/dev/zero", "--pub", public, timeout=30),
             "bundle /dev/zero")  # fmt: skip
    one_line(ledger(workdir, "verify-attestation", public, "--pub", "/dev/zero", timeout=30),
             "--pub /dev/zero")  # fmt: skip
    fifo = workdir / "pipe"
    os.mkfifo(fifo)
    one_line(ledger(workdir, "verify-attestation", str(fifo), "--pub", public, timeout=30),
             "not a regular file")  # fmt: skip


def test_a_bundle_nested_200000_deep_is_one_line(workdir: Path) -> None:
    key = workdir / "release.key"
    assert ledger(workdir, "attest", "--generate-key", str(key)).returncode == 0
    deep = workdir / "deep.jsonl"
    deep.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    done = ledger(workdir, "verify-attestation", str(deep), "--pub", f"{key}.pub")
    one_line(done, "nests too deeply")


def test_views_never_overwrite_a_file_that_is_not_views(workdir: Path) -> None:
    notes = workdir / "notes.txt"
    notes.write_text("my notes\n")
    one_line(ledger(workdir, "rebuild", "--views", str(notes)), "not a views file")
    assert notes.read_text() == "my notes\n"
    database = workdir / "ledger" / "ledger.db"
    before = database.read_bytes()
    one_line(ledger(workdir, "rebuild", "--views", str(database)), "not a views file")
    assert database.read_bytes() == before
    one_line(ledger(workdir, "rebuild", "--views", "/dev/null"), "not a regular file")
    views = workdir / "mine.views.db"
    assert ledger(workdir, "rebuild", "--views", str(views)).returncode == 0
    assert ledger(workdir, "rebuild", "--views", str(views)).returncode == 0  # its own: again


def test_an_output_through_a_link_writes_the_file_it_names_and_keeps_the_link(
    workdir: Path,
) -> None:
    real = workdir / "summary.md"
    real.write_text("old\n")
    link = workdir / "link.md"
    link.symlink_to(real)
    assert ledger(workdir, "approve", RUN, "--out", str(link)).returncode == 1  # failed run
    assert link.is_symlink() and "approval" in real.read_text()
