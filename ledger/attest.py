"""`ledger attest` and `ledger verify-attestation`: the run's verdict as signed in-toto
statements anyone can check with the public key alone, and, given the ledger, checked to be
what the ledger derives today (the fold and verdict document `ledger verdict` and
`ledger audit` read)."""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release_ledger.adapters import attestations as crypto
from release_ledger.adapters.bounded_files import read_capped
from release_ledger.adapters.store_records import Recorded
from release_ledger.domain import events as ev
from release_ledger.domain.errors import BadInput
from release_ledger.domain.rules import get_rule, verdict_under
from release_ledger.domain.run_state import fold
from release_ledger.ledger.gate import TOOL_VERSION
from release_ledger.ledger.service import ConcurrencyConflict, Ledger
from release_ledger.projections import attestation as att

ATTEMPTS = 5


@dataclass(frozen=True)
class Bundle:
    run_id: str
    lines: list[str]  # one DSSE envelope per line, JSON
    key_id: str
    verification_result: str
    status: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "signed": bool(self.key_id),
            "key_id": self.key_id,
            "envelopes": len(self.lines),
            "verification_result": self.verification_result,
            "status": self.status,
            "envelope_sha256": [_sha(line) for line in self.lines],
        }


def _sha(line: str) -> str:
    return hashlib.sha256(line.encode()).hexdigest()


def ledger_name(ledger: Ledger) -> str:
    """The ledger as the statements name it: dialect and place, never credentials."""
    return f"{ledger.store.dialect}:{ledger.store.description}"


def rule_digest(rule: str) -> str:
    """sha256 of the rule's source file: the policy the verdict was decided by."""
    source = inspect.getsourcefile(get_rule(rule).decide)
    return hashlib.sha256(Path(source).read_bytes()).hexdigest() if source else ""


def derive(
    records: list[Recorded], artifacts: dict[str, bytes], ledger: str
) -> list[dict[str, Any]]:
    """The statements the events of `records` give: the verdict under the run's own rule."""
    if not records or not isinstance(records[0].event, ev.RunStarted):
        raise BadInput("the run has no RunStarted event")
    facts = [(r.position, r.event) for r in records]
    state = fold(facts, artifacts)
    verdict = verdict_under(state)
    tip = records[-1]
    provenance = att.Provenance(
        ledger=ledger,
        run_id=records[0].event.run_id,
        position=tip.position,
        chain_tip=tip.hash,
        verified_at=tip.event.at.isoformat(),
        verifier_version=TOOL_VERSION,
        rule_digest=rule_digest(verdict.rule),
    )
    return att.statements(state, verdict, provenance)


def _evidence(records: list[Recorded]) -> list[Recorded]:
    """The records the statements derive from: the run up to its last fact, earlier
    attestations aside (they say what was given out, not what was measured)."""
    end = len(records)
    while end > 1 and isinstance(records[end - 1].event, ev.AttestationIssued):
        end -= 1
    return records[:end]


def attest(ledger: Ledger, run_prefix: str, signer: crypto.Signer | None) -> Bundle:
    """Derive, sign, and append `AttestationIssued` (each envelope's digest, the key id)."""
    run_id = ledger.resolve(run_prefix)
    key_id = signer.public_key.keyid if signer is not None else ""
    for _ in range(ATTEMPTS):
        records = ledger.read(run_id)
        evidence = _evidence(records)
        artifacts = ledger.artifacts_for([r.event for r in evidence])
        statements = derive(evidence, artifacts, ledger_name(ledger))
        for statement in statements:
            crypto.validate_statement(statement)
        lines = [
            json.dumps(crypto.envelope(att.statement_bytes(s), signer), sort_keys=True)
            for s in statements
        ]
        summary = statements[-1]["predicate"]
        event = ledger.make(
            ev.AttestationIssued,
            run_id,
            envelope_sha256=[_sha(line) for line in lines],
            key_id=key_id,
            position=evidence[-1].position,
            chain_tip=evidence[-1].hash,
            verification_result=summary["verificationResult"],
            rule=summary["policy"]["uri"].rsplit("/", 1)[-1].split("@")[0],
        )
        try:
            ledger.append(run_id, [event], expected_length=len(records))
        except ConcurrencyConflict:
            continue
        return Bundle(
            run_id, lines, key_id, summary["verificationResult"], summary[f"{att.EXT}status"]
        )
    raise BadInput(f"run {run_id} keeps changing under the attestation; try again")


# --- verification ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checked:
    ok: bool
    envelopes: int
    problem: str = ""  # which envelope and why
    verification_result: str = ""
    run_id: str = ""
    against_ledger: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "envelopes": self.envelopes,
            "problem": self.problem,
            "verification_result": self.verification_result,
            "run_id": self.run_id,
            "against_ledger": self.against_ledger,
        }


# A bundle is a few envelopes of statements: far below this, whatever the suite's size.
MAX_BUNDLE_BYTES = 128 * 1024 * 1024


def read_bundle(path: Path) -> list[str]:
    """The bundle's envelopes, one JSON document a line: a regular file of at most
    `MAX_BUNDLE_BYTES`, each line JSON no deeper than the parser's recursion allows (a
    200,000-deep array is one line of bad input, not a crash)."""
    data = read_capped(path, "bundle", MAX_BUNDLE_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"bundle {path}: not UTF-8 text") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise BadInput(f"{path}: no envelopes")
    for number, line in enumerate(lines, start=1):
        try:
            json.loads(line)
        except RecursionError:
            raise BadInput(
                f"bundle {path}: line {number} nests too deeply to be an envelope"
            ) from None
        except ValueError:
            continue  # not JSON: `verify` names the envelope as invalid
    return lines


def verify(lines: list[str], key: crypto.Key | None, ledger: Ledger | None = None) -> Checked:
    """Every envelope's signature and shape; the VSA cites every other statement by digest;
    with a ledger, every statement is what the ledger derives today."""
    statements: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        try:
            payload = crypto.open_envelope(json.loads(line), key)
            statement = crypto.decode_payload(payload)
            crypto.validate_statement(statement)
            if payload != att.statement_bytes(statement):
                raise ValueError("the payload is not in canonical form")
        except ValueError as error:
            return Checked(False, len(lines), f"envelope {number}: {error}")
        statements.append(statement)
    try:
        return _cited(lines, statements, ledger)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as error:
        return Checked(False, len(lines), f"envelope {len(lines)}: malformed summary ({error!r})")


def _cited(lines: list[str], statements: list[dict[str, Any]], ledger: Ledger | None) -> Checked:
    """The summary cites exactly the statements beside it and says PASSED only of a pass."""
    summary = statements[-1]
    if summary["predicateType"] != att.VSA:
        return Checked(False, len(lines), f"envelope {len(lines)}: not a verification summary")
    predicate = summary["predicate"]
    cited = [a["digest"].get("sha256") for a in predicate.get("inputAttestations", [])][:-1]
    actual = [hashlib.sha256(att.statement_bytes(s)).hexdigest() for s in statements[:-1]]
    if cited != actual:
        index = next((i for i, (c, a) in enumerate(zip(cited, actual, strict=False)) if c != a), 0)
        return Checked(
            False,
            len(lines),
            f"envelope {index + 1}: not the statement the verification summary cites",
        )
    result = str(predicate.get("verificationResult"))
    status = predicate.get(f"{att.EXT}status")
    if result == "PASSED" and status != "passed":
        return Checked(False, len(lines), f"envelope {len(lines)}: PASSED for a {status} run")
    resource = str(predicate.get("resourceUri", ""))
    run_id = resource.rsplit("#run=", 1)[-1] if "#run=" in resource else ""
    if ledger is None:
        return Checked(True, len(lines), "", result, run_id)
    problem = _against_ledger(ledger, run_id, predicate, statements)
    return Checked(not problem, len(lines), problem, result, run_id, True)


def _against_ledger(
    ledger: Ledger, run_id: str, predicate: dict[str, Any], statements: list[dict[str, Any]]
) -> str:
    try:
        run_id = ledger.resolve(run_id)
    except BadInput as error:
        return f"envelope {len(statements)}: {error}"
    broken = [r for r in ledger.verify(run_id) if not r.ok]
    if broken:
        first = broken[0]
        return f"the ledger's run {run_id} is broken at position {first.position}: {first.problem}"
    tip = predicate["inputAttestations"][-1]
    position = int(str(tip.get("uri", "")).rsplit("&position=", 1)[-1] or 0)
    records = ledger.read(run_id)
    if not 0 < position <= len(records) or records[position - 1].hash != tip["digest"]["sha256"]:
        return f"envelope {len(statements)}: the chain tip is not in the ledger's run {run_id}"
    evidence = records[:position]
    name = str(predicate.get(f"{att.EXT}ledger", ""))
    derived = derive(evidence, ledger.artifacts_for([r.event for r in evidence]), name)
    if len(derived) != len(statements):
        return f"the ledger derives {len(derived)} statements, the bundle has {len(statements)}"
    for number, (mine, theirs) in enumerate(zip(derived, statements, strict=True), start=1):
        if att.statement_bytes(mine) != att.statement_bytes(theirs):
            return f"envelope {number}: not what the ledger derives today"
    today = _evidence(records)
    if len(today) > position:  # later facts (an answer, a rerun) may have changed the verdict
        now = derive(today, ledger.artifacts_for([r.event for r in today]), name)[-1]["predicate"]
        if _conclusion(now) != _conclusion(predicate):
            return (
                f"envelope {len(statements)}: stale: the ledger's verdict has changed since "
                f"position {position} (now {now[f'{att.EXT}status']})"
            )
    return ""


def _conclusion(predicate: dict[str, Any]) -> dict[str, Any]:
    """What a later fact may change: the result, the status and the classifications."""
    keep = {"verificationResult", "policy"}
    return {
        k: v
        for k, v in predicate.items()
        if k in keep
        or (k.startswith(att.EXT) and k not in (f"{att.EXT}verifierVersion", f"{att.EXT}ledger"))
    }


# The keys' files, for the command line (which calls the ledger, never an adapter).
generate_key = crypto.generate_key
load_signer = crypto.load_signer
load_public = crypto.load_public
