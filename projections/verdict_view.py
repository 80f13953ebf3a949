"""The verdict as people and machines read it: one JSON document, one summary."""

from __future__ import annotations

from typing import Any

from release_ledger.domain.run_state import BASE, RunState
from release_ledger.domain.verdict import Verdict
from release_ledger.projections.environment_skips import environment_skips


def verdict_document(run_id: str, state: RunState, verdict: Verdict) -> dict[str, Any]:
    """The `ledger gate --json` / `ledger verdict --json` shape (sorted keys on output)."""
    started = state.started
    document = verdict.as_dict()
    document.update(
        {
            "run_id": run_id,
            "head": started.head if started else None,
            "base": started.base if started else None,
            "head_ref": started.head_ref if started else None,
            "base_ref": started.base_ref if started else None,
            "baseline_reused": sorted(
                {
                    run
                    for lane in lanes(state)
                    for s in lane.shards.values()
                    for a in s.attempts["base"]
                    for run in (*((a.reused_from,) if a.reused_from else ()), *a.reused_runs)
                }
            ),
            "completed": state.completed,
            "base_reuse": base_reuse(state),
            "environment_skips": [skip.as_dict() for skip in environment_skips(state)],
        }
    )
    return document


def lanes(state: RunState) -> list[RunState]:
    """Every interpreter's state of a matrix run; the run's own state otherwise."""
    return list(state.matrix.values()) or [state]


def base_reuse(state: RunState) -> dict[str, Any]:
    """How much of the base was measured afresh and how much reused from earlier runs (the
    result cache, or a whole shard's reused baseline): files and tests of each (summed over
    a matrix's interpreters)."""
    cached = state.cache.get("base_reuse")
    if isinstance(cached, dict):
        return cached
    counts = {"fresh": {"files": 0, "tests": 0}, "reused": {"files": 0, "tests": 0}}
    sources: set[str] = set()
    for shard, lane in [(s, one) for one in lanes(state) for s in one.leaves()]:
        latest = shard.latest(BASE)
        if latest is None:
            continue
        files = lane.base_files_of(shard)
        if latest.reused_from and not latest.reused_files:
            reused = set(files)  # a whole shard reused (ledgers from before the result cache)
            sources.add(latest.reused_from)
        else:
            reused = set(latest.reused_files)
            sources.update(latest.reused_runs)
        tests: dict[str, int] = {}
        report = latest.assessment.report if latest.assessment.measured else None
        for case in report.cases if report is not None else ():
            tests[case.file] = tests.get(case.file, 0) + 1
        for file in files:
            side = counts["reused" if file in reused else "fresh"]
            side["files"] += 1
            side["tests"] += tests.get(file, 0)
    result = {**counts, "from": sorted(sources)}
    state.cache["base_reuse"] = result
    return result
