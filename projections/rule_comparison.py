"""Each test's and shard's classification under one rule, and where two rules disagree.

A rule changes a verdict not by reclassifying failures (introduced, preexisting, ... are facts
of the run) but by what it lets them do: fail the gate, leave it unmeasured, or be allowed.
So a test's classification is the pair (class, effect); a shard's is measured or why not.
"""

from __future__ import annotations

from typing import Any

from release_ledger.domain.run_state import RunState
from release_ledger.domain.verdict import Verdict, shard_unmeasured
from release_ledger.projections.verdict_view import verdict_document

PASSED = "passed"
FAILS_GATE = "fails-gate"
UNMEASURED = "unmeasured"
ALLOWED = "allowed"
MEASURED = "measured"
WAIVED = "waived"

# Later classes win when a test appears in several lists (a skipped test is never failing).
_CLASS_ORDER = ("fixed", "skipped", "skipped-at-head", "preexisting", "flaky", "introduced")


def test_classes(verdict: Verdict) -> dict[str, tuple[str, str]]:
    """Every test the verdict names -> (class, effect under the verdict's rule)."""
    unmeasured_files = {f for u in verdict.unmeasured for f in u.files}
    blocking = set(verdict.blocking)
    lists = {
        "fixed": verdict.fixed,
        "skipped": verdict.skipped,
        "skipped-at-head": verdict.skipped_at_head,
        "preexisting": verdict.preexisting,
        "flaky": verdict.flaky,
        # An exonerated failure is introduced as a fact; the rule says whether it fails the
        # gate (strict) or is allowed (default).
        "introduced": (*verdict.introduced, *verdict.exonerated),
    }
    classes: dict[str, tuple[str, str]] = {}
    for name in _CLASS_ORDER:
        for test in lists[name]:
            if test in blocking:
                effect = FAILS_GATE
            elif test.split("::", 1)[0] in unmeasured_files:
                effect = UNMEASURED
            else:
                effect = ALLOWED
            classes[test] = (name, effect)
    return dict(sorted(classes.items()))


test_classes.__test__ = False  # type: ignore[attr-defined]


def shard_key(shard: str, files: tuple[str, ...]) -> str:
    """Measurement failures are reported per file under the pseudo-shard `measure` (in a
    matrix, `3.12/measure`)."""
    lane, _, name = shard.rpartition("/")
    if name == "measure" and files:
        return f"{lane}/measure:{files[0]}" if lane else f"measure:{files[0]}"
    return shard


def shard_classes(state: RunState, verdict: Verdict) -> dict[str, str]:
    """Every leaf shard (and file that failed to measure) -> `measured`, `waived` or
    `unmeasured: REASON` under the verdict's rule; a matrix's shards as `3.12/s01`."""
    unmeasured = {shard_key(u.shard, u.files): u.reason for u in verdict.unmeasured}
    classes: dict[str, str] = {}
    for label, lane in state.matrix.items() or [("", state)]:
        prefix = f"{label}/" if label and state.matrix else ""
        for shard in lane.leaves():
            if prefix + shard.id in unmeasured:
                continue
            measured = shard_unmeasured(lane, shard) is None
            classes[prefix + shard.id] = MEASURED if measured else WAIVED
        for file in lane.measure_failures:
            key = shard_key(prefix + "measure", (file,))
            if key not in unmeasured:
                classes[key] = WAIVED
    for key, reason in unmeasured.items():
        classes[key] = f"{UNMEASURED}: {reason}"
    return dict(sorted(classes.items()))


def differences(state: RunState, first: Verdict, second: Verdict) -> dict[str, Any]:
    """The tests and shards whose classification differs between two verdicts of one run."""
    a, b = test_classes(first), test_classes(second)
    unnamed = (PASSED, ALLOWED)
    tests = [
        {
            "test": test,
            "classifications": [
                _test_class(a.get(test, unnamed)),
                _test_class(b.get(test, unnamed)),
            ],
        }
        for test in sorted(set(a) | set(b))
        if a.get(test, unnamed) != b.get(test, unnamed)
    ]
    sa, sb = shard_classes(state, first), shard_classes(state, second)
    shards = [
        {"shard": shard, "classifications": [sa.get(shard, MEASURED), sb.get(shard, MEASURED)]}
        for shard in sorted(set(sa) | set(sb))
        if sa.get(shard, MEASURED) != sb.get(shard, MEASURED)
    ]
    return {"tests": tests, "shards": shards}


def _test_class(pair: tuple[str, str]) -> dict[str, str]:
    return {"class": pair[0], "effect": pair[1]}


def comparison_document(
    run_id: str, state: RunState, first: Verdict, second: Verdict
) -> dict[str, Any]:
    """`ledger verdict RUN --compare NAME --json`: both verdicts, side by side, and the diff."""
    verdicts = []
    for verdict in (first, second):
        document = verdict_document(run_id, state, verdict)
        document["replayed"] = True
        verdicts.append(document)
    return {
        "run_id": run_id,
        "rules": [first.rule, second.rule],
        "verdicts": verdicts,
        "differences": differences(state, first, second),
        "replayed": True,
    }
