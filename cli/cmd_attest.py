"""`ledger attest` and `ledger verify-attestation`: the verdict as signed in-toto evidence."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from release_ledger.cli.options import EXIT_FAILED, OutFile, common, emit_json
from release_ledger.ledger.bootstrap import opened
from release_ledger.ledger.vocabulary import BadInput


@click.command("attest")
@click.argument("run", required=False)
@click.option("--key", "key", default=None, metavar="FILE",
              help="ed25519 private key (PEM, 0600); absent: unsigned.")  # fmt: skip
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Write the bundle (JSON lines of DSSE envelopes) to FILE.")  # fmt: skip
@click.option("--generate-key", "generate", default=None, type=click.Path(dir_okay=False),
              help="Write a new ed25519 key to FILE (0600), public to FILE.pub.")  # fmt: skip
@common
def attest(
    run: str | None,
    key: str | None,
    out: str | None,
    generate: str | None,
    ledger_url: str | None,
    as_json: bool,
) -> None:
    """The run's verdict as in-toto statements in DSSE envelopes, one per line: a test-result
    statement per revision (and interpreter), then a SLSA verification summary whose
    verificationResult is PASSED only for a passed verdict. Appends `AttestationIssued`.

    \b
    Examples:
      ledger attest --generate-key release.key
      ledger attest 3f2a --key release.key --out verdict.intoto.jsonl
      ledger attest 3f2a            (unsigned statements, said so on stderr)
    """
    from release_ledger.ledger import attest as attestation

    if generate is not None:
        if run is not None or key is not None or out is not None:
            raise BadInput("--generate-key takes no RUN, --key or --out")
        key_id = attestation.generate_key(Path(generate))
        if as_json:
            emit_json({"key_id": key_id, "private": generate, "public": generate + ".pub"})
        else:
            click.echo(f"key {key_id[:12]}: private {generate} (0600), public {generate}.pub")
        return
    if run is None:
        raise BadInput("attest needs RUN (or --generate-key FILE)")
    signer = attestation.load_signer(Path(key)) if key is not None else None
    issue = attestation.attest

    # Opened before anything is appended: an unwritable --out records nothing.
    with OutFile(out) as target, opened(ledger_url, create=False) as ledger:
        bundle = issue(ledger, run, signer)
    text = "".join(line + "\n" for line in bundle.lines)
    if signer is None:
        click.echo(
            "ledger: unsigned statements (no --key): nothing proves who issued them", err=True
        )
    target.write(text)
    if as_json:
        extra = {"out": out} if out else {"bundle": [json.loads(line) for line in bundle.lines]}
        emit_json(bundle.as_dict() | extra)
    elif out is None:
        click.echo(text, nl=False)
    else:
        click.echo(
            f"run {bundle.run_id[:12]}: {len(bundle.lines)} envelopes, "
            f"{bundle.verification_result} ({bundle.status}) -> {out}"
        )


@click.command("verify-attestation")
@click.argument("bundle")
@click.option("--pub", "pub", required=True, metavar="FILE",
              help="The signer's ed25519 public key (PEM).")  # fmt: skip
@common
def verify_attestation(bundle: str, pub: str, ledger_url: str | None, as_json: bool) -> None:
    """Check every envelope's signature and its statement's shape (the in-toto bindings'
    validators); with --ledger, also that each statement is what the ledger derives today,
    from an intact chain. Exit 0 valid, 1 invalid (which envelope and why), 2 bad input.

    \b
    Examples:
      ledger verify-attestation verdict.intoto.jsonl --pub release.key.pub
      ledger verify-attestation verdict.intoto.jsonl --pub release.key.pub --ledger sqlite:///l.db
    """
    from release_ledger.ledger import attest as attestation

    key = attestation.load_public(Path(pub))
    lines = attestation.read_bundle(Path(bundle))
    if ledger_url is None:
        checked = attestation.verify(lines, key)
    else:
        with opened(ledger_url, create=False) as ledger:
            checked = attestation.verify(lines, key, ledger)
    if as_json:
        emit_json(checked.as_dict())
    elif checked.ok:
        where = " and derives from the ledger" if checked.against_ledger else ""
        click.echo(
            f"valid: {checked.envelopes} envelopes signed by {key.keyid[:12]}{where}; "
            f"verification result {checked.verification_result}"
        )
    else:
        click.echo(f"invalid: {checked.problem}")
    if not checked.ok:
        sys.exit(EXIT_FAILED)


COMMANDS = [attest, verify_attestation]
