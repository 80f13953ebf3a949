"""The runs' hash chains, checked: each stored event's state is a one-line JSON header
(`prev`, `hash`) followed by the event's canonical JSON, the hash covering the previous hash
and those exact bytes, and the run index (`ledger_runs`) holds each run's length and chain
head, so an edited, removed, reordered or truncated event is told. Reads check here first;
nothing is concluded from a broken run (`BrokenRun`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from release_ledger.domain.chain import (
    GENESIS,
    HEADER_END,
    HEADER_MIDDLE,
    HEADER_START,
    intact,
    split_state,
)
from release_ledger.domain.errors import BrokenRun

if TYPE_CHECKING:
    from release_ledger.adapters.store_db import Database
    from release_ledger.adapters.store_records import RunRow
    from release_ledger.adapters.store_seals import Seals

Link = tuple[int, str, str, str, bytes]  # position, kind, hash, prev, payload


def lock_tip(db: Database, c: Any, run_id: str) -> tuple[int, str]:
    """The run's (length, tip) under the write lock, in the caller's transaction (SQLite: the
    database's write lock; PostgreSQL: the run's index row, created if new, then locked with
    SELECT ... FOR UPDATE until commit)."""
    if db.dialect != "sqlite":
        c.execute(
            "INSERT INTO ledger_runs (run_id, length, tip) VALUES (%s, 0, %s) "
            "ON CONFLICT (run_id) DO NOTHING",
            (run_id, GENESIS),
        )
        c.execute("SELECT length, tip FROM ledger_runs WHERE run_id = %s FOR UPDATE", (run_id,))
    else:
        c.execute("SELECT length, tip FROM ledger_runs WHERE run_id = ?", (run_id,))
    row = c.fetchone()
    if row is None:
        return 0, GENESIS
    values = tuple(row.values()) if isinstance(row, dict) else tuple(row)
    return int(values[0]), str(values[1])


class Chain:
    """Checks runs' stored events against their chain, the run index and the run's seal."""

    def __init__(self, db: Database, seals: Seals) -> None:
        self._db = db
        self._seals = seals
        self._sql_read = (
            "SELECT originator_version, topic, state FROM ledger_events "
            f"WHERE originator_id = {db.ph} ORDER BY originator_version"
        )

    def stored(self, run_id: str) -> list[tuple[Any, ...]]:
        """(position, kind, state) of the run's stored events, as they are."""
        return self._db.query(self._sql_read, (run_id,))

    def _index_row(self, run_id: str) -> list[tuple[Any, ...]]:
        return self._db.query(
            f"SELECT length, tip FROM ledger_runs WHERE run_id = {self._db.ph}", (run_id,)
        )

    def tip(self, run_id: str) -> tuple[int, str]:
        """(number of events, hash of the last event) of a run; (0, GENESIS) when new."""
        rows = self._index_row(run_id)
        if not rows:
            return 0, GENESIS
        return int(rows[0][0]), str(rows[0][1])

    def check_chain(self, run_id: str) -> int:
        """The run's length after checking its hash chain against the run index, without
        parsing its events; `BrokenRun` when broken."""
        return self.verified_tip(run_id)[0]

    def verified_tip(self, run_id: str) -> tuple[int, str]:
        """(length, chain head) of the run after checking its hash chain as `read` does,
        without parsing its events; `BrokenRun` when broken."""
        links = self.verified(run_id)
        return len(links), (links[-1][2] if links else GENESIS)

    def verified(self, run_id: str) -> list[Link]:
        """(position, kind, hash, prev, payload) of each stored event, after checking the
        chain: positions 1..n, each event follows its predecessor and matches its hash, and
        the run index agrees on the length and the tip. The full check (artifacts too) is
        `ledger verify`; this one costs one sha256 per event.

        The index is read first: appends only add events (index and events in one
        transaction), so the events read after it hold at least the indexed ones, whatever
        another writer commits in between; a reader never mistakes a concurrent append for
        a broken chain.
        """
        index = self._index_row(run_id)
        seal = self._seals.seal_of(run_id)  # before the events, like the index
        rows = self.stored(run_id)
        links = _links(run_id, rows)
        self._agree_with_index(run_id, links, index)
        self._seals.check_seal(run_id, [link[2] for link in links], seal)
        return links

    def _agree_with_index(
        self, run_id: str, links: list[Link], index: list[tuple[Any, ...]]
    ) -> None:
        """BrokenRun unless the run index (read before the events) agrees with the chain on
        the length and the tip."""
        stored = len(links)
        checked = [(int(index[0][0]), str(index[0][1]))] if index else []
        if not checked or checked[0][0] < stored:
            # More events than indexed: appended since the index was read (then the index,
            # committed with them, now counts them all) or added behind the chain's back.
            again = self._index_row(run_id)
            if stored and not again:
                raise BrokenRun(run_id, 1, "the run is missing from the run index")
            if again and int(again[0][0]) < stored:
                raise BrokenRun(
                    run_id,
                    int(again[0][0]) + 1,
                    f"{stored} events are stored but the run index records {again[0][0]}",
                )
            checked += [(int(again[0][0]), str(again[0][1]))] if again else []
        for length, tip in checked:
            if stored < length:
                if length == checked[0][0]:
                    raise BrokenRun(
                        run_id,
                        stored + 1,
                        f"the run index records {length} events but {stored} are stored",
                    )
                continue  # the second read saw appends committed after the events were read
            if length and links[length - 1][2] != tip:
                raise BrokenRun(run_id, length, "the last indexed event is not the recorded tip")

    def broken_runs(self, runs: Sequence[RunRow]) -> dict[str, BrokenRun]:
        """Check the hash chains of several runs (as listed, with the index rows read first)
        in one read of their events: the broken ones, each with where. A run whose stored
        events disagree with its listed index is checked again on its own (`check_chain`),
        which tells a concurrent append from a break."""
        found: dict[str, BrokenRun] = {}
        if not runs:
            return found
        ids = [r.run_id for r in runs]
        if self._db.dialect != "sqlite":
            whole = self._intact_on_server(ids)
            if whole is not None:
                for row in runs:
                    count, last = whole.get(row.run_id, (0, None))
                    if not (count == row.length and (not count or last == row.tip)):
                        self._recheck(row.run_id, found)
                return found
        marks = ", ".join([self._db.ph] * len(ids))
        stored: dict[str, list[tuple[int, bytes]]] = {run_id: [] for run_id in ids}
        for run_id, position, state in self._db.query(
            "SELECT originator_id, originator_version, state FROM ledger_events "
            f"WHERE originator_id IN ({marks}) ORDER BY originator_id, originator_version",
            ids,
        ):
            bucket = stored.get(run_id)
            if bucket is None:  # PostgreSQL: the id as stored, perhaps with dashes
                bucket = stored.setdefault(str(run_id).replace("-", ""), [])
            bucket.append((int(position), state if type(state) is bytes else bytes(state)))
        for row in runs:
            events = stored.get(row.run_id, [])
            if not (
                len(events) == row.length
                and all(position == n for n, (position, _) in enumerate(events, start=1))
                and intact([state for _, state in events], row.tip)
            ):
                self._recheck(row.run_id, found)
        return found

    def _recheck(self, run_id: str, found: dict[str, BrokenRun]) -> None:
        """A run the quick check could not vouch for: the full chain check says what broke."""
        try:
            self.check_chain(run_id)
        except BrokenRun as broken:
            found[run_id] = broken

    def _intact_on_server(self, ids: Sequence[str]) -> dict[str, tuple[int, str | None]] | None:
        """PostgreSQL: `domain.chain.intact` computed by the server (its sha256), so a run
        list moves one row per run instead of every event. For each run with events: how
        many, and the last event's hash when every event has the header `link` writes, at
        positions 1..n, follows its predecessor and matches its hash (else None: the caller
        checks that run in full). None when the server cannot answer (then Python checks)."""
        marks = ", ".join(["%s"] * len(ids))
        digest = "substring(state from 11 for 64)"
        sql = (
            "SELECT run_id, count(*), bool_and(ok), (array_agg(digest ORDER BY position DESC))[1] "
            f"FROM (SELECT originator_id AS run_id, originator_version AS position, {digest} "
            "AS digest, coalesce(originator_version = row_number() OVER w "
            "AND substring(state from 1 for 10) = %s AND substring(state from 75 for 12) = %s "
            "AND substring(state from 151 for 3) = %s "
            f"AND substring(state from 87 for 64) = coalesce(lag({digest}) OVER w, %s) "
            "AND encode(sha256(substring(state from 87 for 64) || %s || substring(state from 154)),"
            f" 'hex') = encode({digest}, 'escape'), false) AS ok FROM ledger_events "
            f"WHERE originator_id IN ({marks}) "
            "WINDOW w AS (PARTITION BY originator_id ORDER BY originator_version)) AS e "
            "GROUP BY run_id"
        )
        params = [HEADER_START, HEADER_MIDDLE, HEADER_END, GENESIS.encode(), b"\n", *ids]
        try:
            rows = self._db.query(sql, params)
        except Exception:  # e.g. a server without sha256 (PostgreSQL < 11)
            return None
        found: dict[str, tuple[int, str | None]] = {}
        for run_id, events, ok, last in rows:
            tip = bytes(last).decode("ascii", "replace") if ok and last is not None else None
            found[str(run_id).replace("-", "")] = (int(events), tip)
        return found


def _links(run_id: str, rows: list[tuple[Any, ...]]) -> list[Link]:
    """The stored events' links, each checked to follow its predecessor and match its hash
    (`BrokenRun` at the first that does not)."""
    links: list[Link] = []
    prev = GENESIS
    prev_bytes = prev.encode()
    sha256 = hashlib.sha256
    for expected, (position, kind, state) in enumerate(rows, start=1):
        if position != expected:
            raise BrokenRun(run_id, expected, f"event {expected} is missing")
        if type(state) is not bytes:
            state = bytes(state)
        # The header `link` writes, checked in bytes (`split_state` reads any other).
        stored = state[86:150]
        if (
            state[:10] == HEADER_START
            and state[74:86] == HEADER_MIDDLE
            and state[150:153] == HEADER_END
            and state[10:74].isalnum()
            and stored.isalnum()
        ):
            digest, payload = state[10:74].decode(), state[153:]
            follows = stored == prev_bytes
        else:
            try:
                digest, stored_prev, payload = split_state(state)
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                raise BrokenRun(run_id, position, "its chain header cannot be read") from None
            follows = stored_prev == prev
        if not follows:
            raise BrokenRun(run_id, position, "does not follow its predecessor")
        if sha256(prev_bytes + b"\n" + payload).hexdigest() != digest:
            raise BrokenRun(run_id, position, "content does not match its hash")
        links.append((position, str(kind), digest, prev, payload))
        prev = digest
        prev_bytes = digest.encode()
    return links
