"""Keeping the read models: catch up from the tracking position, rebuild, prove a rebuild equal.

Catching up polls the ledger's notifications after the tracking position (the library's
ProjectionRunner needs subscriptions, which SQLite lacks), re-projects every run those events
belong to from its whole stream, and writes the rows with the new position in one transaction.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from release_ledger.adapters.gc_pause import gc_paused
from release_ledger.domain.assessment import Assessment, assessment_from_json, assessment_to_json
from release_ledger.domain.errors import BadInput, BrokenRun
from release_ledger.domain.run_state import AssessmentMemo
from release_ledger.domain.versions import READER_VERSION
from release_ledger.ledger import read_side
from release_ledger.ledger.service import Ledger
from release_ledger.ledger.views_location import (  # noqa: F401  (re-exported: where the views live)
    PG_SCHEMA,
    SHARED_VIEWS_FILE,
    VIEWS_SUFFIX,
    views_path,
)
from release_ledger.projections.read_models import TABLES, RunRows, run_rows

if TYPE_CHECKING:
    from release_ledger.adapters.pg_read_model_store import PostgresReadModelStore
    from release_ledger.adapters.read_model_store import AssessmentSource, ReadModelStore

    Views = ReadModelStore | PostgresReadModelStore

RUNS_PER_TRANSACTION = 100


def _open(ledger: Ledger, target: Path | str) -> Views:
    """A views file, or a schema of the PostgreSQL ledger's own database."""
    if isinstance(target, Path):
        return open_views(target)
    from release_ledger.adapters.pg_read_model_store import PostgresReadModelStore

    if ledger.store.url is None:
        raise BadInput("the views schema needs a PostgreSQL ledger")
    return PostgresReadModelStore(ledger.store.url, target, TABLES)


def open_target(ledger: Ledger, target: Path | str) -> Views:
    """The views at `target` (`views_path`): a file, or a schema of a PostgreSQL ledger."""
    return _open(ledger, target)


def open_views(path: Path) -> ReadModelStore:
    # Imported here: sqlite-utils costs start-up time that `ledger verdict` should not pay.
    from release_ledger.adapters.read_model_store import ReadModelStore

    return ReadModelStore(path, TABLES)


# (content key, report hash, assessment JSON): an assessment made while projecting, for the
# views file to keep (`adapters.read_model_store.ASSESSMENTS`).
Kept = list[tuple[str, str, str]]


def project_run(ledger: Ledger, run_id: str, kept: Known | None = None) -> tuple[RunRows, int]:
    """A run's view rows from its whole stream, and how many events that was. With `kept`
    (assessments kept earlier, by content), those are not made again, and the ones made
    are added to `kept.made`."""
    records = ledger.store.read_events(run_id)
    events = [event for _, event in records]
    artifacts = ledger.artifacts_for(events)
    if kept is None:
        return run_rows(run_id, records, artifacts), len(records)
    memo = AssessmentMemo(kept.assessments(h for e in events for h in e.artifact_hashes()))
    rows = run_rows(run_id, records, artifacts, memo)
    kept.made += [
        (key, report_hash, assessment_to_json(assessment))
        for key, (report_hash, assessment) in memo.made.items()
        if key not in memo.known
    ]
    return rows, len(records)


class Known:
    """Assessments kept by content in a views file (the one being caught up, or the one a
    rebuild replaces), read back for the reports of each run projected."""

    def __init__(self, read: Callable[[int, Iterable[str]], dict[str, str]]) -> None:
        self.read = read
        self.made: Kept = []  # assessments made that were not kept, to keep

    def assessments(self, report_hashes: Iterable[str]) -> dict[str, Assessment]:
        found: dict[str, Assessment] = {}
        for key, data in self.read(READER_VERSION, report_hashes).items():
            try:
                found[key] = assessment_from_json(data)
            except ValueError:
                continue  # unreadable: made again, and kept anew
        return found


def touched_runs(ledger: Ledger, after: int, until: int) -> list[str]:
    """Run ids with events in (after, until], read without parsing the events."""
    return read_side.touched_runs(ledger, after, until)


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def catch_up(ledger: Ledger, views: Views) -> dict[str, Any]:
    """Bring the views up to the ledger's last notification; only runs with new events are
    re-projected. Idempotent: a second call with nothing new changes nothing."""
    started = time.perf_counter()
    after = views.position()
    until = read_side.last_notification(ledger)
    if after > until or views.ledger_id() != ledger.store.ledger_id():
        return rebuild_into(ledger, views)  # the views of another (or a replaced) ledger
    runs = touched_runs(ledger, after, until) if until > after else []
    events = 0
    chunks = list(_chunks(runs, RUNS_PER_TRANSACTION)) or [[]]
    for index, chunk in enumerate(chunks):
        with views.transaction():
            if views.position() >= until:
                break  # another process caught up meanwhile
            with gc_paused():
                projected, count, made = _project_chunk(ledger, chunk, _kept_in(views))
                events += count
                views.replace_runs(projected)
                _keep(views, made)
            if index == len(chunks) - 1:
                views.set_position(until)
    return {
        "path": str(views.path),
        "position": until,
        "runs": len(runs),
        "events": events,
        "seconds": round(time.perf_counter() - started, 6),
    }


def _kept_in(views: Views) -> Known | None:
    """The assessments a SQLite views file keeps (a PostgreSQL schema keeps none)."""
    read = getattr(views, "known_assessments", None)
    return Known(read) if read is not None else None


def _keep(views: Views, made: Kept) -> None:
    keep = getattr(views, "keep_assessments", None)
    if keep is not None and made:
        keep(READER_VERSION, made)


Chunk = tuple[dict[str, RunRows], int, Kept]


def _project_chunk(ledger: Ledger, run_ids: Sequence[str], kept: Known | None = None) -> Chunk:
    """The view rows of each run in a chunk, how many events they were built from, and the
    assessments made that `kept` did not hold."""
    projected: dict[str, RunRows] = {}
    events = 0
    for run_id in run_ids:
        try:
            projected[run_id], count = project_run(ledger, run_id, kept)
        except BrokenRun:
            projected[run_id], count = {}, 0  # a broken run has no rows: `ledger verify`
        events += count
    return projected, events, kept.made if kept is not None else []


def rebuild_into(
    ledger: Ledger, views: Views, *, prior: Path | None = None, reuse: bool = True
) -> dict[str, Any]:
    """Drop every table and project every run again, in one transaction. Runs are projected
    by worker processes where the ledger is large enough to pay for them (`_projected`); the
    rows are written here, in run order, as each chunk arrives. The assessments that `prior`
    (the views file this rebuild replaces, when it is of this ledger) keeps by content are
    reused unless `reuse` is false: then every report is read again, as `--check` does."""
    started = time.perf_counter()
    until = read_side.last_notification(ledger)  # before reading: later events are caught up
    run_ids = list(read_side.run_ids(ledger))
    events = 0
    reuse = reuse and getattr(views, "keep_assessments", None) is not None  # SQLite views
    with views.transaction():
        views.reset()
        for projected, count, made in _projected(ledger, run_ids, prior, reuse):
            with gc_paused():
                events += count
                views.insert_runs(projected)
                _keep(views, made)
        views.finish_rebuild()
        views.set_position(until)
        views.set_ledger_id(ledger.store.ledger_id())
    return {
        "path": str(views.path),
        "position": until,
        "runs": len(run_ids),
        "events": events,
        "seconds": round(time.perf_counter() - started, 6),
    }


# A rebuild projects runs in worker processes when there are at least this many runs (each
# run's rows are a pure function of its own events, so chunks are independent; a worker costs
# a fork and its own connection to the ledger, which small ledgers do not repay).
PARALLEL_MIN_RUNS = 4 * RUNS_PER_TRANSACTION


def rebuild_workers(run_count: int) -> int:
    """How many processes project runs during a rebuild: `LEDGER_REBUILD_WORKERS` (1: none),
    else one per CPU (at most 8) for a ledger of `PARALLEL_MIN_RUNS` runs or more."""
    configured = os.environ.get("LEDGER_REBUILD_WORKERS", "").strip()
    if configured:
        try:
            return max(1, min(int(configured), 32))
        except ValueError:
            return 1
    if run_count < PARALLEL_MIN_RUNS:
        return 1
    return max(1, min(os.cpu_count() or 1, 8))


def _projected(
    ledger: Ledger, run_ids: list[str], source: Path | str | None = None, reuse: bool = True
) -> Iterator[Chunk]:
    """Each chunk's projected rows, event count and assessments made, in run order, reusing
    the assessments kept in the views file `source`. In worker processes when
    `rebuild_workers` says so and the ledger can be opened again by a fork (a SQLite file, no
    other thread running: a fork copies only the calling thread, and the connection pools of
    a PostgreSQL ledger run threads of their own); in this process otherwise."""
    chunks = list(_chunks(run_ids, RUNS_PER_TRANSACTION))
    workers = min(rebuild_workers(len(run_ids)), len(chunks))
    url = _reopen_url(ledger)
    if workers <= 1 or url is None or threading.active_count() > 1:
        kept = _source(ledger, source)
        try:
            for chunk in chunks:
                with gc_paused():
                    yield _project_chunk(ledger, chunk, _known_of(kept) if reuse else None)
        finally:
            if kept is not None:
                kept.close()
        return
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor

    context = multiprocessing.get_context("fork")
    args = (url, None if source is None else str(source), reuse)
    with ProcessPoolExecutor(workers, context, initializer=_worker_open, initargs=args) as pool:
        pending: list[Future[Chunk]] = []
        ahead = 2 * workers  # chunks in flight: rows wait in memory only this far ahead
        for chunk in chunks:
            pending.append(pool.submit(_worker_project, chunk))
            if len(pending) > ahead:
                yield pending.pop(0).result()
        while pending:
            yield pending.pop(0).result()


def _reopen_url(ledger: Ledger) -> str | None:
    """A URL another process opens this ledger by (a SQLite file only), else None."""
    store = ledger.store
    if store.dialect != "sqlite" or store.description.endswith("(not created yet)"):
        return None
    path = Path(store.description)
    return f"sqlite:///{path.absolute()}" if path.exists() else None


def _source(ledger: Ledger, source: Path | str | None) -> AssessmentSource | None:
    """The kept assessments of a views file of this ledger, opened read-only; None without."""
    if source is None:
        return None
    from release_ledger.adapters.read_model_store import AssessmentSource

    opened = AssessmentSource(Path(source), ledger.store.ledger_id())
    if not opened.usable:
        return None
    return opened


def _known_of(source: AssessmentSource | None) -> Known:
    """Assessments kept in `source` (none without one); those made are returned to keep."""
    return Known(source.known if source is not None else _nothing_kept)


def _nothing_kept(reader_version: int, report_hashes: Iterable[str]) -> dict[str, str]:
    return {}


_WORKER_LEDGER: Ledger | None = None
_WORKER_SOURCE: AssessmentSource | None = None
_WORKER_REUSE = True


def _worker_open(url: str, source: str | None = None, reuse: bool = True) -> None:
    """In a forked worker: its own connection to the ledger (the parent's are never used),
    and to the views file whose kept assessments it reuses (with `reuse`)."""
    global _WORKER_LEDGER, _WORKER_SOURCE, _WORKER_REUSE
    _WORKER_LEDGER = Ledger.open(url, create=False)
    _WORKER_SOURCE = _source(_WORKER_LEDGER, source)
    _WORKER_REUSE = reuse


def _worker_project(run_ids: list[str]) -> Chunk:
    assert _WORKER_LEDGER is not None
    with gc_paused():
        kept = _known_of(_WORKER_SOURCE) if _WORKER_REUSE else None
        return _project_chunk(_WORKER_LEDGER, run_ids, kept)


def _scratch_schema(ledger: Ledger, schema: str, purpose: str) -> PostgresReadModelStore:
    from release_ledger.adapters.pg_read_model_store import PostgresReadModelStore

    assert ledger.store.url is not None
    name = f"{schema}_{purpose}_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
    return PostgresReadModelStore(ledger.store.url, name, TABLES)


def _rebuild_schema(ledger: Ledger, schema: str) -> dict[str, Any]:
    """Fill a fresh schema, then swap it in for the views schema in one transaction."""
    fresh = _scratch_schema(ledger, schema, "rebuild")
    try:
        result = rebuild_into(ledger, fresh)
        result["digest"] = fresh.digest()
        target = _open(ledger, schema)
        try:
            target.replace_with(fresh)  # type: ignore[union-attr]
        finally:
            target.close()
    except BaseException:
        fresh.drop()
        raise
    finally:
        fresh.close()
    result["path"] = f"schema {schema}"
    return result


def _check_schema(ledger: Ledger, schema: str) -> dict[str, Any]:
    maintained = _open(ledger, schema)
    rebuilt = _scratch_schema(ledger, schema, "check")
    try:
        caught_up = catch_up(ledger, maintained)
        result = rebuild_into(ledger, rebuilt, reuse=False)
        result["path"] = f"schema {schema}"
        result["digest"] = rebuilt.digest()
        result["incremental_digest"] = maintained.digest()
        result["caught_up_runs"] = caught_up["runs"]
        difference = None
        if result["digest"] != result["incremental_digest"]:
            difference = rebuilt.first_difference(maintained) or "the digests differ"  # type: ignore[arg-type]
        result["identical"] = difference is None
        result["difference"] = difference
    finally:
        maintained.close()
        rebuilt.drop()
        rebuilt.close()
    return result


def _scratch(prefix: str, folder: Path) -> tuple[int, str]:
    """A new scratch file for a rebuild beside the views; BadInput (one line) where the folder
    cannot be written (a read-only ledger's, a full disk)."""
    try:
        return tempfile.mkstemp(prefix=prefix, suffix=".db", dir=folder)
    except OSError as error:
        raise BadInput(f"cannot write the views beside the ledger in {folder}: "
                       f"{error.strerror or error}") from None  # fmt: skip


def rebuild(ledger: Ledger, path: Path | str) -> dict[str, Any]:
    """`ledger rebuild`: build the views afresh in a new file beside the old one, then put it
    in its place; whatever the old file was (corrupt, foreign, another layout or ledger), the
    result is a rebuild. Its digest proves reproducibility. A PostgreSQL ledger's views schema
    is rebuilt in a fresh schema and swapped in."""
    if isinstance(path, str):
        return _rebuild_schema(ledger, path)
    fd, temporary = _scratch(".views-rebuild-", _parent(path))
    os.close(fd)
    try:
        views = open_views(Path(temporary))
        try:
            views.as_scratch()
            prior = path if path.exists() else None
            result = rebuild_into(ledger, views, prior=prior)
            if prior is not None and _source(ledger, prior) is not None:
                copying = time.perf_counter()
                views.copy_assessments(prior, READER_VERSION)  # the rest the old views kept
                result["seconds"] = round(result["seconds"] + time.perf_counter() - copying, 6)
            result["digest"] = views.digest()
        finally:
            views.close()
        _remove(str(path), suffixes=("-wal", "-shm"))  # a stale WAL must not meet a new file
        os.replace(temporary, path)
    finally:
        _remove(temporary)
    result["path"] = str(path)
    return result


def _parent(path: Path) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BadInput(f"cannot create views file {path}: {error.strerror}") from error
    return path.parent


def _remove(name: str, suffixes: Sequence[str] = ("", "-wal", "-shm")) -> None:
    for suffix in suffixes:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name + suffix)


def catch_up_file(ledger: Ledger, path: Path | str) -> dict[str, Any]:
    """Catch the views file (or schema) up; a file that turns out corrupt or unreadable is
    rebuilt."""
    if isinstance(path, str):
        schema = _open(ledger, path)
        try:
            return catch_up(ledger, schema)
        finally:
            schema.close()
    try:
        views = open_views(path)
        try:
            return catch_up(ledger, views)
        finally:
            views.close()
    except (BadInput, sqlite3.DatabaseError) as error:
        if isinstance(error, BadInput) and path.exists() and not os.access(path, os.W_OK):
            raise
        return rebuild(ledger, path)


def check(ledger: Ledger, path: Path | str) -> dict[str, Any]:
    """`ledger rebuild --check`: catch the maintained views up, rebuild into a temporary file
    beside them, and compare; the maintained views are left as they were otherwise. The
    ledger's own indexes are rebuilt from the events in memory and compared too."""
    checked = _check_schema if isinstance(path, str) else _check_file
    result = checked(ledger, path)  # type: ignore[arg-type]
    index_difference = check_index(ledger)
    result["index_identical"] = index_difference is None
    result["index_difference"] = index_difference
    if index_difference is not None:
        result["identical"] = False
        result["difference"] = result["difference"] or f"ledger index: {index_difference}"
    return result


def check_index(ledger: Ledger) -> str | None:
    """The ledger's indexes (written with each append) against a re-index from the events,
    made in a scratch copy of the rows: the first difference, or None."""
    maintained = list(ledger.store.index_rows())
    rebuilt = ledger.rebuilt_index_rows()
    if maintained == rebuilt:
        return None
    for a, b in zip(maintained, rebuilt, strict=False):
        if a != b:
            return f"maintained {a!r}, rebuilt {b!r}"
    return f"{len(maintained)} rows maintained, {len(rebuilt)} rebuilt"


def _check_file(ledger: Ledger, path: Path) -> dict[str, Any]:
    catch_up_file(ledger, path)  # repairs a views file that cannot be read
    maintained = open_views(path)
    fd, temporary = _scratch(".views-check-", path.parent)
    os.close(fd)
    rebuilt = None
    try:
        caught_up = catch_up(ledger, maintained)
        rebuilt = open_views(Path(temporary))
        rebuilt.as_scratch()
        result = rebuild_into(ledger, rebuilt, reuse=False)  # every report read again
        result["path"] = str(path)
        result["digest"] = rebuilt.digest()
        result["incremental_digest"] = maintained.digest()
        result["caught_up_runs"] = caught_up["runs"]
        difference = None
        if result["digest"] != result["incremental_digest"]:
            difference = rebuilt.first_difference(maintained) or "the digests differ"
        result["identical"] = difference is None
        result["difference"] = difference
    finally:
        maintained.close()
        if rebuilt is not None:
            rebuilt.close()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary + suffix)
    return result


# A gate makes a missing views file itself only for a ledger this small (a few seconds of
# projecting); beyond it, building views from a whole ledger is `ledger rebuild`'s job: a
# gate on a 10,000-run ledger without a views file otherwise paid 85 s for it.
GATE_BUILDS_VIEWS_UP_TO_RUNS = 400


def catch_up_after_gate(ledger: Ledger) -> str | None:
    """After `gate`/`resume`: bring the views up to date. Never fails the gate: returns a
    one-line notice when the views could not be updated (`ledger rebuild` can). Views that do
    not exist yet (a PostgreSQL schema, or a SQLite file beside a large ledger) are left to
    `ledger rebuild`: building them from a whole shared ledger is not a gate's job."""
    try:
        target = views_path(ledger, None)
        if isinstance(target, str) and not _schema_ready(ledger, target):
            return f"no read models in schema {target} yet; `ledger rebuild` creates them"
        if isinstance(target, Path) and not target.exists():
            runs = ledger.store.run_count()
            if runs > GATE_BUILDS_VIEWS_UP_TO_RUNS:
                return (
                    f"no read models in {target} yet ({runs} runs); `ledger rebuild` creates them"
                )
        catch_up_file(ledger, target)
    except Exception as error:  # the verdict stands; the views can be rebuilt
        return f"read models not updated ({' '.join(str(error).split())}); run `ledger rebuild`"
    return None


def _schema_ready(ledger: Ledger, schema: str) -> bool:
    """The views schema exists in this layout and belongs to this ledger."""
    import psycopg

    from release_ledger.adapters.pg_read_model_store import META

    assert ledger.store.url is not None
    with psycopg.connect(ledger.store.url, connect_timeout=5) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (f'"{schema}"."{META}"',)).fetchone()
        if not found or found[0] is None:
            return False
        rows: dict[str, str] = dict(
            conn.execute(f'SELECT key, value FROM "{schema}"."{META}"').fetchall()
        )
    from release_ledger.adapters.read_model_store import _schema_version

    return (
        rows.get("schema_version") == str(_schema_version(TABLES))
        and rows.get("ledger_id") == ledger.store.ledger_id()
    )


def follow(
    ledger: Ledger,
    target: Path | str,
    *,
    stop: threading.Event | None = None,
    report: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Keep a PostgreSQL ledger's views current as events are committed, until `stop` is set:
    the eventsourcing library's subscription (LISTEN/NOTIFY on the events table) wakes a
    catch-up, which reads every notification since the tracking position (bursts coalesce)."""
    if ledger.store.dialect == "sqlite":
        raise BadInput(
            "--follow needs a PostgreSQL ledger (SQLite has no subscriptions); a SQLite "
            "ledger's views are caught up after every gate"
        )
    views = _open(ledger, target)
    stop = stop or threading.Event()
    try:
        result = catch_up(ledger, views)
        if report is not None:
            report(result)
        with ledger.store.subscribe(gt=views.position()) as subscription:
            watcher = threading.Thread(
                target=lambda: (stop.wait(), subscription.stop()), daemon=True
            )
            watcher.start()
            for notification in subscription:
                if stop.is_set():
                    break
                if int(notification.id) <= views.position():
                    continue  # already reflected by an earlier catch-up
                result = catch_up(ledger, views)
                if report is not None:
                    report(result)
    finally:
        views.close()
