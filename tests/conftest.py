"""Shared fixtures: ledger URLs for SQLite on disk and, where a server is given, PostgreSQL."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import pytest

from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.service import Ledger

POSTGRES_URL = os.environ.get("LEDGER_TEST_POSTGRES_URL")
NO_POSTGRES = "no PostgreSQL server: set LEDGER_TEST_POSTGRES_URL (.ci/run starts one)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `-n 2 --dist loadgroup` the SSH tests run one after another on one worker: they
    share the host's /tmp and count its `release-ledger.*` temporaries."""
    for item in items:
        if item.get_closest_marker("ssh"):
            item.add_marker(pytest.mark.xdist_group("ssh"))


@pytest.fixture(autouse=True, scope="session")
def _caches_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the gate's cached checkouts and per-revision environments out of the user's
    ~/.cache during tests (environments are shared by the session's tests)."""
    variables = {"LEDGER_WORKTREES_DIR": "worktrees", "LEDGER_ENVS_DIR": "envs"}
    previous = {name: os.environ.get(name) for name in variables}
    for name, folder in variables.items():
        os.environ[name] = str(tmp_path_factory.mktemp(folder))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Workers share one environments cache (it locks each entry while building), so an
        # environment is built once per session, not once per worker.
        shared = tmp_path_factory.getbasetemp().parent / "shared-envs"
        shared.mkdir(exist_ok=True)
        os.environ["LEDGER_ENVS_DIR"] = str(shared)
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def unsandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test whose suite under test talks to it through files in its tmp_path (a hold
    file, a pid list, a marker): each shard's sandbox has a private /tmp, so that suite runs
    unconfined (`LEDGER_SANDBOX=none`). The sandbox itself is tested in tests/adversarial."""
    monkeypatch.setenv("LEDGER_SANDBOX", "none")


@pytest.fixture(scope="module")
def unsandboxed_module() -> Iterator[None]:
    """`unsandboxed` for a module-scoped fixture's gate."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LEDGER_SANDBOX", "none")
        yield


@pytest.fixture
def disk_ledger(tmp_path: Path) -> Iterator[Ledger]:
    """A SQLite ledger on disk in the test's folder, closed afterwards."""
    opened = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield opened
    opened.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger' / 'ledger.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    import psycopg

    name = f"ledger_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parsed = urlparse(POSTGRES_URL)
    yield urlunparse(parsed._replace(path=f"/{name}"))
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def ledger_url(request: pytest.FixtureRequest) -> str:
    """The same test against a SQLite ledger on disk and a real PostgreSQL ledger."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url
