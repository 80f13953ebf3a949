"""Kept readings: a run's answers as the read side computed them (`ledger show`'s timeline,
`ledger verdict`'s document), kept beside the run as a memo, never a fact: their validity is
the read side's to judge (`ledger/kept_readings.py`), and losing one costs only a recompute."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from release_ledger.adapters.store_dialects import READINGS_TABLE
from release_ledger.adapters.store_records import KeptReading

if TYPE_CHECKING:
    from release_ledger.adapters.store_db import Database


class Readings:
    """The `ledger_readings` table (made on first need in an older ledger)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def kept_reading(self, run_id: str) -> KeptReading | None:
        """The reading kept for the run, if any (its validity is the read side's to judge);
        None too when no reading was ever kept in this ledger (no table yet)."""
        try:
            rows = self._db.query(
                "SELECT length, tip, code, seal, body FROM ledger_readings "
                f"WHERE run_id = {self._db.ph}",
                (run_id,),
            )
        except Exception:  # no table yet, or unreadable: nothing kept
            return None
        if not rows:
            return None
        length, tip, code, seal, body = rows[0]
        try:
            text = zlib.decompress(bytes(body)).decode()
        except (zlib.error, TypeError, UnicodeDecodeError):
            return None  # not a body this code wrote: as if nothing were kept
        return KeptReading(int(length), str(tip), str(code), str(seal), text)

    def keep_reading(self, run_id: str, reading: KeptReading) -> bool:
        """Keep (replace) the run's reading; best effort and never waiting long for a busy
        writer: False when it could not be written (read-only, locked, ...)."""
        ph = self._db.ph
        upsert = (
            "INSERT INTO ledger_readings (run_id, length, tip, code, seal, body) "
            f"VALUES ({', '.join([ph] * 6)}) ON CONFLICT (run_id) DO UPDATE SET "
            "length = excluded.length, tip = excluded.tip, code = excluded.code, "
            "seal = excluded.seal, body = excluded.body"
        )
        body = zlib.compress(reading.body.encode(), 1)
        row = (run_id, reading.length, reading.tip, reading.code, reading.seal, body)
        try:
            self._db.write_briefly([READINGS_TABLE, upsert], row)
        except Exception:
            return False
        return True
