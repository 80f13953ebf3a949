"""A run's answers kept for the next reader: `ledger show` and `ledger verdict` without a fold.

Folding a run means loading the event models, the fold and the projections (about 0.3 s of a
process's start here) before the first event is read. The answers for a run's own rule are a
pure function of its events and of the code, so they are computed once (by the gate when it
finishes, else by the first reader) and kept beside the run, keyed by exactly what they depend
on: the run's length, the head of its hash chain, and a digest of the code's sources. A kept
reading is served only after the run's chain is checked again and matches that key and its
seal; anything else (an append since, another version of the code, an edited row) computes
the answers afresh. It is a memo: deleting every kept reading loses nothing.
"""

from __future__ import annotations

import json
from typing import Any

from release_ledger.adapters.gc_pause import gc_paused
from release_ledger.adapters.ledger_key import seal, sealed
from release_ledger.adapters.source_digest import source_digest
from release_ledger.adapters.store_records import KeptReading
from release_ledger.ledger.service import Ledger

Reading = dict[str, Any]  # events, grouped, conclusion, verdict (see `make_reading`)


def run_reading(ledger: Ledger, run_id: str) -> Reading:
    """The run's answers: the kept ones when they hold for its events and this code, else
    made from its stream (and kept, best effort)."""
    code = source_digest()
    key = ledger.sealing_key()
    if code is not None and key is not None:
        kept = ledger.store.kept_reading(run_id)
        if (
            kept is not None
            and kept.code == code
            and sealed(key, kept.seal, run_id, str(kept.length), kept.tip, code, kept.body)
        ):
            # The chain is checked as a fold would read it: a broken run raises BrokenRun;
            # so are the artifacts the answers were made from.
            length, tip = ledger.store.verified_tip(run_id)
            if (length, tip) == (kept.length, kept.tip):
                reading: Reading = json.loads(kept.body)
                ledger.check_artifacts(run_id, [(p, d) for p, d in reading.get("artifacts", ())])
                return reading
    made, length, tip = make_reading(ledger, run_id)
    # Served as JSON, as a kept reading is: the first reader and the next get the same types.
    body = json.dumps(made, sort_keys=True, separators=(",", ":"), default=str)
    if code is not None and key is not None and length:
        keep(ledger, run_id, body, length, tip, code, key)
    reading = json.loads(body)
    return reading


def make_reading(ledger: Ledger, run_id: str) -> tuple[Reading, int, str]:
    """The answers from one read of the run's stream, with how many events and which chain
    head they were made from: the timeline (every event, and grouped), the conclusion that
    `ledger show` prints and the verdict document of `ledger verdict`, both under the run's
    own rule."""
    from release_ledger.domain.chain import GENESIS
    from release_ledger.domain.rules import get_rule
    from release_ledger.domain.rules import verdict_under as verdict_of
    from release_ledger.domain.run_state import fold
    from release_ledger.projections.environment_skips import environment_skips
    from release_ledger.projections.timeline import grouped_timeline, timeline
    from release_ledger.projections.verdict_view import base_reuse, verdict_document

    with gc_paused():
        recorded = ledger.store.read(run_id)
        records = [(r.position, r.event) for r in recorded]
        artifacts = ledger.artifacts_for([event for _, event in records])
        lines = timeline(records, artifacts)
        grouped = grouped_timeline(records, artifacts, lines=lines)
        state = fold(records, artifacts)
        conclusion = None
        if state.started is not None and state.discovered:
            conclusion = get_rule(state.started.rule).decide(state).as_dict()
            conclusion["base_reuse"] = base_reuse(state)
            conclusion["environment_skips"] = [s.as_dict() for s in environment_skips(state)]
        reading = {
            "artifacts": [[p, h] for p, e in records for h in e.artifact_hashes()],
            "events": [line.as_dict() for line in lines],
            "grouped": [line.as_dict() for line in grouped],
            "conclusion": conclusion,
            "verdict": verdict_document(run_id, state, verdict_of(state)),
        }
        tip = recorded[-1].hash if recorded else GENESIS
        return reading, len(recorded), tip


def keep(
    ledger: Ledger, run_id: str, body: str, length: int, tip: str, code: str, key: bytes
) -> bool:
    """Keep a reading (as JSON) made from the run's first `length` events, sealed with the
    ledger's key (HMAC over the run, its key and its body: without the key file nobody who
    can write the database can forge one); False when the ledger could not take it
    (read-only, busy): the next reader makes it again."""
    mac = seal(key, run_id, str(length), tip, code, body)
    return ledger.store.keep_reading(run_id, KeptReading(length, tip, code, mac, body))
