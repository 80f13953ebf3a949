"""The hash chain over a run's stream, and the pure check that finds its first break.

Each event's hash covers its predecessor's hash and the event's exact stored bytes, so an
edited, removed or reordered event changes every hash after it. The run index keeps the
chain's tip, so removing the last events is caught too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

GENESIS = "0" * 64


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def chain_hash(prev: str, payload: bytes) -> str:
    return hashlib.sha256(prev.encode() + b"\n" + payload).hexdigest()


def link(prev: str, payload: bytes) -> tuple[str, bytes]:
    """(the event's chain hash, its stored state), hashing once."""
    digest = chain_hash(prev, payload)
    header = json.dumps({"hash": digest, "prev": prev}, sort_keys=True)
    return digest, header.encode() + b"\n" + payload


def split_state(state: bytes) -> tuple[str, str, bytes]:
    """(hash, prev, payload) of a stored state; the same as decode_state, without the dict."""
    if (
        state[152:153] == b"\n"
        and state[:10] == b'{"hash": "'
        and state[74:86] == b'", "prev": "'
        and state[150:152] == b'"}'
    ):
        digest, prev = state[10:74], state[86:150]
        if digest.isalnum() and prev.isalnum():
            return digest.decode(), prev.decode(), state[153:]
    header, payload = decode_state(state)
    return header["hash"], header["prev"], payload


# The header `link` writes, around its two 64-digit hashes (bytes 10-74 and 86-150).
HEADER_START, HEADER_MIDDLE, HEADER_END = b'{"hash": "', b'", "prev": "', b'"}\n'


def intact(states: Sequence[bytes], tip: str) -> bool:
    """True when the stored states, in position order, form an unbroken chain from the
    genesis that ends at `tip`: the quick check of a run list, in bytes throughout (a state
    whose header is not exactly the one `link` writes is read with `split_state`). False says
    only that something differs; `find_break` (or the store's own check) names where."""
    sha256 = hashlib.sha256
    prev = GENESIS.encode()
    for state in states:
        if (
            state[:10] == HEADER_START
            and state[74:86] == HEADER_MIDDLE
            and state[150:153] == HEADER_END
        ):
            digest, stored_prev, payload = state[10:74], state[86:150], state[153:]
        else:
            try:
                text_digest, text_prev, payload = split_state(state)
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                return False
            digest, stored_prev = text_digest.encode(), text_prev.encode()
        if stored_prev != prev or sha256(prev + b"\n" + payload).hexdigest().encode() != digest:
            return False
        prev = digest
    return prev.decode() == tip if states else True


def decode_state(state: bytes) -> tuple[dict[str, str], bytes]:
    header, _, payload = state.partition(b"\n")
    # Fast path for the exact header `link` writes; anything else goes through json.
    if (
        len(header) == 152
        and header.startswith(b'{"hash": "')
        and header[74:86] == b'", "prev": "'
        and header.endswith(b'"}')
        and header[10:74].isalnum()
        and header[86:150].isalnum()
    ):
        return {"hash": header[10:74].decode(), "prev": header[86:150].decode()}, payload
    decoded = json.loads(header)
    if not isinstance(decoded, dict):
        raise ValueError("event header is not an object")
    return decoded, payload


@dataclass(frozen=True)
class StoredLink:
    position: int
    header: dict[str, str]
    payload: bytes
    run_id_in_payload: str | None = None


@dataclass(frozen=True)
class ChainBreak:
    position: int
    problem: str


def find_break(
    run_id: str, links: Sequence[StoredLink], indexed_length: int | None, indexed_tip: str | None
) -> ChainBreak | None:
    """The first position where the stored stream stops matching its chain, or None."""
    prev = GENESIS
    for expected_position, link in enumerate(links, start=1):
        if link.position != expected_position:
            return ChainBreak(expected_position, f"event {expected_position} is missing")
        if link.header.get("prev") != prev:
            return ChainBreak(
                link.position, "does not follow its predecessor (removed or reordered event)"
            )
        digest = chain_hash(prev, link.payload)
        if link.header.get("hash") != digest:
            return ChainBreak(link.position, "content does not match its hash (edited event)")
        if link.run_id_in_payload is not None and link.run_id_in_payload != run_id:
            return ChainBreak(link.position, "belongs to another run (moved event)")
        prev = digest
    if indexed_length is not None and indexed_length != len(links):
        return ChainBreak(
            len(links) + 1,
            f"the run index records {indexed_length} events but {len(links)} are stored",
        )
    if indexed_tip is not None and links and indexed_tip != prev:
        return ChainBreak(len(links), "the last event does not match the recorded chain tip")
    return None
