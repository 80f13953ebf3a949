"""The Ledger: the only writer. Start runs, append facts, read streams, list, export, verify."""

from __future__ import annotations

import copy
import functools
import json
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from release_ledger.adapters.clock import SystemClock
from release_ledger.adapters.store_errors import ConcurrencyConflict, LeaseLost
from release_ledger.adapters.store_open import MEMORY_DESCRIPTION, open_store
from release_ledger.adapters.store_port import INDEX_FORMAT, Store
from release_ledger.adapters.store_records import IndexWrite, Lease, Recorded, RunRow
from release_ledger.domain.chain import StoredLink, find_break, sha256_hex
from release_ledger.domain.errors import BadInput, BrokenRun, IntegrityProblem

if TYPE_CHECKING:  # the event models (pydantic) load where events are made or read, so
    # commands that only read the ledger's indexes (`ledger runs`, `questions`) never pay for them
    from release_ledger.domain.events import Event, RunStarted

E = TypeVar("E", bound="Event")



@functools.cache
def owner_input() -> frozenset[str]:
    """What processes other than a run's driver may append to it while it is driven: the
    owner's answers (with the deadlines they observe), external checks, approvals (the
    events' `OWNER_INPUT` trait; read when a write needs it, so reads never load the models)."""
    from release_ledger.domain.events import OWNER_INPUT, kinds_with

    return kinds_with(OWNER_INPUT)


@functools.cache
def verdict_events() -> frozenset[str]:
    """Events after which a run's verdict status (shown by `ledger runs`) is computed again."""
    from release_ledger.domain.events import AFFECTS_VERDICT, kinds_with

    return kinds_with(AFFECTS_VERDICT)


def lease_seconds() -> float:
    """How long a driver's lease lasts unrenewed (renewed every third of it while it works):
    a killed driver's run can be resumed this long after it died (`LEDGER_LEASE_SECONDS`)."""
    try:
        seconds = float(os.environ.get("LEDGER_LEASE_SECONDS", "30"))
    except ValueError:
        return 30.0
    return seconds if 0.5 <= seconds <= 3600 else 30.0


def _holder_name() -> str:
    return f"{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:8]})"


def holder_is_dead(holder: str) -> bool:
    """True when a lease holder is a process of this machine that no longer runs (killed,
    or a zombie nobody reaped): its lease need not lapse before a resume takes over."""
    parts = holder.split(" ")
    if len(parts) < 3 or parts[1] != "pid" or parts[0] != socket.gethostname():
        return False
    try:
        pid = int(parts[2])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return False


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class VerifyResult:
    run_id: str
    ok: bool
    events: int
    position: int | None = None
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "ok": self.ok,
            "events": self.events,
            "position": self.position,
            "problem": self.problem,
        }


class Ledger:
    """Application service over the event store; everything else writes through it."""

    def __init__(self, store: Store, clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self._leases: dict[str, Lease] = {}
        self._fence: dict[str, int] = {}  # the stream position the driver last knew
        self.indexed = True  # the ledger's own indexes are complete (see ensure_indexed)
        self._sealing_key: bytes | None
        # One interpreter's lane of a matrix gate: the facts it makes carry its label.
        self.interpreter = ""
        # Post-commit subscribers, called after each append with the events it recorded
        # (`ledger/bootstrap/` subscribes the remembered verdict status).
        self.subscribers: list[Callable[[Ledger, str, Sequence[Event]], None]] = []

    @classmethod
    def open(cls, url: str | None, *, create: bool = True, clock: Clock | None = None) -> Ledger:
        ledger = cls(open_store(url, create=create), clock)
        ledger.ensure_indexed()
        ledger.sealing_key()  # arms the run index's seals before anything is read or written
        return ledger

    # -- the ledger's own indexes (written with the events) --

    def index_for(
        self, events: Sequence[Event], artifacts: dict[str, bytes] | None = None
    ) -> IndexWrite | None:
        """What appending `events` changes in the ledger's indexes (pure derivation)."""
        from release_ledger.projections import content_index

        found = dict(artifacts or {})
        missing = [h for h in content_index.needs_artifacts(events) if h not in found]
        if missing:
            found |= self.store.artifacts(missing)
        content = content_index.content_rows(events, found)
        questions = content_index.question_changes(events)
        life = content_index.lifecycle(events)
        if not content and not questions and life is None:
            return None
        return IndexWrite(
            content=[(r.kind, r.key, r.offset, r.item, r.data) for r in content],
            questions=questions,
            lifecycle=(life.status, life.asked, life.rule) if life else None,
        )

    def reindex(self, run_ids: Sequence[str] | None = None) -> int:
        """Rebuild the indexes of these runs (all: None) from their events; returns how many
        runs. A run appended to meanwhile is re-read (its appends wrote their own rows)."""
        ids = list(run_ids) if run_ids is not None else [r.run_id for r in self.store.runs()]
        for run_id in ids:
            for _ in range(20):
                try:
                    records = self.store.read(run_id)
                except BrokenRun:
                    records = []  # a broken run is in no index: `ledger verify` names it
                events = [r.event for r in records]
                index = self.index_for(events, None) or IndexWrite()
                if self.store.replace_index(run_id, len(records), index):
                    break
        return len(ids)

    def rebuilt_index_rows(self) -> list[tuple[Any, ...]]:
        """The index rows a re-index from the events would write, in `index_rows()` order,
        computed without writing (for `ledger rebuild --check`)."""
        from release_ledger.domain.errors import BrokenRun
        from release_ledger.domain.lifecycles import LISTED, QUESTION_STEPS

        content: list[tuple[Any, ...]] = []
        questions: list[tuple[Any, ...]] = []
        status: list[tuple[Any, ...]] = []
        for row in self.store.runs():
            run_id = row.run_id
            try:
                events = [r.event for r in self.store.read(run_id)]
            except BrokenRun:
                continue
            index = self.index_for(events, None)
            if index is None:
                continue
            content += [
                ("ledger_index", kind, key, run_id, 1 + offset, item, data)
                for kind, key, offset, item, data in index.content
            ]
            # The rows the store's changes leave listed, step by step as the lifecycle says.
            opened = {(q, o): d for c, q, o, d in index.questions if c == "open"}
            listed: dict[str, list[Any]] = {}
            for offset, e in enumerate(events):
                step = QUESTION_STEPS.get(type(e))
                if step is None or (step.new and step.to not in LISTED):
                    continue  # not a question's step, or decided as it is made
                qid = str(getattr(e, "question_id", ""))
                listed_row = listed.get(qid)
                if step.new:
                    data = opened[(qid, offset)]
                    listed[qid] = [run_id, qid, e.at.isoformat(), 1 + offset, step.to, data]
                elif listed_row is not None and step.moves(listed_row[4]):
                    if step.to in LISTED:
                        listed_row[4] = step.to
                    else:
                        del listed[qid]
            questions += [("ledger_questions", *q) for q in listed.values()]
            if index.lifecycle is not None:
                life, asked, rule = index.lifecycle
                status.append(("ledger_status", run_id, life, int(asked), rule))

        def key(row: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple("" if v is None else v for v in row)

        return [*sorted(content, key=key), *sorted(questions, key=key), *sorted(status, key=key)]

    def ensure_indexed(self) -> None:
        """A ledger written before these indexes existed is indexed once, from its events.
        One that cannot be written (read-only) is read without them (`indexed` False: the
        read side then folds runs as before)."""
        if self.store.index_format() == INDEX_FORMAT:
            return
        if self.store.description.endswith("(not created yet)"):
            return
        try:
            self.reindex()
            self.store.set_index_format(INDEX_FORMAT)
        except Exception:
            self.indexed = False

    def close(self) -> None:
        self.store.close()

    def private_folders(self) -> tuple[str, ...]:
        """What the project's code (its suite, its builds) must never see of the ledger: a
        SQLite ledger's folder (the database, its key, its views); a PostgreSQL ledger has
        none on this machine."""
        if self.store.dialect != "sqlite":
            return ()
        return (os.path.dirname(os.path.abspath(self.store.description)),)

    # -- writing --

    def new_run_id(self) -> str:
        return uuid.uuid4().hex

    def make(self, cls: type[E], run_id: str, **fields: Any) -> E:
        """Build an event stamped with the run and the clock's time (and, in an interpreter's
        lane, with its label when the event is a per-interpreter fact)."""
        if self.interpreter:
            from release_ledger.domain.events import OnInterpreter

            if issubclass(cls, OnInterpreter):
                fields.setdefault("interpreter", self.interpreter)
        return cls(run_id=run_id, at=self.clock.now(), **fields)

    def for_interpreter(self, label: str) -> Ledger:
        """This ledger as one interpreter's lane of a matrix gate sees it: the same store,
        leases and fences, its per-interpreter facts labelled."""
        lane = copy.copy(self)
        lane.interpreter = label
        return lane

    def record(
        self, run_id: str, cls: type[E], *, artifacts: dict[str, bytes] | None = None, **fields: Any
    ) -> E:
        event = self.make(cls, run_id, **fields)
        self.append(run_id, [event], artifacts=artifacts)
        return event

    def append(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        artifacts: dict[str, bytes] | None = None,
        expected_length: int | None = None,
    ) -> list[Recorded]:
        for event in events:
            if event.run_id != run_id:
                raise ValueError(f"event for run {event.run_id} appended to run {run_id}")
        self.sealing_key()  # every append through the ledger is sealed where the key is at hand
        index = self.index_for(events, artifacts)
        lease = self._leases.get(run_id)
        if lease is None:
            recorded = self.store.append(
                run_id, events, artifacts=artifacts, expected_length=expected_length, index=index
            )
        elif expected_length is not None:  # the caller decided on that state: its conflict
            recorded = self.store.append(
                run_id,
                events,
                artifacts=artifacts,
                expected_length=expected_length,
                lease=lease,
                index=index,
            )
        else:
            recorded = self._fenced_append(run_id, events, artifacts, lease, index)
        if recorded and lease is not None:
            self._fence[run_id] = recorded[-1].position
        if recorded:
            for subscriber in self.subscribers:
                with suppress(Exception):  # derived views: a reader computes a stale one again
                    subscriber(self, run_id, events)
        return recorded

    def _fenced_append(
        self,
        run_id: str,
        events: Sequence[Event],
        artifacts: dict[str, bytes] | None,
        lease: Lease,
        index: IndexWrite | None = None,
    ) -> list[Recorded]:
        """The driver's append: at the position it last knew, under its lease. Owner input
        appended meanwhile (answers, checks) moves the position on; anything else means
        another process drove the run, and this one stops (`LeaseLost`)."""
        expected = self._fence.get(run_id, 0)
        for _ in range(100):
            try:
                return self.store.append(
                    run_id,
                    events,
                    artifacts=artifacts,
                    expected_length=expected,
                    lease=lease,
                    index=index,
                )
            except ConcurrencyConflict:
                newer = self.store.read_events(run_id)
                foreign = [(p, e) for p, e in newer[expected:] if e.kind not in owner_input()]
                if foreign:
                    position, event = foreign[0]
                    raise LeaseLost(
                        f"run {run_id}: another process appended {event.kind} at position "
                        f"{position}; this driver stops"
                    ) from None
                expected = len(newer)
        raise LeaseLost(f"run {run_id} keeps changing under its driver; it stops")

    # -- driving: one process at a time --

    @contextmanager
    def driving(self, run_id: str) -> Iterator[Lease]:
        """Hold the run's lease while the block drives it (re-entrant): `LeaseHeld` names a
        live holder; a lapsed lease, or one held by a dead process of this machine, is taken
        over. The lease is renewed in the background and released at the end."""
        held = self._leases.get(run_id)
        if held is not None:
            yield held
            return
        seconds = lease_seconds()
        lease = self.store.acquire_lease(
            run_id, _holder_name(), seconds, holder_is_dead=holder_is_dead
        )
        self._leases[run_id] = lease
        self._fence[run_id] = self.store.tip(run_id)[0]
        stop = threading.Event()
        renewer = threading.Thread(
            target=self._renew, args=(lease, stop), name=f"lease-{run_id[:8]}", daemon=True
        )
        renewer.start()
        try:
            yield lease
        finally:
            stop.set()
            renewer.join(timeout=5)
            del self._leases[run_id]
            self._fence.pop(run_id, None)
            with suppress(Exception):  # it lapses on its own
                self.store.release_lease(lease)

    def _renew(self, lease: Lease, stop: threading.Event) -> None:
        while not stop.wait(lease.seconds / 3):
            try:
                if not self.store.renew_lease(lease):
                    return  # taken over: the next append says so (LeaseLost)
            except Exception:  # a busy database: try again next time
                continue

    def put_artifact(self, data: bytes) -> str:
        digest = sha256_hex(data)
        self.store.put_artifacts({digest: data})
        return digest

    # -- reading --

    def resolve(self, prefix: str) -> str:
        """A run id from any unique prefix; BadInput when unknown or ambiguous."""
        cleaned = prefix.strip().lower().replace("-", "")
        if not cleaned or any(c not in "0123456789abcdef" for c in cleaned):
            raise BadInput(f"unknown run {prefix!r}: run ids are hexadecimal")
        matches = self.store.run_ids_matching(cleaned, limit=2)
        if not matches:
            raise BadInput(f"unknown run {prefix!r} in ledger {self.store.description}")
        if len(matches) > 1:
            count = len(self.store.run_ids_matching(cleaned))
            raise BadInput(f"run prefix {prefix!r} is ambiguous: {count} runs match")
        return matches[0]

    def read(self, run_id: str) -> list[Recorded]:
        return self.store.read(run_id)

    def events(self, run_id: str) -> list[Event]:
        return [r.event for r in self.store.read(run_id)]

    def runs(self) -> list[RunRow]:
        return self.store.runs()

    def artifacts_for(self, events: Sequence[Event]) -> dict[str, bytes]:
        """The artifacts `events` reference, each checked against its sha256 as `verify`
        checks it: a replaced or deleted report is a broken run on every read, never an
        answer made from other bytes (a failed run must not read as unmeasured)."""
        found = self.store.artifacts(h for e in events for h in e.artifact_hashes())
        for position, event in enumerate(events, start=1):
            for digest in event.artifact_hashes():
                data = found.get(digest)
                if data is None or sha256_hex(data) != digest:
                    problem = "is missing" if data is None else "no longer matches its hash"
                    raise BrokenRun(event.run_id, position, f"artifact {digest} {problem}")
        return found

    def check_artifacts(self, run_id: str, referenced: Sequence[tuple[int, str]]) -> None:
        """BrokenRun unless every (position, sha256) the run references is stored with bytes
        that match it: the check a fold makes, for answers kept without one."""
        found = self.store.artifacts(digest for _, digest in referenced)
        for position, digest in referenced:
            data = found.get(digest)
            if data is None or sha256_hex(data) != digest:
                problem = "is missing" if data is None else "no longer matches its hash"
                raise BrokenRun(run_id, position, f"artifact {digest} {problem}")

    def sealing_key(self) -> bytes | None:
        """The ledger's HMAC key for what is kept beside the events (`adapters/ledger_key.py`),
        made on first use; None where it can be neither read nor made. With the key, every
        append seals its run's (length, tip) and every read checks the seal; a key made now
        first seals the runs already there (trusted on first use)."""
        if not hasattr(self, "_sealing_key"):
            from release_ledger.adapters.ledger_key import key_id, key_path, load_key, seal
            from release_ledger.adapters.store_records import Sealer

            store = self.store
            if store.description.endswith("(not created yet)"):
                self._sealing_key = None
                return None
            key: bytes | None
            if store.description == MEMORY_DESCRIPTION:  # gone when closed: so is its key
                key, made = os.urandom(32), True
            else:
                ledger_id = store.ledger_id() if store.dialect != "sqlite" else ""
                path = key_path(store.dialect, store.description, ledger_id)
                key, made = load_key(path, create=not store.read_only)
            self._sealing_key = key
            if key is not None:
                store.sealer = Sealer(
                    key_id(key), lambda run, length, tip: seal(key, "run", run, str(length), tip)
                )
                if made:
                    store.seal_unsealed()
        return self._sealing_key

    def artifact(self, digest: str) -> bytes | None:
        """An artifact by its sha256 (None when absent); bytes that no longer match it are
        refused as tampering."""
        data = self.store.artifact(digest)
        if data is not None and sha256_hex(data) != digest:
            raise IntegrityProblem(
                f"artifact {digest} no longer matches its hash: run `ledger verify`"
            )
        return data

    def started(self, run_id: str) -> RunStarted:
        from release_ledger.domain.events import RunStarted

        records = self.store.read(run_id)
        first = records[0].event if records else None
        if not isinstance(first, RunStarted):
            raise BadInput(f"run {run_id} has no RunStarted event")
        return first

    def export_lines(self, run_id: str) -> Iterator[str]:
        """The run's events as JSON lines, in order, with their chain hashes."""
        for record in self.store.read(run_id):
            yield json.dumps(
                {
                    "position": record.position,
                    "kind": record.event.kind,
                    "hash": record.hash,
                    "prev": record.prev,
                    "event": record.event.model_dump(mode="json"),
                },
                sort_keys=True,
            )

    # -- integrity --

    def verify(self, run_id: str | None = None) -> list[VerifyResult]:
        """Recompute every chain and every referenced artifact's hash."""
        indexed = {row.run_id: row for row in self.store.runs()}
        run_ids = [run_id] if run_id else sorted(set(indexed) | set(self.store.stream_ids()))
        results = [self._verify_run(rid, indexed.get(rid)) for rid in run_ids]
        return results

    def _index_covering(
        self, run_id: str, row: RunRow | None, links: Sequence[StoredLink]
    ) -> tuple[int, str | None] | None:
        """(length, tip) of the run index to hold the stored events against (tip None: not
        to be compared), None when the run is not indexed. The row was read before the events,
        so events beyond it were appended meanwhile (the index, written in their transaction,
        counts them when read again) or added behind the chain's back (it does not): only the
        first are taken as the run's, its old row still naming a tip in the chain."""
        if row is not None and row.length >= len(links):
            return row.length, row.tip
        again = next((r for r in self.store.runs() if r.run_id == run_id), None)
        if again is None or again.length < len(links):
            held = row or again  # the index really disagrees with the events
            return (held.length, held.tip) if held is not None else None
        if row is not None and row.length and links[row.length - 1].header.get("hash") != row.tip:
            return row.length, row.tip  # the old tip is not in the chain: reported as it is
        # Moved on again since the events were read: the chain check holds what was read.
        return len(links), again.tip if again.length == len(links) else None

    def _verify_run(self, run_id: str, row: RunRow | None) -> VerifyResult:
        from release_ledger.domain.events import event_from_json

        seal = self.store.seal_of(run_id)  # before the events: see `check_seal`
        raw = self.store.read_raw(run_id)
        links = []
        referenced: list[tuple[int, str]] = []
        relabelled: int | None = None  # the stored kind is outside the hash: compare it
        for record in raw:
            run_in_payload: str | None = None
            try:
                event = event_from_json(record.payload)
                run_in_payload = event.run_id
                referenced.extend((record.position, h) for h in event.artifact_hashes())
                if event.kind != record.kind and relabelled is None:
                    relabelled = record.position
            except ValueError:
                pass  # unparseable payloads still get their hash checked
            links.append(StoredLink(record.position, record.header, record.payload, run_in_payload))
        indexed = self._index_covering(run_id, row, links)
        length, tip = indexed if indexed is not None else (None, None)
        broken = find_break(run_id, links, length, tip)
        if relabelled is not None and (broken is None or relabelled < broken.position):
            problem = "its stored kind does not match its content (edited event)"
            return VerifyResult(run_id, False, len(raw), relabelled, problem)
        if broken is None and indexed is None:
            broken_position, problem = 1, "the run is missing from the run index"
            return VerifyResult(run_id, False, len(raw), broken_position, problem)
        if broken is not None:
            return VerifyResult(run_id, False, len(raw), broken.position, broken.problem)
        try:
            self.store.check_seal(run_id, [str(r.header.get("hash", "")) for r in raw], seal)
        except BrokenRun as unsealed:
            return VerifyResult(run_id, False, len(raw), unsealed.position, unsealed.problem)
        blobs = self.store.artifacts(h for _, h in referenced)
        for position, digest in referenced:
            data = blobs.get(digest)
            if data is None:
                return VerifyResult(
                    run_id, False, len(raw), position, f"artifact {digest} is missing"
                )
            if sha256_hex(data) != digest:
                return VerifyResult(
                    run_id,
                    False,
                    len(raw),
                    position,
                    f"artifact {digest} no longer matches its hash",
                )
        return VerifyResult(run_id, True, len(raw))
