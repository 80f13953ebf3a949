"""6. Every option value is validated before anything is written. On today's main `--timeout
nan`, `--deadline nan|inf` and `--budget-gib nan|inf` crashed after `RunStarted` was written,
`--deadline 1e12h` crashed after every test ran, `--jobs 0` was silently the CPU count,
`--base` equal to `--head` was gated, `approve --out` to an unwritable path crashed after
`ApprovalIssued` was appended, and a corrupt `views.db` could not be repaired by `ledger
rebuild`."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.adversarial.kit import failed_run
from tests.gatekit import GATE_DEFAULTS, ledger_url, run_ledger
from tests.gitrepo import commit, make_repo, tag, write
from tests.ledgerkit import open_ledger

BAD = [
    ("--timeout", "nan"),
    ("--timeout", "inf"),
    ("--timeout", "-1"),
    ("--timeout", "0"),
    ("--timeout", "1e12"),
    ("--deadline", "nan"),
    ("--deadline", "inf"),
    ("--deadline", "nanm"),
    ("--deadline", "1e12h"),
    ("--deadline", "9000h"),
    ("--deadline", "0"),
    ("--budget-gib", "nan"),
    ("--budget-gib", "inf"),
    ("--budget-gib", "-2"),
    ("--budget-gib", "0"),
    ("--jobs", "0"),
    ("--jobs", "-3"),
    ("--shards", "0"),
    ("--rounds", "-1"),
    ("--questions", "-1"),
    ("--max-report-mb", "nan"),
    ("--max-report-mb", "0"),
    ("--capacity", "0"),
    ("--ssh-port", "0"),
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")
    commit(repo, {"tests/test_a.py": "def test_a():\n    assert 0\n"}, "regression")
    return repo


def _no_runs(tmp_path: Path) -> bool:
    db = tmp_path / "ledger" / "ledger.db"
    if not db.exists():
        return True
    return run_ledger(tmp_path, "runs", "--json").stdout.strip() in ("[]", "")


@pytest.mark.parametrize(("option", "value"), BAD, ids=lambda v: str(v))
def test_a_bad_number_is_exit_2_one_line_and_no_event(
    tmp_path: Path, repo: Path, option: str, value: str
) -> None:
    executor = {
        "--capacity": ["--executor", "kubernetes", "--pool", "ctx"],
        "--ssh-port": ["--executor", "ssh", "--host", "ci@build-1"],
    }.get(option, [])
    args = ["gate", "--base", "v1", "--repo", str(repo), *GATE_DEFAULTS, *executor, option, value]
    result = run_ledger(tmp_path, *args)
    assert result.code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledger: error:"), result.stderr
    assert _no_runs(tmp_path)


def test_base_equal_to_head_is_refused(tmp_path: Path, repo: Path) -> None:
    result = run_ledger(tmp_path, "gate", "--base", "main", "--head", "HEAD", "--repo", str(repo))
    assert result.code == 2 and "same commit" in result.stderr, result.stderr
    assert _no_runs(tmp_path)


def test_uncommitted_changes_are_named_in_a_warning(tmp_path: Path, repo: Path) -> None:
    write(repo, {"tests/test_a.py": "def test_a():\n    pass  # fixed, but not committed\n"})
    # The warning comes before the gate starts; a refused --base shows it without a run.
    result = run_ledger(tmp_path, "gate", "--base", "HEAD", "--repo", str(repo))
    assert "uncommitted changes" in result.stderr and "committed --head HEAD" in result.stderr


def test_approve_to_an_unwritable_path_appends_no_approval(tmp_path: Path) -> None:
    ledger = open_ledger(ledger_url(tmp_path))
    run = failed_run(ledger)
    length = ledger.store.tip(run)[0]
    (tmp_path / "out").symlink_to(tmp_path / "missing" / "report.md")  # dangling: unwritable
    result = run_ledger(tmp_path, "approve", run, "--out", str(tmp_path / "out"))
    assert result.code == 2 and "cannot write" in result.stderr, result.stderr
    assert ledger.store.tip(run)[0] == length
    ledger.close()


def test_approve_out_receives_the_report(tmp_path: Path) -> None:
    ledger = open_ledger(ledger_url(tmp_path))
    run = failed_run(ledger)
    ledger.close()
    out = tmp_path / "summary.md"
    out.write_text("stale\n" * 100)
    result = run_ledger(tmp_path, "approve", run, "--out", str(out))
    assert result.code == 1
    assert out.read_text() == result.stdout


@pytest.mark.parametrize("kind", ["garbage", "foreign", "truncated", "other-ledger"])
def test_a_bad_views_file_is_rebuilt(tmp_path: Path, kind: str) -> None:
    ledger = open_ledger(ledger_url(tmp_path))
    run = failed_run(ledger)
    ledger.close()
    views = tmp_path / "ledger" / "ledger.views.db"
    assert run_ledger(tmp_path, "rebuild").code == 0
    good = views.read_bytes()
    if kind == "garbage":
        views.write_bytes(b"\x00garbage" * 1000)
    elif kind == "truncated":
        views.write_bytes(good[: len(good) // 3])
    elif kind == "foreign":
        views.unlink()
        conn = sqlite3.connect(views)
        conn.execute("CREATE TABLE runs (x TEXT)")
        conn.execute("INSERT INTO runs VALUES ('not ours')")
        conn.commit()
        conn.close()
    else:
        other = tmp_path / "other"
        second = open_ledger(ledger_url(other))
        failed_run(second, "b" * 32)
        failed_run(second, "c" * 32)
        second.close()
        assert run_ledger(other, "rebuild").code == 0
        views.write_bytes((other / "ledger" / "ledger.views.db").read_bytes())
    # The catch-up after a write finds it so and rebuilds it...
    checked = run_ledger(tmp_path, "check", run, "docs", "--verdict", "pass")
    assert checked.code == 0, checked.stderr
    assert "not updated" not in checked.stderr
    conn = sqlite3.connect(views)
    assert [r[0] for r in conn.execute("SELECT run_id FROM runs")] == [run]
    conn.close()
    # ... and `ledger rebuild` always can, proving it with `--check`.
    views.write_bytes(b"\x00garbage" * 1000)
    assert run_ledger(tmp_path, "rebuild").code == 0
    assert run_ledger(tmp_path, "rebuild", "--check").code == 0
