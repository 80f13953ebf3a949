"""The ledger's sealing key: what makes a kept answer trustworthy on the reading path.

Kept readings and remembered verdict statuses are memos beside the events. An unkeyed digest
over them can be recomputed by anyone who can write the database (a hostile test that reached
it rewrote `failed` to `passed` and fixed the digest), so they are sealed with HMAC-SHA256
under a key that lives outside the database, readable by the gate's user only:

- a SQLite ledger's key is the file beside it, `<ledger>.key` (mode 0600), created on first
  use; the sandboxed suite never sees the ledger's folder;
- a PostgreSQL ledger's key is `${XDG_CONFIG_HOME:-~/.config}/release-ledger/keys/<ledger
  id>.key`: every runner that shares the ledger needs the same file (copy it), else each
  keeps its own memos and trusts only those;
- `LEDGER_KEY_FILE` names the file for either.

Where no key can be read or made (a read-only ledger), nothing kept is trusted: answers are
computed from the events, as a first reader computes them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_BYTES = 32


def key_path(dialect: str, description: str, ledger_id: str) -> Path:
    """Where this ledger's key lives (see the module's docstring)."""
    explicit = os.environ.get("LEDGER_KEY_FILE")
    if explicit:
        return Path(explicit)
    if dialect == "sqlite":
        return Path(description + ".key")
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "release-ledger" / "keys" / f"{ledger_id or 'ledger'}.key"


def load_key(path: Path, *, create: bool = True) -> tuple[bytes | None, bool]:
    """(the key in `path`, whether this call made it): made (0600, never replacing one) when
    absent and `create`; None when it can be neither read nor made."""
    try:
        text = path.read_text(encoding="ascii").strip()
        return (bytes.fromhex(text) if len(text) == 2 * KEY_BYTES else None), False
    except (OSError, ValueError):
        pass
    if not create:
        return None, False
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return load_key(path, create=False)  # another process made it first
    except OSError:
        return None, False
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(secrets.token_hex(KEY_BYTES) + "\n")
    return load_key(path, create=False)[0], True


def key_id(key: bytes) -> str:
    """A public name of the key (a digest of it): which runner's key sealed a run."""
    return hashlib.sha256(b"release-ledger key id\n" + key).hexdigest()[:16]


def seal(key: bytes, *parts: str | bytes) -> str:
    """HMAC-SHA256 over the parts (length-prefixed, so no two splits of one text collide)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        mac.update(len(data).to_bytes(8, "big"))
        mac.update(data)
    return mac.hexdigest()


def sealed(key: bytes | None, expected: str, *parts: str | bytes) -> bool:
    """Whether `expected` is the seal of the parts under `key` (never without a key)."""
    return key is not None and hmac.compare_digest(expected, seal(key, *parts))
