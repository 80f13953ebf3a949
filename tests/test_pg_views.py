"""A PostgreSQL ledger's read models live in its own database, in the schema `ledger_views`:
caught up incrementally, rebuilt by swapping in a fresh schema, and a rebuild is identical."""

from __future__ import annotations

import random

import pytest

from release_ledger.domain import events as ev
from release_ledger.ledger import views
from tests.ledgerkit import open_ledger
from tests.synthetic_runs import synthetic_run

pytestmark = pytest.mark.postgres


def test_views_in_the_ledgers_schema_catch_up_and_equal_a_rebuild(postgres_url: str) -> None:
    import psycopg

    ledger = open_ledger(postgres_url)
    try:
        rng = random.Random(5)
        runs = [synthetic_run(rng, f"{i:02x}" * 16, files=3, questions=1) for i in range(4)]
        for run in runs[:3]:
            ledger.append(run.run_id, run.events, artifacts=run.artifacts)
        target = views.views_path(ledger, None)
        assert target == views.PG_SCHEMA
        first = views.catch_up_file(ledger, target)
        assert first["runs"] == 3
        ledger.append(runs[3].run_id, runs[3].events, artifacts=runs[3].artifacts)
        ledger.record(runs[0].run_id, ev.CheckRecorded, name="docs", verdict="pass")
        assert views.catch_up_after_gate(ledger) is None
        checked = views.check(ledger, target)
        assert checked["identical"], checked["difference"]
        assert checked["index_identical"]
        with psycopg.connect(postgres_url) as conn:
            count = conn.execute("SELECT count(*) FROM ledger_views.runs").fetchone()
            assert count is not None and count[0] == 4
            checks = conn.execute(
                "SELECT count(*) FROM ledger_views.checks WHERE name = 'docs'"
            ).fetchone()
            assert checks is not None and checks[0] == 1
        rebuilt = views.rebuild(ledger, target)
        assert rebuilt["digest"] == checked["digest"]
        with psycopg.connect(postgres_url) as conn:
            schemas = {
                r[0] for r in conn.execute("SELECT schema_name FROM information_schema.schemata")
            }
            assert views.PG_SCHEMA in schemas
            assert not any(s.startswith(views.PG_SCHEMA + "_") for s in schemas)
    finally:
        ledger.close()


def test_following_keeps_the_views_current_through_the_librarys_subscription(
    postgres_url: str,
) -> None:
    import threading
    import time

    ledger = open_ledger(postgres_url)
    writer = open_ledger(postgres_url)
    stop = threading.Event()
    seen: list[int] = []
    follower = threading.Thread(
        target=views.follow,
        args=(ledger, views.PG_SCHEMA),
        kwargs={"stop": stop, "report": lambda r: seen.append(int(r["position"]))},
    )
    try:
        follower.start()
        run = synthetic_run(random.Random(3), "ab" * 16, files=2, questions=0)
        writer.append(run.run_id, run.events, artifacts=run.artifacts)
        target = writer.store.max_notification_id()
        deadline = time.monotonic() + 30
        while (not seen or seen[-1] < target) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen and seen[-1] >= target
    finally:
        stop.set()
        follower.join(timeout=10)
        writer.close()
        ledger.close()
    assert not follower.is_alive()
