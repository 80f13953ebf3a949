"""Work an earlier run already did, taken by content: a file's measurement (same blob,
environment and command) and base's results (same content keys), never by path alone."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from release_ledger.domain import events as ev
from release_ledger.domain.run_state import BASE
from release_ledger.ledger.result_cache import find_reuse
from release_ledger.ledger.steps.context import StepContext
from release_ledger.ledger.steps.keys import measurement_keys, revision_keys
from release_ledger.projections.next_step import RunRequest


def reuse_measurements(ctx: StepContext, files: Sequence[str]) -> list[ev.Event]:
    """The newest measurement from an earlier run of each file whose content, environment
    and command are the same (its measurement key, looked up in the ledger's content
    index), with the lowest ceiling any of them saw: never by path alone, so a changed
    file, dependency declaration or command is measured again."""
    from release_ledger.ledger.read_side import content
    from release_ledger.projections.content_index import MEASUREMENT

    wanted: dict[str, list[str]] = {}
    for file, (_, key) in measurement_keys(ctx, files).items():
        wanted.setdefault(key, []).append(file)
    hits = [h for h in content(ctx.ledger, MEASUREMENT, sorted(wanted)) if h.run_id != ctx.run_id]
    # Each observation's ceiling bounds what the file needs cold wherever it ran: the
    # lowest seen for the same content is the tightest (domain/memory.py).
    ceilings: dict[str, float] = {}
    for hit in hits:
        ceiling = json.loads(hit.data).get("ceiling_mb")
        if ceiling is not None:
            ceilings[hit.key] = min(ceiling, ceilings.get(hit.key, ceiling))
    found: list[ev.Event] = []
    for hit in hits:
        if hit.key not in wanted:
            continue  # newest first: a key already taken has its newest measurement
        measured = json.loads(hit.data)
        for file in wanted.pop(hit.key):
            found.append(
                ctx.ledger.make(
                    ev.MeasurementReused,
                    ctx.run_id,
                    file=file,
                    from_run=hit.run_id,
                    rss_mb=measured["rss_mb"],
                    seconds=measured["seconds"],
                    key=hit.key,
                    baseline_mb=measured.get("baseline_mb"),
                    retained_mb=measured.get("retained_mb"),
                    transient_mb=measured.get("transient_mb"),
                    shared_mb=measured.get("shared_mb"),
                    ceiling_mb=ceilings.get(hit.key),
                )
            )
    return found


def reuse_baselines(ctx: StepContext, requests: list[RunRequest]) -> list[RunRequest]:
    """First base attempts: each file's results at base from any earlier run with the
    same content keys (its head sweep included); only the files not cached are run."""
    candidates = [r for r in requests if r.revision == BASE and r.attempt == 1]
    keys = revision_keys(ctx, BASE, ctx.skips.get(BASE, ())) if candidates else None
    if not candidates or keys is None:
        return requests
    reuse = find_reuse(ctx.ledger, ctx.run_id, ctx.started.base, candidates, keys)
    if not reuse.events:
        return requests
    ctx.ledger.append(ctx.run_id, list(reuse.events), artifacts={})
    tests = sum(len(e.result_keys) for e in reuse.events)
    whole = sorted(s for s, files in reuse.remaining.items() if not files)
    ctx.observer.notice(
        f"base reused from earlier runs {', '.join(r[:12] for r in reuse.sources)}: "
        f"{reuse.files} files ({tests} keys) of {len(candidates)} shards; "
        f"{len(whole)} shards need no base run"
    )
    kept = []
    for r in requests:
        if r.revision != BASE or r.attempt != 1 or r.shard not in reuse.remaining:
            kept.append(r)
        elif reuse.remaining[r.shard]:
            kept.append(replace(r, files=reuse.remaining[r.shard]))
    return kept
