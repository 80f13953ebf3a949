"""Determinism of the read models and verdicts, over random valid runs (hypothesis).

The same events give the same rows, digest and verdict bytes whether they are projected all at
once, in random chunks with the projector restarted between them, or after a crash halfway
through a catch-up.
"""

from __future__ import annotations

import builtins
import json
import os
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from release_ledger.domain.events import event_from_json, event_to_json
from release_ledger.ledger import views
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.replay import verdict_for
from release_ledger.ledger.service import Ledger
from release_ledger.projections.read_models import run_rows
from tests.synthetic_runs import SyntheticRun, interleave, synthetic_run

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _runs(seed: int, count: int) -> list[SyntheticRun]:
    rng = random.Random(seed)
    return [
        synthetic_run(
            rng,
            f"{seed % 4096:03x}{index:x}".ljust(32, "0"),
            files=rng.randint(1, 6),
            tests_per_file=rng.randint(1, 3),
            shards=rng.randint(1, 3),
            p_fail=rng.choice([0.0, 0.2, 0.5]),
            p_skip=rng.choice([0.0, 0.1]),
            p_unmeasured=rng.choice([0.0, 0.3]),
            questions=rng.randint(0, 2),
            checks=rng.randint(0, 2),
            rule=rng.choice(["strict", "default", "zero-failures"]),
            complete=rng.random() < 0.8,
        )
        for index in range(count)
    ]


def _append(ledger: Ledger, runs: dict[str, SyntheticRun], batch: list[tuple[str, Any]]) -> None:
    """Append a slice of the global order, one append per stretch of the same run."""
    start = 0
    while start < len(batch):
        run_id = batch[start][0]
        end = start
        while end < len(batch) and batch[end][0] == run_id:
            end += 1
        events = [e for _, e in batch[start:end]]
        wanted = {h for e in events for h in e.artifact_hashes()}
        artifacts = {h: d for h, d in runs[run_id].artifacts.items() if h in wanted}
        ledger.append(run_id, events, artifacts=artifacts)
        start = end


@contextmanager
def _ledger(directory: Path, name: str) -> Iterator[Ledger]:
    ledger = open_ledger(f"sqlite:///{directory / name / 'ledger.db'}")
    try:
        yield ledger
    finally:
        ledger.close()


def _catch_up_fresh(ledger: Ledger, path: Path) -> None:
    """A restarted projector: a new connection that knows only the tracking position."""
    store = views.open_views(path)
    try:
        views.catch_up(ledger, store)
    finally:
        store.close()


def _digest(path: Path) -> str:
    store = views.open_views(path)
    try:
        return store.digest()
    finally:
        store.close()


@SETTINGS
@given(
    seed=st.integers(0, 2**31),
    count=st.integers(1, 4),
    cuts=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    crash=st.one_of(st.none(), st.tuples(st.integers(1, 6), st.integers(0, 3))),
)
def test_chunked_catch_up_with_restarts_equals_projecting_all_at_once(
    seed: int, count: int, cuts: list[int], crash: tuple[int, int] | None
) -> None:
    runs = _runs(seed, count)
    by_id = {r.run_id: r for r in runs}
    order = interleave(random.Random(seed), runs)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with _ledger(root, "whole") as whole, _ledger(root, "chunked") as chunked:
            _append(whole, by_id, order)
            _catch_up_fresh(whole, root / "whole" / "views.db")
            at_once = _digest(root / "whole" / "views.db")
            rebuilt = views.rebuild(whole, root / "rebuilt.db")["digest"]

            chunked_views = root / "chunked" / "views.db"
            position, index = 0, 0
            while position < len(order):
                size = cuts[index % len(cuts)]
                _append(chunked, by_id, order[position : position + size])
                position += size
                index += 1
                if crash is not None and index == crash[0]:
                    _crash_halfway(chunked, chunked_views, crash[1])
                _catch_up_fresh(chunked, chunked_views)
            in_chunks = _digest(chunked_views)

            assert at_once == rebuilt == in_chunks
            for run in runs:
                first = json.dumps(verdict_for(whole, run.run_id), sort_keys=True)
                second = json.dumps(verdict_for(chunked, run.run_id), sort_keys=True)
                assert first == second


def _crash_halfway(ledger: Ledger, path: Path, after: int) -> None:
    """Catch up one run per transaction and die after `after` runs: rows are ahead of the
    tracking position, which must do no harm."""
    calls = {"n": 0}
    real = views.project_run

    def dying(led: Ledger, run_id: str, *args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > after:
            raise KeyboardInterrupt("killed")
        return real(led, run_id, *args)

    with (
        mock.patch.object(views, "RUNS_PER_TRANSACTION", 1),
        mock.patch.object(views, "project_run", dying),
        suppress(KeyboardInterrupt),
    ):
        _catch_up_fresh(ledger, path)


@contextmanager
def _no_world() -> Iterator[None]:
    """Projections may not read the clock, the environment or the disk."""

    def refuse(*args: object, **kwargs: object) -> Any:
        raise AssertionError("a projection touched the world")

    with (
        mock.patch.object(time, "time", refuse),
        mock.patch.object(time, "time_ns", refuse),
        mock.patch.object(builtins, "open", refuse),
        mock.patch.object(os, "getenv", refuse),
        mock.patch.dict(os.environ, {}, clear=True),
    ):
        yield


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_the_same_events_give_the_same_rows_even_after_a_json_round_trip(seed: int) -> None:
    (run,) = _runs(seed, 1)
    records = list(enumerate(run.events, start=1))
    copies = [(p, event_from_json(event_to_json(e))) for p, e in records]
    with _no_world():
        first = run_rows(run.run_id, records, run.artifacts)
        second = run_rows(run.run_id, copies, dict(reversed(list(run.artifacts.items()))))
    assert first == second
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
