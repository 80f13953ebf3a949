"""Each test's history across gates (issue 29): `ledger tests` and `ledger test`, read from the
`test_history` read model (one row per run, interpreter, revision and test), caught up first.

A test is *flaky* when its outcome differed at one commit: failed and passed there, in one
run (a retry, an isolation) or across runs (one gate saw it fail at a commit another saw it
pass at). Pure queries over the views: the same events always give the same answers.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from pathlib import Path
from typing import Any

from domain.errors import BadInput
from ledger.service import Ledger

# Tests (with an interpreter) whose outcome differed at one commit: each commit a test failed
# at (few, from the failures' own index: grouped in its order, so no statistics are needed
# for the planner to pick it), with a passing row at that commit.
_FLAKY_KEYS = (
    "SELECT DISTINCT f.test, f.interpreter FROM (SELECT failed, test, interpreter, commit_sha "
    "FROM {test_history} WHERE failed > 0 GROUP BY failed, test, interpreter, commit_sha) f "
    "WHERE EXISTS (SELECT 1 FROM {test_history} p "
    "WHERE p.test = f.test AND p.interpreter = f.interpreter AND p.commit_sha = f.commit_sha "
    "AND p.passed > 0)"
)


def like_pattern(pattern: str) -> str:
    """A LIKE pattern for `PATTERN`: `*` and `?` are wildcards; without any, a substring."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    if "*" in pattern or "?" in pattern:
        return escaped.replace("*", "%").replace("?", "_")
    return f"%{escaped}%"


def open_history(ledger: Ledger, views: str | None = None) -> Any:
    """The read models, caught up with the ledger. Views already current (the usual case:
    every gate catches them up) are read as they are, without loading what catching up
    needs; anything else (behind, another ledger's, an older layout) is caught up first."""
    from ledger.views_location import views_path

    path = views_path(ledger, views)
    if isinstance(path, Path) and path.is_file():
        from adapters.views_reader import ViewsReader

        try:
            reader = ViewsReader(path)
        except sqlite3.DatabaseError:
            reader = None
        if reader is not None:
            current = reader.position() == ledger.store.max_notification_id()
            if current and reader.ledger_id() == ledger.store.ledger_id() and _has_history(reader):
                return reader
            reader.close()
    from ledger import views as views_use_cases

    views_use_cases.catch_up_file(ledger, path)
    return views_use_cases.open_target(ledger, path)


def _has_history(reader: Any) -> bool:
    """The file has the columns these queries read (an older layout is caught up, which
    rebuilds it; the layout's fingerprint would need the projections loaded)."""
    try:
        reader.select("SELECT state, run_first, commit_sha, at FROM {test_history} LIMIT 1")
        reader.select("SELECT seconds, rss_mb, interpreter FROM {files} LIMIT 1")
    except sqlite3.DatabaseError:
        return False
    return True


def list_tests(
    store: Any, pattern: str | None, *, flaky: bool, limit: int | None, offset: int
) -> tuple[list[dict[str, Any]], bool]:
    """A page of tests (by node id, then interpreter) with their history, and whether more
    follow. `flaky`: only tests whose outcome differed at one commit."""
    params: list[Any] = []
    if flaky:
        sql = _FLAKY_KEYS
        if pattern:
            sql += " AND f.test LIKE ? ESCAPE '\\'"
            params.append(like_pattern(pattern))
    else:
        sql = "SELECT DISTINCT f.test, f.interpreter FROM {test_history} f"
        if pattern:
            sql += " WHERE f.test LIKE ? ESCAPE '\\'"
            params.append(like_pattern(pattern))
    sql += " ORDER BY f.test, f.interpreter"
    if limit:
        sql += f" LIMIT {int(limit) + 1} OFFSET {int(offset)}"
    elif offset:
        sql += f" LIMIT -1 OFFSET {int(offset)}" if _is_sqlite(store) else f" OFFSET {int(offset)}"
    keys = store.select(sql, params)
    more = limit is not None and limit > 0 and len(keys) > limit
    page = keys[:limit] if limit else keys
    return [summary(store, str(t), str(i)) for t, i in page], more


def _is_sqlite(store: Any) -> bool:
    return not hasattr(store, "schema")


def history_rows(store: Any, test: str) -> list[tuple[Any, ...]]:
    """Every row of one test, by interpreter, then time."""
    rows = store.select(
        "SELECT run_id, interpreter, revision, commit_sha, at, outcomes, seconds "
        "FROM {test_history} WHERE test = ?",
        (test,),
    )
    return sorted(rows, key=lambda r: (str(r[1] or ""), str(r[4] or ""), str(r[0]), str(r[2])))


def summary(store: Any, test: str, interpreter: str) -> dict[str, Any]:
    """One test on one interpreter across every run: runs seen, outcomes per revision (runs
    where it failed, passed, both: `differed`, neither: `other`, e.g. skipped), the commits
    where its outcome differed (flaky evidence), first and last failure, and its file's median
    duration and peak memory. Counted in SQL from the covering index: a page of tests never
    reads their outcome lists."""
    where = "WHERE test = ? AND interpreter = ?"
    key = (test, interpreter)
    per_revision: dict[str, dict[str, int]] = {}
    runs = 0
    for revision, state, count, first in store.select(
        "SELECT revision, state, count(*), sum(run_first) "
        f"FROM {{test_history}} {where} GROUP BY revision, state",
        key,
    ):
        counts = per_revision.setdefault(
            str(revision), {"runs": 0, "failed": 0, "passed": 0, "differed": 0, "other": 0}
        )
        n, state = int(count), int(state)
        counts["runs"] += n
        counts["failed"] += n if state & 2 else 0
        counts["passed"] += n if state & 1 else 0
        counts["differed"] += n if state == 3 else 0
        counts["other"] += n if state == 0 else 0
        runs += int(first or 0)
    failures = sorted(
        (str(at or ""), str(run_id), str(commit))
        for at, run_id, commit in store.select(
            f"SELECT at, run_id, commit_sha FROM {{test_history}} {where} AND failed > 0", key
        )
    )
    flaky = [
        commit
        for commit in sorted({c for _, _, c in failures})
        if store.select(
            f"SELECT 1 FROM {{test_history}} {where} AND commit_sha = ? AND passed > 0 LIMIT 1",
            (*key, commit),
        )
    ]
    file = test.split("::", 1)[0]
    return {
        "test": test,
        "interpreter": interpreter,
        "file": file,
        "runs": runs,
        "outcomes": dict(sorted(per_revision.items())),
        "flaky_commits": flaky,
        "first_failure": _failure(failures[0]) if failures else None,
        "last_failure": _failure(failures[-1]) if failures else None,
        **_file_figures(store, file, interpreter),
    }


def _failure(entry: tuple[str, str, str]) -> dict[str, str]:
    return {"at": entry[0], "run_id": entry[1], "commit": entry[2]}


def _file_figures(store: Any, file: str, interpreter: str) -> dict[str, float | None]:
    """The median seconds and the peak memory of the test's file over every run that
    measured it, from the index (the median by offset: no run's row is fetched but it)."""
    where = "FROM {files} WHERE file = ? AND interpreter = ? AND seconds IS NOT NULL"
    count, peak = store.select(f"SELECT count(*), max(rss_mb) {where}", (file, interpreter))[0]
    if not count:
        return {"file_median_seconds": None, "file_peak_rss_mb": None}
    middle = store.select(
        f"SELECT seconds {where} ORDER BY seconds LIMIT {2 - count % 2} OFFSET {(count - 1) // 2}",
        (file, interpreter),
    )
    return {
        "file_median_seconds": statistics.median(float(s) for (s,) in middle),
        "file_peak_rss_mb": float(peak) if peak is not None else None,
    }


def flaky_evidence(store: Any, test: str, interpreter: str, commit: str) -> dict[str, Any]:
    """At one commit: the runs that saw the test fail and those that saw it pass."""
    rows = store.select(
        "SELECT run_id, failed, passed FROM {test_history} "
        "WHERE test = ? AND interpreter = ? AND commit_sha = ?",
        (test, interpreter, commit),
    )
    return {
        "commit": commit,
        "failed_in": sorted({str(r) for r, f, _ in rows if f}),
        "passed_in": sorted({str(r) for r, _, p in rows if p}),
    }


def one_test(store: Any, test: str) -> dict[str, Any]:
    """`ledger test NODEID`: the summary per interpreter and every run's outcomes."""
    rows = history_rows(store, test)
    if not rows:
        raise BadInput(f"no test {test} in the history (`ledger tests` lists them)")
    summaries = []
    for interpreter in sorted({str(r[1] or "") for r in rows}):
        one = summary(store, test, interpreter)
        one["flaky"] = [flaky_evidence(store, test, interpreter, c) for c in one["flaky_commits"]]
        summaries.append(one)
    return {"test": test, "interpreters": summaries, "history": [_history_entry(r) for r in rows]}


def _history_entry(r: tuple[Any, ...]) -> dict[str, Any]:
    seen = json.loads(r[5])
    return {
        "run_id": r[0],
        "interpreter": r[1],
        "revision": r[2],
        "commit": r[3],
        "at": r[4],
        "outcomes": [o for _, o in seen],
        "positions": [p for p, _ in seen],
        "seconds": r[6],
    }
