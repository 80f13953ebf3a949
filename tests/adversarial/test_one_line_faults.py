"""Every fault the tool meets is one line on stderr and exit 2, never a traceback or a hang,
and never damages what lies outside the ledger's own files (issue 26, part 6).

Real processes where the fault is the process's own (a FIFO that would block, a file size
limit, a read-only mount made in a private mount namespace).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from release_ledger.ledger.bootstrap import opened
from release_ledger.projections.html_report import _e
from tests.adversarial.kit import failed_run
from tests.gatekit import REPO_ROOT, run_ledger
from tests.gitrepo import commit, make_repo, tag

RUN = "a" * 32


def ledger_process(
    workdir: Path, *args: str, url: str | None = None, timeout: float = 60, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """`ledger ARGS` as its own process, bounded in time (a hang fails the test)."""
    url = url or f"sqlite:///{workdir / 'ledger' / 'ledger.db'}"
    return subprocess.run(
        [sys.executable, "-m", "release_ledger", *args, "--ledger", url], cwd=REPO_ROOT, text=True,
        capture_output=True, timeout=timeout, check=False, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("ledger: error: "), stderr
    return lines[0]


def stored_failed_run(tmp_path: Path) -> Path:
    path = tmp_path / "ledger" / "ledger.db"
    with opened(f"sqlite:///{path}") as ledger:
        failed_run(ledger, RUN)
    return path


@pytest.mark.parametrize("command", ["runs", "questions"])
@pytest.mark.parametrize("flag", ["--limit", "--offset"])
def test_a_page_beyond_sqlites_integers_is_exit_2(tmp_path: Path, command: str, flag: str) -> None:
    stored_failed_run(tmp_path)

    result = ledger_process(tmp_path, command, flag, str(10**20))

    assert result.returncode == 2
    assert "is not in the range" in one_error_line(result.stderr)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    made = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(made, "v1")
    commit(made, {"tests/test_b.py": "def test_b():\n    pass\n"})
    return made


def test_a_command_with_an_unclosed_quote_is_exit_2_and_writes_nothing(
    tmp_path: Path, repo: Path
) -> None:
    result = run_ledger(tmp_path, "gate", "--repo", str(repo), "--base", "v1",
                        "--command", '{python} -m "pytest --junitxml={junit} {files}')  # fmt: skip

    assert result.code == 2
    assert "No closing quotation" in one_error_line(result.stderr)
    assert not (tmp_path / "ledger" / "ledger.db").exists()


def test_a_repository_path_in_a_symlink_loop_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")

    result = run_ledger(tmp_path, "gate", "--repo", str(tmp_path / "a"), "--base", "v1")

    assert result.code == 2
    assert "--repo" in one_error_line(result.stderr)


def test_a_boolean_where_a_number_belongs_is_refused_not_read_as_one(
    tmp_path: Path, repo: Path
) -> None:
    commit(repo, {"pyproject.toml": "[tool.release-ledger]\nbudget-gib = true\n"})

    result = run_ledger(tmp_path, "gate", "--repo", str(repo), "--base", "v1")

    assert result.code == 2
    assert "budget-gib" in one_error_line(result.stderr)


def test_a_report_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "report.xml"
    os.mkfifo(fifo)

    result = ledger_process(tmp_path, "junit", str(fifo), timeout=30)

    assert result.returncode == 2
    assert "not a regular file" in one_error_line(result.stderr)


def test_a_ledger_path_that_is_no_regular_file_is_never_opened_created_or_chmod_ed(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "ledger.fifo"
    os.mkfifo(fifo, 0o644)

    result = ledger_process(tmp_path, "runs", url=f"sqlite:///{fifo}", timeout=30)

    assert result.returncode == 2
    assert "is not a regular file" in one_error_line(result.stderr)
    assert oct(fifo.stat().st_mode & 0o777) == oct(0o644)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.fifo"]  # no -journal beside


def test_an_output_file_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    stored_failed_run(tmp_path)
    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)

    result = ledger_process(tmp_path, "report", RUN, "--html", str(fifo), timeout=30)

    assert result.returncode == 2
    assert "not a regular file" in one_error_line(result.stderr)


def test_bidi_controls_from_the_suite_are_shown_escaped_in_the_html_page() -> None:
    shown = _e("tests/test_\u202eevil.py::test_\u2066x\u2069 <b>\nsecond line")

    assert "\u202e" not in shown and "\u2066" not in shown and "\u2069" not in shown
    assert "\\u202e" in shown and "&lt;b&gt;" in shown
    assert shown.endswith("\nsecond line")  # line breaks kept for <pre> blocks


def test_a_full_disk_is_exit_2_and_leaves_the_ledger_as_it_was(tmp_path: Path) -> None:
    path = stored_failed_run(tmp_path)
    with opened(f"sqlite:///{path}") as ledger:
        before = ledger.store.tip(RUN)
    size = path.stat().st_size

    def limit() -> None:  # writes past the ledger's size fail as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 16 * 1024, size + 16 * 1024))

    value = "x" * 100_000
    result = ledger_process(tmp_path, "check", RUN, "big", "--verdict", "pass", "--value", value,
                            preexec_fn=limit)  # fmt: skip

    assert result.returncode == 2, result.stderr
    assert "nothing was written" in one_error_line(result.stderr)
    with opened(f"sqlite:///{path}") as ledger:
        assert ledger.store.tip(RUN) == before
    verified = ledger_process(tmp_path, "verify", "--json")
    assert verified.returncode == 0
    assert json.loads(verified.stdout)["ok"] is True


def _read_only_mount_works(folder: Path) -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder}"],
        capture_output=True, check=False,
    )  # fmt: skip
    return probe.returncode == 0


def test_a_read_only_ledger_answers_every_reading_command_and_refuses_writing_ones(
    tmp_path: Path,
) -> None:
    path = stored_failed_run(tmp_path)
    folder = path.parent
    if not _read_only_mount_works(folder):
        pytest.skip("no private read-only mount here (needs root and unshare -m)")

    def read_only(*args: str) -> subprocess.CompletedProcess[str]:
        mounted = f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder}"
        line = " ".join([sys.executable, "-m", "release_ledger", *args, "--ledger", f"sqlite:///{path}"])
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", f"{mounted} && exec {line}"], cwd=REPO_ROOT,
            text=True, capture_output=True, timeout=120, check=False,
        )  # fmt: skip

    for reading in (["runs"], ["show", RUN], ["verdict", RUN], ["verify"], ["export", RUN],
                    ["questions"], ["audit", RUN]):  # fmt: skip
        done = read_only(*reading)
        assert done.returncode in (0, 1), (reading, done.stderr)  # 1: the run's verdict
        assert "Traceback" not in done.stderr, (reading, done.stderr)
    assert "failed" in read_only("verdict", RUN).stdout
    for writing in (["check", RUN, "docs", "--verdict", "pass"], ["approve", RUN], ["rebuild"]):
        done = read_only(*writing)
        assert done.returncode == 2, (writing, done.stdout, done.stderr)
        assert str(folder) in one_error_line(done.stderr), writing
