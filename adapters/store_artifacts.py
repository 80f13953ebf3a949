"""Artifacts: JUnit reports, log tails and approval reports, stored content-addressed (sha256)
in the ledger's own database, in the transaction of the event that references them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from release_ledger.domain.chain import sha256_hex

if TYPE_CHECKING:
    from release_ledger.adapters.store_db import Database


class Artifacts:
    """The `ledger_artifacts` table: blobs by their sha256."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._sql_put = (
            "INSERT INTO ledger_artifacts (sha256, size, data) "
            f"VALUES ({db.ph}, {db.ph}, {db.ph}) ON CONFLICT (sha256) DO NOTHING"
        )

    @staticmethod
    def checked(artifacts: dict[str, bytes] | None) -> dict[str, bytes]:
        """The blobs, each checked against the hash it is filed under (ValueError if not)."""
        artifacts = dict(artifacts or {})
        for digest, data in artifacts.items():
            if sha256_hex(data) != digest:
                raise ValueError(f"artifact bytes do not match their hash {digest}")
        return artifacts

    def write(self, c: Any, artifacts: dict[str, bytes]) -> None:
        """Store blobs in the caller's transaction (idempotent)."""
        if artifacts:
            c.executemany(self._sql_put, [(h, len(d), d) for h, d in artifacts.items()])

    def put_artifacts(self, artifacts: dict[str, bytes]) -> None:
        """Store blobs ahead of the event that will reference them (idempotent)."""
        if not artifacts:
            return
        with self._db.transaction(commit=True) as c:
            self.write(c, artifacts)

    def artifact(self, digest: str) -> bytes | None:
        rows = self._db.query(
            f"SELECT data FROM ledger_artifacts WHERE sha256 = {self._db.ph}", (digest,)
        )
        return bytes(rows[0][0]) if rows else None

    def artifacts(self, digests: Iterable[str]) -> dict[str, bytes]:
        sql = "SELECT sha256, data FROM ledger_artifacts WHERE sha256 IN ({marks})"
        return {str(digest): bytes(data) for digest, data in self._db.query_in(sql, digests)}

    def artifact_digests(self) -> Iterator[tuple[str, bytes]]:
        for digest, data in self._db.query("SELECT sha256, data FROM ledger_artifacts"):
            yield str(digest), bytes(data)
