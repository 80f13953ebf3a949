"""Each test's history across gates (issue 29): `ledger tests` and `ledger test`, read from the
`test_history` read model (one row per run, interpreter, revision and test), caught up first.

A test is *flaky* when its outcome differed at one commit: failed and passed there, in one
run (a retry, an isolation) or across runs (one gate saw it fail at a commit another saw it
pass at). Pure queries over the views: the same events always give the same answers.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

from domain.errors import BadInput
from ledger import views as views_use_cases
from ledger.service import Ledger

_FLAKY = (
    "f.failed > 0 AND (f.passed > 0 OR EXISTS (SELECT 1 FROM {test_history} p "
    "WHERE p.test = f.test AND p.interpreter = f.interpreter AND p.commit_sha = f.commit_sha "
    "AND p.passed > 0))"
)


def like_pattern(pattern: str) -> str:
    """A LIKE pattern for `PATTERN`: `*` and `?` are wildcards; without any, a substring."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    if "*" in pattern or "?" in pattern:
        return escaped.replace("*", "%").replace("?", "_")
    return f"%{escaped}%"


def open_history(ledger: Ledger, views: str | None = None) -> Any:
    """The read models, caught up with the ledger."""
    path = views_use_cases.views_path(ledger, views)
    views_use_cases.catch_up_file(ledger, path)
    return views_use_cases.open_target(ledger, path)


def list_tests(
    store: Any, pattern: str | None, *, flaky: bool, limit: int | None, offset: int
) -> tuple[list[dict[str, Any]], bool]:
    """A page of tests (by node id, then interpreter) with their history, and whether more
    follow. `flaky`: only tests whose outcome differed at one commit."""
    where, params = [], []
    if pattern:
        where.append("f.test LIKE ? ESCAPE '\\'")
        params.append(like_pattern(pattern))
    if flaky:
        where.append(_FLAKY)
    sql = "SELECT DISTINCT f.test, f.interpreter FROM {test_history} f"
    if where:
        sql += " WHERE " + " AND ".join(where)
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


def history_rows(store: Any, test: str, interpreter: str | None = None) -> list[tuple[Any, ...]]:
    sql = (
        "SELECT run_id, interpreter, revision, commit_sha, at, outcomes, failed, passed, "
        "differed, seconds, file FROM {test_history} WHERE test = ?"
    )
    params: list[Any] = [test]
    if interpreter is not None:
        sql += " AND interpreter = ?"
        params.append(interpreter)
    rows = store.select(sql, params)
    return sorted(rows, key=lambda r: (str(r[1]), str(r[4] or ""), str(r[0]), str(r[2])))


def summary(store: Any, test: str, interpreter: str) -> dict[str, Any]:
    """One test on one interpreter across every run: runs seen, outcomes per revision, the
    commits where its outcome differed (with the runs that saw it), first and last failure,
    and its file's median duration and peak memory."""
    rows = history_rows(store, test, interpreter)
    return _summarise(store, test, interpreter, rows)


def _summarise(
    store: Any, test: str, interpreter: str, rows: Sequence[tuple[Any, ...]]
) -> dict[str, Any]:
    per_revision: dict[str, dict[str, int]] = {}
    per_commit: dict[str, dict[str, set[str]]] = {}
    failures: list[tuple[str, str]] = []
    file = rows[0][10] if rows else test.split("::", 1)[0]
    for run_id, _, revision, commit, at, outcomes, failed, passed, _, _, _ in rows:
        counts = per_revision.setdefault(str(revision), {})
        for _, outcome in json.loads(outcomes):
            counts[outcome] = counts.get(outcome, 0) + 1
        seen = per_commit.setdefault(str(commit), {"failed": set(), "passed": set()})
        if failed:
            seen["failed"].add(str(run_id))
            failures.append((str(at or ""), str(run_id)))
        if passed:
            seen["passed"].add(str(run_id))
    flaky = [
        {"commit": commit, "failed_in": sorted(s["failed"]), "passed_in": sorted(s["passed"])}
        for commit, s in sorted(per_commit.items())
        if s["failed"] and s["passed"]
    ]
    failures.sort()
    files = store.select(
        "SELECT seconds, rss_mb FROM {files} WHERE file = ? AND coalesce(interpreter, '') = ?",
        (file, interpreter),
    )
    seconds = [float(s) for s, _ in files if s is not None]
    memory = [float(m) for _, m in files if m is not None]
    return {
        "test": test,
        "interpreter": interpreter,
        "file": file,
        "runs": len({r[0] for r in rows}),
        "outcomes": {rev: dict(sorted(c.items())) for rev, c in sorted(per_revision.items())},
        "flaky": flaky,
        "first_failure": _failure(failures[0]) if failures else None,
        "last_failure": _failure(failures[-1]) if failures else None,
        "file_median_seconds": statistics.median(seconds) if seconds else None,
        "file_peak_rss_mb": max(memory) if memory else None,
    }


def _failure(entry: tuple[str, str]) -> dict[str, str]:
    return {"at": entry[0], "run_id": entry[1]}


def one_test(store: Any, test: str) -> dict[str, Any]:
    """`ledger test NODEID`: the summary per interpreter and every run's outcomes."""
    rows = history_rows(store, test)
    if not rows:
        raise BadInput(f"no test {test} in the history (`ledger tests` lists them)")
    interpreters = sorted({str(r[1] or "") for r in rows})
    return {
        "test": test,
        "interpreters": [
            _summarise(store, test, i, [r for r in rows if str(r[1] or "") == i])
            for i in interpreters
        ],
        "history": [_history_entry(r) for r in rows],
    }


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
        "seconds": r[9],
    }
