"""Every bad-input path of the `ledger` command: exit 2, one `ledger: error:` line on stderr,
no traceback, nothing written. And every subcommand's --help shows an example."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.ledgerkit import open_ledger, run_cli, start_run

READ_COMMANDS = [("runs",), ("show", "abcd"), ("export", "abcd"), ("verify",)]
# Every command opens the ledger the same way: most file checks run two of them, to stay fast.
SOME_COMMANDS = [("runs",), ("show", "abcd")]


def assert_bad_input(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, exactly one stderr line starting `ledger: error:`, nothing else printed."""
    lines = done.stderr.splitlines()
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("ledger: error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stdout == ""
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def snapshot(directory: Path) -> dict[str, tuple[str, int]]:
    """Every file under `directory` with its sha256 and mtime, to prove nothing was written."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            found[str(path.relative_to(directory))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                path.stat().st_mtime_ns,
            )
        else:
            found[str(path.relative_to(directory))] = ("dir", 0)
    return found


@pytest.fixture
def filled_sqlite(tmp_path: Path) -> tuple[str, Path, list[str]]:
    """A SQLite ledger with two runs whose ids share the prefix `aaaa`."""
    path = tmp_path / "store" / "ledger.db"
    ledger = open_ledger(f"sqlite:///{path}")
    runs = [start_run(ledger, "aaaa1111" + "0" * 24), start_run(ledger, "aaaa2222" + "0" * 24)]
    ledger.close()
    return f"sqlite:///{path}", path.parent, runs


# --- unknown and ambiguous runs -----------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "export", "verify"])
def test_unknown_run(
    command: str, filled_sqlite: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, store, _ = filled_sqlite
    before = snapshot(store)
    done = run_cli(command, "bbbb", "--ledger", url, cwd=tmp_path)
    assert_bad_input(done, "unknown run 'bbbb'")
    assert snapshot(store) == before


@pytest.mark.parametrize("prefix", ["zz", "a%", "aaaa1111-zzzz", " "])
def test_run_that_is_not_hexadecimal_is_unknown(
    prefix: str, filled_sqlite: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, _, _ = filled_sqlite
    assert_bad_input(run_cli("show", prefix, "--ledger", url, cwd=tmp_path), "unknown run")


@pytest.mark.parametrize("command", ["show", "export", "verify"])
def test_ambiguous_prefix(
    command: str, filled_sqlite: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, store, _ = filled_sqlite
    before = snapshot(store)
    assert_bad_input(run_cli(command, "aaaa", "--ledger", url, cwd=tmp_path), "ambiguous", "2 runs")
    assert snapshot(store) == before


def test_unique_prefix_is_accepted(
    filled_sqlite: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, _, runs = filled_sqlite
    done = run_cli("show", "aaaa2", "--json", "--ledger", url, cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout)["run_id"] == runs[1]


def test_unknown_run_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    ledger = open_ledger(postgres_url)
    start_run(ledger, "aaaa1111" + "0" * 24)
    start_run(ledger, "aaaa2222" + "0" * 24)
    ledger.close()
    assert_bad_input(run_cli("show", "bbbb", "--ledger", postgres_url, cwd=tmp_path), "unknown run")
    assert_bad_input(run_cli("export", "aaaa", "--ledger", postgres_url, cwd=tmp_path), "ambiguous")


# --- malformed URLs -------------------------------------------------------------------------

MALFORMED = [
    "sqlite://relative.db",  # two slashes: a host, not a path
    "sqlite:///",  # no path
    "sqlite:///some/dir/",  # a directory, not a file
    "sqlite:///ledger.db?mode=ro",  # query strings are not supported
    "sqlite:ledger.db",
    "mysql://user@host/db",  # unsupported scheme
    "ledger.db",  # no scheme at all
    "postgresql://127.0.0.1:5432",  # no database
    "postgresql:///ledger",  # no host
    "postgresql://127.0.0.1:notaport/ledger",  # bad port
    "postgresql://127.0.0.1:99999/ledger",  # port out of range
]


@pytest.mark.parametrize("url", MALFORMED)
def test_malformed_url_writes_nothing(url: str, tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    done = run_cli("runs", "--ledger", url, cwd=tmp_path, timeout=20)
    line = assert_bad_input(done)
    assert "URL" in line or "malformed" in line, line
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: a[0])
def test_malformed_url_on_every_command(args: tuple[str, ...], tmp_path: Path) -> None:
    done = run_cli(*args, "--ledger", "sqlite://relative.db", cwd=tmp_path)
    assert_bad_input(done, "malformed ledger URL")
    assert list(tmp_path.iterdir()) == []


def test_malformed_url_from_the_environment(tmp_path: Path) -> None:
    done = run_cli("runs", cwd=tmp_path, env={"LEDGER_URL": "mysql://x/y"})
    assert_bad_input(done, "malformed ledger URL")
    assert list(tmp_path.iterdir()) == []


# --- unreachable PostgreSQL ---------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("args", SOME_COMMANDS, ids=lambda a: a[0])
def test_unreachable_postgres_answers_quickly(args: tuple[str, ...], tmp_path: Path) -> None:
    url = f"postgresql://ledger:secret@127.0.0.1:{_closed_port()}/ledger"
    start = time.monotonic()
    done = run_cli(*args, "--ledger", url, cwd=tmp_path, timeout=30)
    elapsed = time.monotonic() - start
    line = assert_bad_input(done, "cannot reach PostgreSQL at 127.0.0.1:")
    assert "secret" not in line  # the password never reaches the terminal
    assert elapsed < 6, f"took {elapsed:.1f}s"
    assert list(tmp_path.iterdir()) == []


def test_postgres_database_that_does_not_exist(postgres_url: str, tmp_path: Path) -> None:
    from urllib.parse import urlparse, urlunparse

    url = urlunparse(urlparse(postgres_url)._replace(path="/no_such_ledger_db"))
    assert_bad_input(run_cli("runs", "--ledger", url, cwd=tmp_path), "cannot reach PostgreSQL")


# --- unreadable and foreign files ---------------------------------------------------------


def test_directory_instead_of_a_file(tmp_path: Path) -> None:
    (tmp_path / "ledger.db").mkdir()
    before = snapshot(tmp_path)
    for args in SOME_COMMANDS:
        done = run_cli(*args, "--ledger", f"sqlite:///{tmp_path / 'ledger.db'}", cwd=tmp_path)
        assert_bad_input(done, "is a directory")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "content", [b"hello, this is not a database\n" * 20, b"\x00" * 4096], ids=["text", "zeros"]
)
def test_file_that_is_not_sqlite(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    before = snapshot(tmp_path)
    for args in SOME_COMMANDS:
        done = run_cli(*args, "--ledger", f"sqlite:///{path}", cwd=tmp_path)
        assert_bad_input(done, str(path))
    assert snapshot(tmp_path) == before


def test_truncated_sqlite_file(filled_sqlite: tuple[str, Path, list[str]], tmp_path: Path) -> None:
    _, store, _ = filled_sqlite
    path = tmp_path / "half.db"
    path.write_bytes((store / "ledger.db").read_bytes()[:1500])
    before = snapshot(tmp_path)
    assert_bad_input(run_cli("runs", "--ledger", f"sqlite:///{path}", cwd=tmp_path))
    assert snapshot(tmp_path) == before


def test_foreign_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('alice')")
    conn.commit()
    conn.close()
    before = snapshot(tmp_path)
    for args in SOME_COMMANDS:
        done = run_cli(*args, "--ledger", f"sqlite:///{path}", cwd=tmp_path)
        assert_bad_input(done, "foreign SQLite database")
    assert snapshot(tmp_path) == before


def test_ledger_file_of_an_unknown_format(
    filled_sqlite: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, store, _ = filled_sqlite
    conn = sqlite3.connect(store / "ledger.db")
    conn.execute("UPDATE ledger_meta SET value = 'release-ledger/99' WHERE key = 'format'")
    conn.commit()
    conn.close()
    before = snapshot(store)
    assert_bad_input(run_cli("runs", "--ledger", url, cwd=tmp_path), "unknown format")
    assert snapshot(store) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway")
def test_unreadable_file(filled_sqlite: tuple[str, Path, list[str]], tmp_path: Path) -> None:
    url, store, _ = filled_sqlite
    (store / "ledger.db").chmod(0)
    try:
        assert_bad_input(run_cli("runs", "--ledger", url, cwd=tmp_path), "ledger")
    finally:
        (store / "ledger.db").chmod(0o600)


def test_missing_file_is_an_empty_ledger_and_stays_missing(tmp_path: Path) -> None:
    done = run_cli(
        "runs", "--json", "--ledger", f"sqlite:///{tmp_path / 'a' / 'l.db'}", cwd=tmp_path
    )
    assert (done.returncode, json.loads(done.stdout)) == (0, [])
    assert list(tmp_path.iterdir()) == []
    done = run_cli("show", "abcd", "--ledger", f"sqlite:///{tmp_path / 'a' / 'l.db'}", cwd=tmp_path)
    assert_bad_input(done, "unknown run")
    assert list(tmp_path.iterdir()) == []


# --- usage errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [("show",), ("export",), ("no-such-command",), ("runs", "--no-such-option"), ("runs", "extra")],
    ids=["show-no-run", "export-no-run", "unknown-command", "unknown-option", "extra-argument"],
)
def test_usage_errors_are_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    assert_bad_input(run_cli(*args, cwd=tmp_path))
    assert list(tmp_path.iterdir()) == []


# --- help -----------------------------------------------------------------------------------


def _all_commands() -> list[str]:
    from release_ledger.cli.main import cli

    assert isinstance(cli, click.Group)
    return sorted(cli.list_commands(click.Context(cli)))  # commands may load lazily


def test_the_four_ledger_commands_exist() -> None:
    assert {"runs", "show", "export", "verify"} <= set(_all_commands())


@pytest.mark.parametrize("name", _all_commands())
def test_every_subcommand_help_shows_an_example(name: str) -> None:
    from release_ledger.cli.main import cli

    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert "--json" in result.output and "--ledger" in result.output


def test_top_level_help_shows_an_example(tmp_path: Path) -> None:
    done = run_cli("--help", cwd=tmp_path)
    assert done.returncode == 0 and "Example" in done.stdout
