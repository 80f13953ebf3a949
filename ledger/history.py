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

from release_ledger.domain.errors import BadInput
from release_ledger.ledger.service import Ledger

# Tests (with an interpreter) whose outcome differed at one commit: the (test, commit) pairs
# that ever failed, from their own index (few), with a passing row at that commit.
_FLAKY_KEYS = (
    "SELECT DISTINCT f.test, f.interpreter FROM {test_commits} f "
    "WHERE f.failed_rows > 0 AND f.passed_rows > 0"
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
    from release_ledger.ledger.views_location import views_path

    path = views_path(ledger, views)
    if isinstance(path, Path) and path.is_file():
        from release_ledger.adapters.views_reader import ViewsReader

        try:
            reader = ViewsReader(path)
        except sqlite3.DatabaseError:
            reader = None
        if reader is not None:
            current = reader.position() == ledger.store.max_notification_id()
            if current and reader.ledger_id() == ledger.store.ledger_id() and _has_history(reader):
                return reader
            reader.close()
    from release_ledger.ledger import views as views_use_cases

    views_use_cases.catch_up_file(ledger, path)
    return views_use_cases.open_target(ledger, path)


def _has_history(reader: Any) -> bool:
    """The file has the columns these queries read (an older layout is caught up, which
    rebuilds it; the layout's fingerprint would need the projections loaded)."""
    try:
        reader.select("SELECT state, run_first, commit_sha, at FROM {test_history} LIMIT 1")
        reader.select("SELECT seconds, rss_mb, interpreter FROM {files} LIMIT 1")
        reader.select("SELECT rows, runs FROM {test_totals} LIMIT 1")
        reader.select("SELECT failed_rows, passed_rows FROM {test_commits} LIMIT 1")
        reader.select("SELECT measured FROM {file_totals} LIMIT 1")
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
        sql = "SELECT DISTINCT f.test, f.interpreter FROM {test_totals} f"
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
    files: dict[tuple[str, str], dict[str, float | None]] = {}  # a page's tests share files
    return [summary(store, str(t), str(i), files) for t, i in page], more


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


def summary(
    store: Any,
    test: str,
    interpreter: str,
    files: dict[tuple[str, str], dict[str, float | None]] | None = None,
) -> dict[str, Any]:
    """One test on one interpreter across every run: runs seen, outcomes per revision (runs
    where it failed, passed, both: `differed`, neither: `other`, e.g. skipped), the commits
    where its outcome differed (flaky evidence), first and last failure, and its file's median
    duration and peak memory. Read from the running totals (`test_totals`, `test_commits`,
    `file_totals`) and a few index probes: no query grows with the runs the test was in."""
    where = "WHERE test = ? AND interpreter = ?"
    key = (test, interpreter)
    per_revision: dict[str, dict[str, int]] = {}
    runs = 0
    failing_states: set[int] = set()
    for revision, state, count, first in store.select(
        f"SELECT revision, state, rows, runs FROM {{test_totals}} {where}", key
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
        if state & 2:
            failing_states.add(state)
    failures = sorted(
        (str(at or ""), str(run_id), str(commit))
        for state in sorted(failing_states)
        for order in ("", " DESC")
        for at, run_id, commit in store.select(
            f"SELECT at, run_id, commit_sha FROM {{test_history}} {where} AND state = ? "
            f"ORDER BY at{order}, run_id{order}, commit_sha{order} LIMIT 1",
            (*key, state),
        )
    )
    flaky = sorted(
        str(commit)
        for (commit,) in store.select(
            f"SELECT commit_sha FROM {{test_commits}} {where} "
            "AND failed_rows > 0 AND passed_rows > 0",
            key,
        )
    )
    file = test.split("::", 1)[0]
    files = {} if files is None else files
    if (file, interpreter) not in files:
        files[file, interpreter] = _file_figures(store, file, interpreter)
    return {
        "test": test,
        "interpreter": interpreter,
        "file": file,
        "runs": runs,
        "outcomes": dict(sorted(per_revision.items())),
        "flaky_commits": flaky,
        "first_failure": _failure(failures[0]) if failures else None,
        "last_failure": _failure(failures[-1]) if failures else None,
        **files[file, interpreter],
    }


def _failure(entry: tuple[str, str, str]) -> dict[str, str]:
    return {"at": entry[0], "run_id": entry[1], "commit": entry[2]}


def _file_figures(store: Any, file: str, interpreter: str) -> dict[str, float | None]:
    """The median seconds and the peak memory of the test's file over every run that
    measured it: how many did from `file_totals`, the median by offset and the peak by one
    probe of the index (no run's row is fetched but those)."""
    key = (file, interpreter)
    counted = store.select(
        "SELECT measured FROM {file_totals} WHERE file = ? AND interpreter = ?", key
    )
    count = int(counted[0][0]) if counted else 0
    if not count:
        return {"file_median_seconds": None, "file_peak_rss_mb": None}
    where = "FROM {files} WHERE file = ? AND interpreter = ? AND seconds IS NOT NULL"
    middle = store.select(
        f"SELECT seconds {where} ORDER BY seconds LIMIT {2 - count % 2} OFFSET {(count - 1) // 2}",
        key,
    )
    peak = store.select(
        f"SELECT rss_mb {where} AND rss_mb IS NOT NULL ORDER BY rss_mb DESC LIMIT 1", key
    )
    return {
        "file_median_seconds": statistics.median(float(s) for (s,) in middle),
        "file_peak_rss_mb": float(peak[0][0]) if peak else None,
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
