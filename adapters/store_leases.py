"""Leases: one driver per run. A gate holds its run's lease while it works (renewed), and its
appends are fenced by it (`check_lease`, in the appending transaction): a driver whose lease
was taken over can never append again."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from release_ledger.adapters.store_errors import LeaseHeld, LeaseLost
from release_ledger.adapters.store_records import Lease

if TYPE_CHECKING:
    from release_ledger.adapters.store_db import Database


class Leases:
    """The `ledger_leases` table: who drives which run, until when."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _now(self, c: Any) -> float:
        """The lease clock: the database server's for PostgreSQL (runners on many machines
        share it), this machine's for a SQLite file (every writer is on this machine)."""
        if self._db.dialect == "sqlite":
            return time.time()
        c.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8 AS now")
        row = c.fetchone()
        return float(next(iter(row.values())) if isinstance(row, dict) else row[0])

    def _lease_row(self, c: Any, run_id: str) -> tuple[str, float] | None:
        sql = f"SELECT holder, expires FROM ledger_leases WHERE run_id = {self._db.ph}"
        c.execute(sql + ("" if self._db.dialect == "sqlite" else " FOR UPDATE"), (run_id,))
        row = c.fetchone()
        if row is None:
            return None
        values = tuple(row.values()) if isinstance(row, dict) else tuple(row)
        return str(values[0]), float(values[1])

    def check_lease(self, c: Any, lease: Lease) -> None:
        """`LeaseLost` unless `lease` still holds its run (in the caller's transaction)."""
        row = self._lease_row(c, lease.run_id)
        if row is None or row[0] != lease.holder:
            by = f" by {row[0]}" if row else ""
            raise LeaseLost(
                f"run {lease.run_id}: this process's lease was taken over{by}; it stops here"
            )

    def acquire_lease(
        self,
        run_id: str,
        holder: str,
        seconds: float,
        *,
        holder_is_dead: Any = None,
    ) -> Lease:
        """Take the run's lease, or raise `LeaseHeld` naming the live holder. A lease whose
        expiry passed (its holder stopped renewing it: killed, hung, disconnected) is taken
        over; so is one whose holder `holder_is_dead` proves gone (a dead local process)."""
        ph = self._db.ph
        with self._db.write() as c:
            now = self._now(c)
            row = self._lease_row(c, run_id)
            live = row is not None and row[0] != holder and row[1] > now
            if row is not None and live and not (holder_is_dead and holder_is_dead(row[0])):
                raise LeaseHeld(run_id, row[0], row[1] - now)
            c.execute(
                f"INSERT INTO ledger_leases (run_id, holder, expires) VALUES ({ph}, {ph}, {ph}) "
                "ON CONFLICT (run_id) DO UPDATE SET holder = excluded.holder, "
                "expires = excluded.expires",
                (run_id, holder, now + seconds),
            )
        return Lease(run_id, holder, seconds)

    def renew_lease(self, lease: Lease) -> bool:
        """Extend a held lease; False when it was taken over (the holder must stop)."""
        ph = self._db.ph
        with self._db.write() as c:
            now = self._now(c)
            c.execute(
                f"UPDATE ledger_leases SET expires = {ph} WHERE run_id = {ph} AND holder = {ph}",
                (now + lease.seconds, lease.run_id, lease.holder),
            )
            return bool(c.rowcount == 1)

    def release_lease(self, lease: Lease) -> None:
        ph = self._db.ph
        with self._db.write() as c:
            c.execute(
                f"DELETE FROM ledger_leases WHERE run_id = {ph} AND holder = {ph}",
                (lease.run_id, lease.holder),
            )

    def lease_holder(self, run_id: str) -> tuple[str, float] | None:
        """(holder, seconds left) of a live lease on the run, else None."""
        with self._db.write() as c:
            now = self._now(c)
            row = self._lease_row(c, run_id)
        if row is None or row[1] <= now:
            return None
        return row[0], row[1] - now
