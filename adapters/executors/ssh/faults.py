"""Naming what went wrong with an ssh connection, so the gate can record it as data.

ssh exits 255 for its own failures and explains on stderr; whether the remote session had
started (it prints its temporary directory first) separates a refused connection from a
dropped one.
"""

from __future__ import annotations

SSH_CONNECT = "ssh-connect"
SSH_AUTH = "ssh-auth"
SSH_DROPPED = "ssh-dropped"
SSH_TRANSFER = "ssh-transfer"  # the answer arrived whole but its sha256 did not match
SSH_CHECKOUT = "ssh-checkout"  # the mirror could not give the exact commit
SSH_REMOTE = "ssh-remote"  # the remote side failed before running the command
TIMEOUT = "timeout"
CANCELLED = "cancelled"

_AUTH = (
    "permission denied",
    "too many authentication failures",
    "host key verification failed",
    "no matching host key",
    "authentication failed",
)
_CONNECT = (
    "connection refused",
    "could not resolve hostname",
    "no route to host",
    "network is unreachable",
    "connection timed out",
    "operation timed out",
    "kex_exchange_identification",
    "connection reset by peer",
    "connection closed by",
    "name or service not known",
)


def classify_ssh_failure(stderr: str, *, session_started: bool) -> str:
    """`ssh-auth`, `ssh-connect` or `ssh-dropped` for an ssh client that exited 255."""
    text = stderr.lower()
    if session_started:
        return SSH_DROPPED
    if any(marker in text for marker in _AUTH):
        return SSH_AUTH
    if any(marker in text for marker in _CONNECT):
        return SSH_CONNECT
    return SSH_DROPPED


def last_line(text: str) -> str:
    """The last non-empty stderr line: short enough for an event, usually the real cause."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""
