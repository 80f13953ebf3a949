"""The run index's seals: an HMAC under the ledger's key over each run's (length, tip),
written in the appending transaction and checked on every read, so removing a run's last
events and fixing its index row to match is told from an honest run."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from release_ledger.adapters.store_dialects import SEALS_TABLE
from release_ledger.domain.errors import BrokenRun

if TYPE_CHECKING:
    from release_ledger.adapters.store_db import Database
    from release_ledger.adapters.store_records import Sealer


class Seals:
    """Signs and checks the runs' seals, when the ledger's key is at hand (`sealer`)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        # Set by `Ledger.sealing_key`; without it nothing is sealed or checked.
        self.sealer: Sealer | None = None
        self._table_made = False
        self._sql_upsert = (
            "INSERT INTO ledger_seals (run_id, length, tip, key_id, seal) VALUES "
            f"({', '.join([db.ph] * 5)}) ON CONFLICT (run_id) "
            "DO UPDATE SET length = "
            "excluded.length, tip = excluded.tip, key_id = excluded.key_id, seal = excluded.seal"
        )

    def write_seal(self, c: Any, run_id: str, length: int, tip: str) -> None:
        """The run's seal over its new (length, tip), in the caller's transaction."""
        assert self.sealer is not None
        if not self._table_made:
            c.execute(SEALS_TABLE)
            self._table_made = True
        mac = self.sealer.sign(run_id, length, tip)
        c.execute(self._sql_upsert, (run_id, length, tip, self.sealer.key_id, mac))

    def seal_unsealed(self) -> int:
        """Seal every run that has no seal yet (a ledger from before seals, or a key made
        just now: trusted on first use); how many were sealed."""
        if self.sealer is None:
            return 0
        with self._db.write() as c:
            c.execute(SEALS_TABLE)
            self._table_made = True
            c.execute(
                "SELECT r.run_id, r.length, r.tip FROM ledger_runs r LEFT JOIN ledger_seals s "
                "ON s.run_id = r.run_id WHERE s.run_id IS NULL"
            )
            rows = list(c.fetchall())
            for row in rows:
                if isinstance(row, dict):  # PostgreSQL's datastore gives dicts
                    row = (row["run_id"], row["length"], row["tip"])
                self.write_seal(c, str(row[0]), int(row[1]), str(row[2]))
        return len(rows)

    def seal_of(self, run_id: str) -> list[tuple[Any, ...]] | None:
        """The run's seal as stored now, read before its events (`check_seal`): appends only
        move a seal forward with the events they add (one transaction), so the events read
        after it hold at least what it covers, whatever another writer commits between."""
        if self.sealer is None:
            return None
        try:
            rows = self._db.query(
                f"SELECT length, tip, key_id, seal FROM ledger_seals WHERE run_id = {self._db.ph}",
                (run_id,),
            )
        except Exception:  # no seals table: a ledger from before seals, not yet sealed
            return None
        return [tuple(row) for row in rows]

    def check_seal(
        self, run_id: str, hashes: Sequence[str], rows: list[tuple[Any, ...]] | None
    ) -> None:
        """BrokenRun unless the run's seal (made with this key) covers a prefix of its chain
        (`hashes`: each stored event's chain hash, in order): events removed behind the
        index's back, or an index row set by hand, show here. `rows` is `seal_of(run_id)`,
        read before the events (a seal read after them may cover a concurrent append)."""
        if self.sealer is None or rows is None:
            return
        if not rows:
            if hashes:
                raise BrokenRun(run_id, len(hashes), "the run is not sealed by the ledger's key")
            return
        length, tip, key_id, mac = int(rows[0][0]), str(rows[0][1]), str(rows[0][2]), rows[0][3]
        if key_id != self.sealer.key_id:
            return  # sealed by another runner's key (a shared ledger): not checked here
        if not hmac.compare_digest(str(mac), self.sealer.sign(run_id, length, tip)):
            raise BrokenRun(run_id, length, "the run's seal does not match (edited seal)")
        if length > len(hashes) or (length and hashes[length - 1] != tip):
            raise BrokenRun(
                run_id, min(length, len(hashes) + 1),
                f"the sealed run had {length} events ending at {tip[:12]}; the stored chain "
                f"has {len(hashes)} (events removed or replaced)",
            )  # fmt: skip
