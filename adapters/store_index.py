"""The ledger's indexes, written in the transaction of the events they derive from
(`projections/content_index.py` derives them; `Ledger.reindex` rebuilds them from the events):
the run list's order and status, the open questions, and per-item content lookups."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from release_ledger.adapters.store_chain import lock_tip
from release_ledger.adapters.store_records import ContentHit, IndexedRun, RunRow

if TYPE_CHECKING:
    from release_ledger.adapters.store_db import Database
    from release_ledger.adapters.store_records import IndexWrite

RUN_ROW_TABLES = ("ledger_index", "ledger_questions", "ledger_status")  # a run's rows


class LedgerIndex:
    """The `ledger_index`, `ledger_questions` and `ledger_status` tables (and the run list,
    `ledger_runs` joined with its status)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        ph = db.ph
        self._sql_put_content = (
            "INSERT INTO ledger_index (kind, key, run_id, position, item, data) "
            f"VALUES ({', '.join([ph] * 6)}) ON CONFLICT DO NOTHING"
        )
        self._sql_question = {
            "open": "INSERT INTO ledger_questions (run_id, question_id, asked_at, position, "
            f"state, data) VALUES ({ph}, {ph}, {ph}, {ph}, 'open', {ph}) ON CONFLICT "
            "(run_id, question_id) DO UPDATE SET asked_at = excluded.asked_at, "
            "position = excluded.position, state = 'open', data = excluded.data",
            "expire": "UPDATE ledger_questions SET state = 'expired' "
            f"WHERE run_id = {ph} AND question_id = {ph} AND state = 'open'",
            "park": "UPDATE ledger_questions SET state = 'parked' "
            f"WHERE run_id = {ph} AND question_id = {ph}",
            "close": f"DELETE FROM ledger_questions WHERE run_id = {ph} AND question_id = {ph}",
        }
        self._sql_lifecycle = (
            "INSERT INTO ledger_status (run_id, lifecycle, asked, rule) "
            f"VALUES ({ph}, {ph}, {ph}, {ph}) ON CONFLICT (run_id) DO UPDATE SET "
            "lifecycle = COALESCE(excluded.lifecycle, ledger_status.lifecycle), "
            "asked = CASE WHEN excluded.asked = 1 THEN 1 ELSE ledger_status.asked END, "
            "rule = COALESCE(excluded.rule, ledger_status.rule)"
        )

    # -- writing --

    def write_index(self, c: Any, run_id: str, length: int, index: IndexWrite) -> None:
        """The index rows of events appended after `length` (inside the append's transaction)."""
        if index.content:
            c.executemany(
                self._sql_put_content,
                [
                    (kind, key, run_id, length + 1 + offset, item, data)
                    for kind, key, offset, item, data in index.content
                ],
            )
        for change, question_id, offset, data in index.questions:
            if change == "open":
                asked_at = str(json.loads(data)["asked_at"])
                c.execute(
                    self._sql_question[change],
                    (run_id, question_id, asked_at, length + 1 + offset, data),
                )
            else:
                c.execute(self._sql_question[change], (run_id, question_id))
        if index.lifecycle is not None:
            status, asked, rule = index.lifecycle
            c.execute(self._sql_lifecycle, (run_id, status, int(asked), rule))

    def replace_index(self, run_id: str, length: int, index: IndexWrite) -> bool:
        """Make the run's index rows exactly those of its first `length` events (a re-index
        from the events); False, writing nothing, when the run has moved on meanwhile."""
        with self._db.write() as c:
            current, _ = lock_tip(self._db, c, run_id)
            if current != length:
                return False
            for table in RUN_ROW_TABLES:
                c.execute(f"DELETE FROM {table} WHERE run_id = {self._db.ph}", (run_id,))
            self.write_index(c, run_id, 0, index)
        return True

    def index_format(self) -> str:
        rows = self._db.query("SELECT value FROM ledger_meta WHERE key = 'index_format'")
        return str(rows[0][0]) if rows else ""

    def set_index_format(self, value: str) -> None:
        ph = self._db.ph
        with self._db.write() as c:
            c.execute(
                f"INSERT INTO ledger_meta (key, value) VALUES ('index_format', {ph}) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (value,),
            )

    def set_verdict(self, run_id: str, length: int, code: str, verdict: str) -> None:
        """Remember the run's verdict status as of `length` events under `code` (rule and
        reader versions); an older computation never overwrites a newer one."""
        if self._db.read_only:
            return  # remembered by a reader that may write; computed again meanwhile
        ph = self._db.ph
        with self._db.transaction(commit=True) as c:
            c.execute(
                f"UPDATE ledger_status SET verdict = {ph}, verdict_length = {ph}, "
                f"verdict_code = {ph} WHERE run_id = {ph} "
                f"AND (verdict_length IS NULL OR verdict_length <= {ph})",
                (verdict, length, code, run_id, length),
            )

    # -- reading --

    def runs_page(self, limit: int | None = None, offset: int = 0) -> list[IndexedRun]:
        """Runs newest first (runs without a start last), with their status rows: one
        indexed range read."""
        columns = (
            "r.run_id, r.started_at, r.repo, r.head, r.base, r.head_ref, r.base_ref, r.length, "
            "r.tip, s.lifecycle, s.asked, s.rule, s.verdict, s.verdict_length, s.verdict_code"
        )
        join = "FROM ledger_runs r LEFT JOIN ledger_status s ON s.run_id = r.run_id"
        page = f" LIMIT {int(limit)} OFFSET {int(offset)}" if limit is not None else ""
        rows = self._db.query(
            f"SELECT {columns} {join} WHERE r.started_at IS NOT NULL "
            f"ORDER BY r.started_at DESC, r.run_id{page}"
        )
        if limit is None or len(rows) < limit:
            dated = self._db.query("SELECT count(*) FROM ledger_runs WHERE started_at IS NOT NULL")
            skip = max(0, offset - int(dated[0][0]))
            more = "" if limit is None else f" LIMIT {int(limit) - len(rows)} OFFSET {skip}"
            rows += self._db.query(
                f"SELECT {columns} {join} WHERE r.started_at IS NULL ORDER BY r.run_id{more}"
            )
        return [
            IndexedRun(
                RunRow(
                    str(r[0]), str(r[1] or ""), str(r[2] or ""), str(r[3] or ""),
                    str(r[4] or ""), str(r[5] or ""), str(r[6] or ""), int(r[7]), str(r[8]),
                ),
                lifecycle=str(r[9] or "running"),
                asked=bool(r[10]),
                rule=None if r[11] is None else str(r[11]),
                verdict=None if r[12] is None else str(r[12]),
                verdict_length=None if r[13] is None else int(r[13]),
                verdict_code=None if r[14] is None else str(r[14]),
            )
            for r in rows
        ]  # fmt: skip

    def run_count(self) -> int:
        return int(self._db.query("SELECT count(*) FROM ledger_runs")[0][0])

    def open_questions(
        self, limit: int | None = None, offset: int = 0
    ) -> list[tuple[str, str, int, str, str]]:
        """(run id, question id, position, state, data) of the questions not yet decided
        (open, expired or parked), newest first: a page of `limit` from `offset` (None: all)."""
        if limit is not None:
            page = f" LIMIT {int(limit)} OFFSET {int(offset)}"
        elif offset:  # SQLite needs a LIMIT before an OFFSET (-1: none)
            page = f"{' LIMIT -1' if self._db.dialect == 'sqlite' else ''} OFFSET {int(offset)}"
        else:
            page = ""
        rows = self._db.query(
            "SELECT run_id, question_id, position, state, data FROM ledger_questions "
            f"ORDER BY asked_at DESC, run_id DESC, position DESC{page}"
        )
        return [(str(r[0]), str(r[1]), int(r[2]), str(r[3]), str(r[4])) for r in rows]

    def open_question_count(self) -> int:
        return int(self._db.query("SELECT count(*) FROM ledger_questions")[0][0])

    def content(self, kind: str, keys: Iterable[str]) -> list[ContentHit]:
        """Every content row of `kind` under any of `keys` (one indexed lookup per 500)."""
        sql = (
            "SELECT kind, key, run_id, position, item, data FROM ledger_index "
            f"WHERE kind = {self._db.ph} AND key IN ({{marks}})"
        )
        return [
            ContentHit(str(row[0]), str(row[1]), str(row[2]), int(row[3]), str(row[4]),
                       str(row[5]))
            for row in self._db.query_in(sql, keys, before=[kind])
        ]  # fmt: skip

    def index_rows(self) -> list[tuple[Any, ...]]:
        """Every index row, sorted (for comparing the maintained index with a rebuild)."""
        rows: list[tuple[Any, ...]] = []
        for table, columns in (
            ("ledger_index", "kind, key, run_id, position, item, data"),
            ("ledger_questions", "run_id, question_id, asked_at, position, state, data"),
            ("ledger_status", "run_id, lifecycle, asked, rule"),
        ):
            found = [(table, *row) for row in self._db.query(f"SELECT {columns} FROM {table}")]
            rows += sorted(found, key=lambda r: tuple("" if v is None else v for v in r))
        return rows
