"""Signed in-toto attestations of a verdict: what `ledger attest` issues verifies with the
public key alone, and anything changed — a byte of an envelope, a statement swapped in, the
key, the ledger it came from — is refused; unmeasured and awaiting runs never read PASSED."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from in_toto_attestation.v1.statement import Statement  # type: ignore[import-untyped]

from release_ledger.adapters import attestations as crypto
from release_ledger.domain import events as ev
from release_ledger.domain.rules import verdict_under
from release_ledger.domain.run_state import fold
from release_ledger.domain.statuses import EXIT_CODES
from release_ledger.ledger import attest as attestation
from release_ledger.ledger.service import Ledger
from release_ledger.projections import attestation as att
from tests.adversarial.kit import failed_run, set_state, state_at
from tests.ledgerkit import open_ledger, run_cli
from tests.runbuilder import RunBuilder

A = "tests/test_a.py"


def passed_run(ledger: Ledger, run_id: str = "c" * 32) -> str:
    b = RunBuilder(run_id=run_id).discover([A]).plan({"s1": [A]})
    b.attempt("s1", "head", [A], {f"{A}::t": "passed", f"{A}::u": "passed"})
    b.attempt("s1", "base", [A], {f"{A}::t": "passed", f"{A}::u": "passed"})
    b.add(ev.RunCompleted)
    ledger.append(run_id, b.events, artifacts=b.artifacts)
    return run_id


def unmeasured_run(ledger: Ledger, run_id: str = "d" * 32) -> str:
    b = RunBuilder(run_id=run_id).discover([A]).plan({"s1": [A]})
    b.attempt("s1", "head", [A], None, signal=9)
    b.attempt("s1", "base", [A], {f"{A}::t": "passed"})
    b.add(ev.RunCompleted)
    ledger.append(run_id, b.events, artifacts=b.artifacts)
    return run_id


@pytest.fixture
def ledger(sqlite_url: str) -> Iterator[Ledger]:
    opened = open_ledger(sqlite_url)
    yield opened
    opened.close()


@pytest.fixture
def either(ledger_url: str) -> Iterator[Ledger]:
    """A SQLite ledger on disk and a real PostgreSQL one."""
    opened = open_ledger(ledger_url)
    yield opened
    opened.close()


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "release.key"
    crypto.generate_key(path)
    return path


def _statements(lines: list[str]) -> list[dict[str, object]]:
    out = []
    for line in lines:
        payload = base64.b64decode(json.loads(line)["payload"])
        out.append(json.loads(payload))
    return out


def test_generated_key_is_private_and_its_public_half_is_pem(key: Path) -> None:
    assert key.stat().st_mode & 0o777 == 0o600
    assert (key.parent / "release.key.pub").read_text().startswith("-----BEGIN PUBLIC KEY")


def test_round_trip_sign_then_verify_with_the_public_key_and_the_ledger(
    either: Ledger, key: Path
) -> None:
    ledger = either
    run = passed_run(ledger)
    bundle = attestation.attest(ledger, run[:6], crypto.load_signer(key))
    public = crypto.load_public(Path(f"{key}.pub"))
    assert bundle.verification_result == "PASSED" and len(bundle.lines) == 3
    assert attestation.verify(bundle.lines, public).ok
    checked = attestation.verify(bundle.lines, public, ledger)
    assert (checked.ok, checked.against_ledger, checked.run_id) == (True, True, run)
    test_result, _, _summary = _statements(bundle.lines)
    assert test_result["subject"] == [{"name": "git+head", "digest": {"gitCommit": "1" * 40}}]
    predicate = test_result["predicate"]
    assert isinstance(predicate, dict)
    assert predicate["passedTests"] == [f"{A}::t", f"{A}::u"] and predicate["result"] == "PASSED"


def test_statements_validate_against_the_in_toto_bindings(ledger: Ledger) -> None:
    bundle = attestation.attest(ledger, failed_run(ledger), None)
    for statement in _statements(bundle.lines):
        crypto.validate_statement(statement)
        subjects = [crypto._descriptor(s) for s in statement["subject"]]  # type: ignore[attr-defined]
        Statement(subjects, statement["predicateType"], statement["predicate"]).validate()
    summary = _statements(bundle.lines)[-1]["predicate"]
    assert isinstance(summary, dict)
    assert summary["verificationResult"] == "FAILED"
    assert summary[f"{att.EXT}introduced"] == [f"{A}::test_a"]


def test_attestation_is_an_event_shown_and_counted_by_audit(
    ledger: Ledger, key: Path, sqlite_url: str, tmp_path: Path
) -> None:
    run = passed_run(ledger)
    out = tmp_path / "bundle.jsonl"
    done = run_cli("attest", run[:8], "--key", str(key), "--out", str(out),
                   "--ledger", sqlite_url, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    issued = ledger.events(run)[-1]
    assert isinstance(issued, ev.AttestationIssued)
    assert issued.key_id == crypto.load_public(Path(f"{key}.pub")).keyid
    lines = out.read_text().splitlines()
    assert issued.envelope_sha256 == [attestation._sha(line) for line in lines]
    shown = run_cli("show", run[:8], "--ledger", sqlite_url, cwd=tmp_path)
    assert "attestation issued: 3 statements, signed by key" in shown.stdout
    audit = json.loads(run_cli("audit", run[:8], "--json", "--ledger", sqlite_url,
                               cwd=tmp_path).stdout)  # fmt: skip
    assert [a["envelopes"] for a in audit["attestations"]] == [3]
    verified = run_cli("verify-attestation", str(out), "--pub", f"{key}.pub",
                       "--ledger", sqlite_url, cwd=tmp_path)  # fmt: skip
    assert verified.returncode == 0 and "derives from the ledger" in verified.stdout


def test_unsigned_statements_say_so_and_do_not_verify(
    ledger: Ledger, key: Path, sqlite_url: str, tmp_path: Path
) -> None:
    run = passed_run(ledger)
    done = run_cli("attest", run[:8], "--ledger", sqlite_url, cwd=tmp_path)
    assert done.returncode == 0 and "unsigned" in done.stderr
    out = tmp_path / "unsigned.jsonl"
    out.write_text(done.stdout)
    refused = run_cli("verify-attestation", str(out), "--pub", f"{key}.pub", cwd=tmp_path)
    assert refused.returncode == 1 and "envelope 1: signature" in refused.stdout


@pytest.mark.parametrize("index", [0, 1, 2])
@pytest.mark.parametrize("part", ["payload", "signature"])
def test_a_flipped_byte_in_any_envelope_is_refused(
    ledger: Ledger, key: Path, index: int, part: str
) -> None:
    lines = attestation.attest(ledger, passed_run(ledger), crypto.load_signer(key)).lines
    document = json.loads(lines[index])
    holder = document if part == "payload" else document["signatures"][0]
    field = "payload" if part == "payload" else "sig"
    raw = bytearray(base64.b64decode(holder[field]))  # DSSE: both are base64
    raw[len(raw) // 2] ^= 0x01
    holder[field] = base64.b64encode(raw).decode()
    lines[index] = json.dumps(document)
    checked = attestation.verify(lines, crypto.load_public(Path(f"{key}.pub")))
    assert not checked.ok and checked.problem.startswith(f"envelope {index + 1}:")


def test_a_swapped_statement_is_refused(ledger: Ledger, key: Path) -> None:
    signer = crypto.load_signer(key)
    public = crypto.load_public(Path(f"{key}.pub"))
    ours = attestation.attest(ledger, passed_run(ledger), signer).lines
    other = attestation.attest(ledger, failed_run(ledger), signer).lines
    swapped = [other[0], *ours[1:]]  # validly signed, but not the statement the VSA cites
    checked = attestation.verify(swapped, public)
    assert not checked.ok and "envelope 1: not the statement" in checked.problem
    reordered = [ours[1], ours[0], ours[2]]
    assert not attestation.verify(reordered, public).ok
    failed_summary = [*ours[:2], other[2]]
    assert not attestation.verify(failed_summary, public).ok


def test_a_wrong_key_is_refused(ledger: Ledger, key: Path, tmp_path: Path) -> None:
    lines = attestation.attest(ledger, passed_run(ledger), crypto.load_signer(key)).lines
    crypto.generate_key(tmp_path / "other.key")
    checked = attestation.verify(lines, crypto.load_public(tmp_path / "other.key.pub"))
    assert not checked.ok and "envelope 1: signature does not verify" in checked.problem


def test_an_attestation_of_a_since_tampered_ledger_is_refused(
    either: Ledger, key: Path, ledger_url: str, tmp_path: Path
) -> None:
    ledger = either
    run = failed_run(ledger)
    lines = attestation.attest(ledger, run, crypto.load_signer(key)).lines
    public = crypto.load_public(Path(f"{key}.pub"))
    assert attestation.verify(lines, public, ledger).ok
    state = state_at(ledger, run, 5)  # head's attempt, whose failure the verdict cites
    assert b'"revision":"head"' in state and b'"exit_code":1' in state
    set_state(ledger, run, 5, state.replace(b'"exit_code":1', b'"exit_code":0'))
    checked = attestation.verify(lines, public, ledger)
    assert not checked.ok and "broken at position" in checked.problem
    bundle = tmp_path / "b.jsonl"
    bundle.write_text("\n".join(lines) + "\n")
    done = run_cli("verify-attestation", str(bundle), "--pub", f"{key}.pub",
                   "--ledger", ledger_url, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1 and done.stdout.startswith("invalid:")


def test_a_stale_attestation_is_refused_once_the_verdict_changes(ledger: Ledger) -> None:
    b = RunBuilder(run_id="e" * 32).discover([A]).plan({"s1": [A]})
    b.attempt("s1", "head", [A], None, signal=9)
    ledger.append(b.run_id, b.events, artifacts=b.artifacts)
    lines = attestation.attest(ledger, b.run_id, None).lines
    assert attestation.verify(lines, None, ledger).ok
    again = RunBuilder(run_id="e" * 32)
    again.clock = b.clock
    again.events.clear()
    again.attempt("s1", "head", [A], {f"{A}::t": "passed"}, attempt=2)
    again.attempt("s1", "base", [A], {f"{A}::t": "passed"})
    ledger.append(b.run_id, again.events, artifacts=again.artifacts)
    checked = attestation.verify(lines, None, ledger)
    assert not checked.ok and "stale" in checked.problem


def test_an_unmeasured_run_never_gives_passed(ledger: Ledger) -> None:
    summary = _statements(attestation.attest(ledger, unmeasured_run(ledger), None).lines)[-1]
    predicate = summary["predicate"]
    assert isinstance(predicate, dict)
    assert predicate["verificationResult"] == "FAILED"
    assert predicate[f"{att.EXT}notPassedBecause"] == "unmeasured"


STATUSES = st.one_of(st.sampled_from(sorted(EXIT_CODES)), st.text(max_size=12))


@given(status=STATUSES)
def test_only_passed_is_ever_passed(status: str) -> None:
    """Over every verdict status (and unknown ones): the VSA built from a real run's fold
    says PASSED exactly when the verdict is `passed`, and otherwise names the status."""
    b = RunBuilder(run_id="f" * 32).discover([A]).plan({"s1": [A]})
    b.attempt("s1", "head", [A], {f"{A}::t": "passed"})
    b.attempt("s1", "base", [A], {f"{A}::t": "passed"})
    state = fold(list(enumerate(b.events, start=1)), b.artifacts)
    verdict = dataclasses.replace(verdict_under(state), status=status)
    provenance = att.Provenance(
        "sqlite:x", b.run_id, 5, "0" * 64, "2026-01-01T00:00:00+00:00", "v", "0" * 64
    )
    predicate = att.statements(state, verdict, provenance)[-1]["predicate"]
    assert (predicate["verificationResult"] == "PASSED") == (status == "passed")
    if status != "passed":
        assert predicate[f"{att.EXT}notPassedBecause"] == status
    crypto.validate_statement(att.statements(state, verdict, provenance)[-1])


# --- bad input ----------------------------------------------------------------------------------


def _bad_key(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.key"
    if kind == "missing":
        return path
    if kind == "directory":
        path.mkdir()
        return path
    if kind == "not-ed25519":
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        path.write_bytes(pem)
        path.chmod(0o600)
        return path
    if kind == "garbage":
        path.write_bytes(b"not a key\n")
        path.chmod(0o600)
        return path
    crypto.generate_key(path)  # world-readable
    path.chmod(0o644)
    return path


@pytest.mark.parametrize("kind", ["missing", "directory", "not-ed25519", "garbage", "world"])
def test_a_bad_key_file_is_one_line_exit_2_and_nothing_appended(
    ledger: Ledger, sqlite_url: str, tmp_path: Path, kind: str
) -> None:
    run = passed_run(ledger)
    before = len(ledger.events(run))
    path = _bad_key(tmp_path, kind)
    done = run_cli("attest", run[:8], "--key", str(path), "--ledger", sqlite_url, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and str(path) in done.stderr
    assert len(ledger.events(run)) == before
    if kind in ("missing", "directory", "garbage"):
        verify = run_cli("verify-attestation", os.devnull, "--pub", str(path), cwd=tmp_path)
        assert verify.returncode == 2 and len(verify.stderr.strip().splitlines()) == 1


def test_generate_key_refuses_to_overwrite(key: Path, tmp_path: Path) -> None:
    done = run_cli("attest", "--generate-key", str(key), cwd=tmp_path)
    assert done.returncode == 2 and "exists" in done.stderr


def test_test_results_name_the_distributions_environment_and_packages(ledger: Ledger) -> None:
    b = RunBuilder(run_id="9" * 32).discover([A]).plan({"s1": [A]})
    b.environment("head", packages="pytest==8.0\n", key="env-head")
    b.built("head")
    b.attempt("s1", "head", [A], {f"{A}::t": "failed"})
    b.attempt("s1", "base", [A], {f"{A}::t": "failed"})
    ledger.append(b.run_id, b.events, artifacts=b.artifacts)
    head, base, summary = _statements(attestation.attest(ledger, b.run_id, None).lines)
    assert [s["digest"] for s in head["subject"]] == [  # type: ignore[index]
        {"gitCommit": "1" * 40},
        {"sha256": "5" * 64},
        {"sha256": "7" * 64},
    ]
    assert base["subject"] == [{"name": "git+base", "digest": {"gitCommit": "2" * 40}}]
    configuration = {c["name"]: c for c in head["predicate"]["configuration"]}  # type: ignore[index]
    assert configuration["environment"]["uri"].endswith("/environment/env-head")
    assert "sha256" in configuration["frozen-packages"]["digest"]
    assert head["predicate"]["failedTests"] == [f"{A}::t"]  # type: ignore[index]
    predicate = summary["predicate"]
    assert predicate[f"{att.EXT}preexisting"] == [f"{A}::t"]  # type: ignore[index]
    assert predicate["verificationResult"] == "PASSED"  # type: ignore[index]


def test_a_matrix_gives_a_test_result_per_interpreter_and_revision(ledger: Ledger) -> None:
    from tests.test_interpreter_matrix import matrix_run

    run = matrix_run({"3.12": "passed", "3.13": "failed"})
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    *results, summary = _statements(attestation.attest(ledger, run.run_id, None).lines)
    named = [
        (r["predicate"][f"{att.EXT}interpreter"], r["predicate"][f"{att.EXT}revision"],  # type: ignore[index]
         r["predicate"]["result"])  # type: ignore[index]
        for r in results
    ]  # fmt: skip
    assert named == [
        ("3.12", "head", "PASSED"), ("3.12", "base", "PASSED"),
        ("3.13", "head", "FAILED"), ("3.13", "base", "PASSED"),
    ]  # fmt: skip
    assert summary["predicate"]["verificationResult"] == "FAILED"  # type: ignore[index]


def test_a_forged_pass_signed_with_the_right_key_is_refused_by_the_ledger(
    ledger: Ledger, key: Path
) -> None:
    signer = crypto.load_signer(key)
    public = crypto.load_public(Path(f"{key}.pub"))
    lines = attestation.attest(ledger, failed_run(ledger), signer).lines
    summary = _statements(lines)[-1]
    predicate = summary["predicate"]
    assert isinstance(predicate, dict)
    predicate["verificationResult"] = "PASSED"
    half_forged = [*lines[:-1], json.dumps(crypto.envelope(att.statement_bytes(summary), signer))]
    checked = attestation.verify(half_forged, public)
    assert not checked.ok and "PASSED for a failed run" in checked.problem
    predicate[f"{att.EXT}status"] = "passed"
    predicate[f"{att.EXT}introduced"] = []
    del predicate[f"{att.EXT}notPassedBecause"]
    forged = [*lines[:-1], json.dumps(crypto.envelope(att.statement_bytes(summary), signer))]
    assert attestation.verify(forged, public).ok  # the key alone cannot tell: the ledger can
    checked = attestation.verify(forged, public, ledger)
    assert not checked.ok and checked.problem == "envelope 3: not what the ledger derives today"


def test_attest_json_carries_the_bundle(ledger: Ledger, sqlite_url: str, tmp_path: Path) -> None:
    run = passed_run(ledger)
    done = run_cli("attest", run[:8], "--json", "--ledger", sqlite_url, cwd=tmp_path)
    document = json.loads(done.stdout)
    assert document["signed"] is False and len(document["bundle"]) == document["envelopes"] == 3
