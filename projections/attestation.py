"""The run's evidence as in-toto statements: a test-result statement per revision (and per
interpreter of a matrix) and one SLSA Verification Summary for the verdict.

Pure: the statements are made from the same fold and verdict document `ledger verdict` and
`ledger audit` read, so they cannot say more than the ledger proves; the same events always
give the same bytes (`statement_bytes`), which is how `ledger verify-attestation --ledger`
refuses a stale or forged statement.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from release_ledger.domain.junit import test_id
from release_ledger.domain.run_state import RunState
from release_ledger.domain.verdict import Verdict
from release_ledger.projections.verdict_view import verdict_document

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
VSA = "https://slsa.dev/verification_summary/v1"
# Extension fields are URI-named, so no consumer mistakes them for the standard's own.
EXT = "https://release-ledger.dev/attestation/v1/"
VERIFIER = "https://release-ledger.dev/verifier"
REVISIONS = ("head", "base")
CLASSES = ("introduced", "preexisting", "fixed", "skipped_at_head", "flaky")


@dataclass(frozen=True)
class Provenance:
    """What the ledger, not the fold, knows: where the run lives and which chain tip the
    statements derive from; the verifier's version and the rule's source digest."""

    ledger: str  # the ledger's name, without credentials
    run_id: str
    position: int
    chain_tip: str
    verified_at: str  # the tip event's time (ISO 8601): the same events, the same bytes
    verifier_version: str
    rule_digest: str


def statement_bytes(statement: dict[str, Any]) -> bytes:
    """The canonical payload: sorted keys, no spaces."""
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()


def verification_result(status: str) -> str:
    """PASSED only for `passed`: unmeasured, awaiting, parked or anything unknown fail."""
    return "PASSED" if status == "passed" else "FAILED"


def run_uri(p: Provenance) -> str:
    return f"{p.ledger}#run={p.run_id}"


def statements(state: RunState, verdict: Verdict, p: Provenance) -> list[dict[str, Any]]:
    """Every test-result statement, then the VSA citing them by digest."""
    results = [
        _test_result(state, lane_state, label, revision, verdict, p)
        for label, lane_state in _lanes(state)
        for revision in REVISIONS
        if (lane_state.started or state.started) is not None
    ]
    return [*results, _summary(state, verdict, p, results)]


def _lanes(state: RunState) -> list[tuple[str, RunState]]:
    return list(state.matrix.items()) or [("", state)]  # the run's order


def _cases(lane: RunState, revision: str) -> list[tuple[str, str]]:
    """(node id, outcome) of the latest measured attempt of every leaf shard."""
    found: dict[str, str] = {}
    for shard in sorted(lane.leaves(), key=lambda s: s.id):
        latest = shard.latest(revision)
        report = latest.assessment.report if latest and latest.assessment.measured else None
        for case in report.cases if report is not None else ():
            found[test_id(case)] = case.outcome
    return sorted(found.items())


def _unmeasured(verdict: Verdict, label: str, revision: str) -> list[str]:
    lane = dict(verdict.interpreters).get(label, verdict) if label else verdict
    return sorted(
        {
            f
            for u in lane.unmeasured
            if u.revision in (None, revision)
            for f in (u.culprits or u.files or (u.shard,))
        }
    )


def _subjects(state: RunState, revision: str, commit: str) -> list[dict[str, Any]]:
    subjects: list[dict[str, Any]] = [{"name": f"git+{revision}", "digest": {"gitCommit": commit}}]
    built = state.distributions.get(revision)
    if built is not None and built[1].status == "built" and built[1].commit == commit:
        subjects += [{"name": f.filename, "digest": {"sha256": f.sha256}} for f in built[1].files]
    return subjects


def _test_result(
    state: RunState, lane: RunState, label: str, revision: str, verdict: Verdict, p: Provenance
) -> dict[str, Any]:
    started = lane.started or state.started
    assert started is not None
    commit = started.head if revision == "head" else started.base
    cases = _cases(lane, revision)
    failed = [t for t, o in cases if o in ("failed", "error")]
    passed = [t for t, o in cases if o == "passed"]
    unmeasured = _unmeasured(verdict, label, revision)
    environment = next(
        (e for (r, _), e in sorted(lane.environments.items()) if r == revision), None
    )
    configuration: list[dict[str, Any]] = [
        {"name": "rule", "uri": f"{EXT}rule/{verdict.rule}@v{verdict.rule_version}"},
        {"name": "command", "content": _b64(" ".join(started.command))},
    ]
    if environment is not None and environment.key:
        configuration.append({"name": "environment", "uri": f"{EXT}environment/{environment.key}"})
    if environment is not None and environment.packages_hash:
        configuration.append(
            {"name": "frozen-packages", "digest": {"sha256": environment.packages_hash}}
        )
    result = "FAILED" if failed or unmeasured or not cases else "PASSED"
    predicate: dict[str, Any] = {
        "result": result,
        "configuration": configuration,
        "url": f"{run_uri(p)}&show",
        "passedTests": passed,
        "failedTests": failed,
        f"{EXT}revision": revision,
        f"{EXT}unmeasured": unmeasured,
    }
    if label:
        predicate[f"{EXT}interpreter"] = label
    return {
        "_type": STATEMENT_TYPE,
        "subject": _subjects(state, revision, commit),
        "predicateType": TEST_RESULT,
        "predicate": predicate,
    }


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def _summary(
    state: RunState, verdict: Verdict, p: Provenance, inputs: list[dict[str, Any]]
) -> dict[str, Any]:
    """The VSA: verdict from the same document `ledger verdict --json` prints."""
    document = verdict_document(p.run_id, state, verdict)
    status = str(document["status"])
    started = state.started
    predicate: dict[str, Any] = {
        "verifier": {"id": VERIFIER},
        "timeVerified": p.verified_at,
        "resourceUri": run_uri(p),
        "policy": {
            "uri": f"{EXT}rule/{verdict.rule}@v{verdict.rule_version}",
            "digest": {"sha256": p.rule_digest},
        },
        "inputAttestations": [
            *(
                {"uri": f"{run_uri(p)}&statement={i}", "digest": {"sha256": _sha(s)}}
                for i, s in enumerate(inputs)
            ),
            {"uri": f"{run_uri(p)}&position={p.position}", "digest": {"sha256": p.chain_tip}},
        ],
        "verificationResult": verification_result(status),
        f"{EXT}verifierVersion": p.verifier_version,
        f"{EXT}ledger": p.ledger,
        f"{EXT}status": status,
        f"{EXT}reasons": list(document.get("reasons", [])),
    }
    for name in CLASSES:
        predicate[f"{EXT}{name.replace('_', '-')}"] = list(document.get(name, []))
    if status != "passed":
        predicate[f"{EXT}notPassedBecause"] = status
    head = started.head if started else ""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "git+head", "digest": {"gitCommit": head}}],
        "predicateType": VSA,
        "predicate": predicate,
    }


def _sha(statement: dict[str, Any]) -> str:
    return hashlib.sha256(statement_bytes(statement)).hexdigest()
