"""Keys, DSSE envelopes and the in-toto bindings' validators: securesystemslib and
in-toto-attestation do the cryptography and the schema, none of it is written here."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from google.protobuf import json_format  # type: ignore[import-untyped]
from in_toto_attestation.predicates.test_result.v0 import (  # type: ignore[import-untyped]
    test_result_pb2,
)
from in_toto_attestation.predicates.vsa.v1 import vsa_pb2  # type: ignore[import-untyped]
from in_toto_attestation.v1.statement import Statement  # type: ignore[import-untyped]
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, Key, Signer, SSlibKey

from release_ledger.adapters.bounded_files import read_capped
from release_ledger.domain.errors import BadInput

PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATES = {
    "https://in-toto.io/attestation/test-result/v0.1": test_result_pb2.TestResult,
    "https://slsa.dev/verification_summary/v1": vsa_pb2.VerificationSummary,
}


def generate_key(path: Path) -> str:
    """Write a new ed25519 private key to `path` (0600, PEM) and its public key to
    `path.pub`; returns the key id. Refuses to overwrite."""
    public = path.with_name(path.name + ".pub")
    for target in (path, public):
        if target.exists():
            raise BadInput(f"{target} exists: not overwriting a key")
    if not path.parent.is_dir():
        raise BadInput(f"--generate-key {path}: directory {path.parent} does not exist")
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
        public.write_bytes(
            private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    except OSError as error:
        raise BadInput(f"--generate-key {path}: cannot write: {error.strerror}") from error
    return SSlibKey.from_crypto(private.public_key()).keyid


# A PEM ed25519 key is a few hundred bytes: anything past this is not a key (`/dev/zero`
# would otherwise be read for ever).
MAX_KEY_BYTES = 64 * 1024


def _read(path: Path, what: str) -> bytes:
    return read_capped(path, what, MAX_KEY_BYTES)


def load_signer(path: Path) -> Signer:
    """An ed25519 signer from a PEM private key that only its owner can read."""
    data = _read(path, "--key")
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise BadInput(f"--key {path}: readable by others (chmod 600 it)")
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise BadInput(f"--key {path}: not an unencrypted PEM private key") from None
    if not isinstance(private, Ed25519PrivateKey):
        raise BadInput(f"--key {path}: not an ed25519 key")
    return CryptoSigner(private, SSlibKey.from_crypto(private.public_key()))


def load_public(path: Path) -> Key:
    data = _read(path, "--pub")
    try:
        public = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise BadInput(f"--pub {path}: not a PEM public key") from None
    if not isinstance(public, Ed25519PublicKey):
        raise BadInput(f"--pub {path}: not an ed25519 key")
    key: Key = SSlibKey.from_crypto(public)
    return key


def envelope(payload: bytes, signer: Signer | None) -> dict[str, Any]:
    """A DSSE envelope of `payload`, signed when there is a signer."""
    env = Envelope(payload, PAYLOAD_TYPE, {})
    if signer is not None:
        env.sign(signer)
    document: dict[str, Any] = env.to_dict()
    return document


def open_envelope(document: Any, key: Key | None) -> bytes:
    """The payload, after the key's signature verifies (ValueError saying why, otherwise)."""
    if not isinstance(document, dict):
        raise ValueError("not a DSSE envelope")
    try:
        env = Envelope.from_dict(document)
    except Exception as error:
        raise ValueError(f"not a DSSE envelope ({type(error).__name__})") from None
    if env.payload_type != PAYLOAD_TYPE:
        raise ValueError(f"payload type {env.payload_type!r} is not in-toto")
    if key is not None:
        try:
            env.verify([key], 1)
        except Exception:
            raise ValueError("signature does not verify with the public key") from None
    payload: bytes = env.payload
    return payload


def validate_statement(statement: Any) -> None:
    """The in-toto bindings' own checks: the Statement's validator, then the predicate
    parsed strictly into its protobuf (URI-named extension fields set aside)."""
    if not isinstance(statement, dict):
        raise ValueError("the payload is not a JSON object")
    predicate_type = statement.get("predicateType")
    schema = PREDICATES.get(str(predicate_type))
    if schema is None:
        raise ValueError(f"unknown predicate type {predicate_type!r}")
    predicate = statement.get("predicate")
    if not isinstance(predicate, dict):
        raise ValueError("the statement has no predicate object")
    try:
        subjects = [_descriptor(s) for s in statement.get("subject", [])]
        bound = Statement(subjects, str(predicate_type), predicate)
        if statement.get("_type") != bound.pb.type:
            raise ValueError("wrong statement type")
        bound.validate()
        standard = {k: v for k, v in predicate.items() if "://" not in k}
        json_format.ParseDict(standard, schema())
    except (json_format.ParseError, TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"malformed statement: {error}") from None


def _descriptor(subject: Any) -> Any:
    from in_toto_attestation.v1.resource_descriptor_pb2 import (  # type: ignore[import-untyped]
        ResourceDescriptor,
    )

    if not isinstance(subject, dict):
        raise ValueError("a subject is not an object")
    return json_format.ParseDict(subject, ResourceDescriptor())


def decode_payload(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except RecursionError:
        raise ValueError("the payload nests too deeply to be a statement") from None
    except ValueError:
        raise ValueError("the payload is not JSON") from None


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
