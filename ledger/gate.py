"""The gate's process manager: discover, measure, plan, run, retry, bisect, isolate, conclude.

Every observation is appended to the ledger as it happens, and every decision about what to
do next comes from `projections.next_step` over the events appended so far — the same fold
an auditor replays. Interrupting the gate loses nothing: `ledger resume RUN` asks the same
question of the same ledger and does only what is missing.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from release_ledger.adapters import git
from release_ledger.adapters.discovery import (
    collection_starts,
    discover_test_files,
    nominal_inputs,
)
from release_ledger.adapters.executors import Capabilities, Executor, spec_for
from release_ledger.adapters.executors.collection import COLLECT_TIMEOUT_S, collect_files
from release_ledger.adapters.store_errors import LeaseLost
from release_ledger.domain import content
from release_ledger.domain import events as ev
from release_ledger.domain.assessment import assess_observation
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import (
    Observation,
    ShardRun,
)
from release_ledger.domain.memory import (
    DEFAULT_BASELINE_MB,
    FileCost,
    attempt_limit_mb,
    file_terms,
    shard_measurements,
)
from release_ledger.domain.order import collection_order
from release_ledger.domain.planning import nominal_cost, plan_shards
from release_ledger.domain.run_state import (
    BASE,
    HEAD,
    NO_TESTS_COLLECTED,
    RunState,
    attempt_assessment,
    lane,
)
from release_ledger.domain.timing import (
    file_limits,
    known_seconds,
    parse_time_limit,
    shard_timeout,
    time_limit_doubt,
)
from release_ledger.domain.verdict import Verdict
from release_ledger.ledger.attribution import PinnedExecutor, record_attribution
from release_ledger.ledger.confirm import record_in_order, reject_source, skipped_sources
from release_ledger.ledger.exoneration import record_exonerations
from release_ledger.ledger.harness import harness_changes
from release_ledger.ledger.hooks import (
    GateSuspended,
    HookContext,
    Observer,
    QuietObserver,
    StepHook,
)
from release_ledger.ledger.options import GateOptions, options_from, validate
from release_ledger.ledger.placement import place_round
from release_ledger.ledger.read_side import project, verdict_of
from release_ledger.ledger.result_cache import ContentKeys, content_keys, find_reuse
from release_ledger.ledger.service import Ledger
from release_ledger.projections.next_step import RunRequest, Step, StepKind, next_step
from release_ledger.projections.timeline import describe


def _tool_version() -> str:
    """The installed release-ledger version, recorded in every `RunStarted`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("release-ledger")
    except PackageNotFoundError:
        return "unknown"


TOOL_VERSION = _tool_version()


class GateInterrupted(Exception):
    """Ctrl-C or SIGTERM: children killed, `RunInterrupted` recorded."""


# --- starting -------------------------------------------------------------------------------


def warnings_for(options: GateOptions) -> list[str]:
    """What the user should know before the gate starts (nothing here stops it)."""
    try:
        repo = git.repo_root(options.repo)
        changed = git.uncommitted_changes(repo)
        if not changed:
            return []
        head = git.resolve_commit(repo, options.head)
    except BadInput:
        return []  # the gate itself says what is wrong with the repository
    return [
        f"warning: {changed} tracked file(s) in {repo} have uncommitted changes; the gate "
        f"tests the committed --head {options.head} ({head[:12]}), not the working tree"
    ]


def start(ledger: Ledger, options: GateOptions) -> str:
    """Resolve revisions, validate, and append `RunStarted`; returns the new run id."""
    validate(options)
    repo = git.repo_root(options.repo)
    head = git.resolve_commit(repo, options.head)
    base = git.resolve_commit(repo, options.base)
    if head == base:
        raise BadInput(
            f"--base {options.base} and --head {options.head} are the same commit {head[:12]}: "
            "nothing to compare"
        )
    run_id = ledger.new_run_id()
    started = ledger.make(
        ev.RunStarted,
        run_id,
        repo=str(repo),
        head_ref=options.head,
        base_ref=options.base,
        head=head,
        base=base,
        rule=options.rule,
        executor=options.executor,
        command=list(options.command),
        options=options.recorded(),
        tool_version=TOOL_VERSION,
        python_version=".".join(str(v) for v in sys.version_info[:3]),
        runtime_pin=git.runtime_pin(repo, head),
    )
    from release_ledger.ledger.release import release_event

    inspected, artifacts = release_event(ledger, started)
    ledger.append(run_id, [started, inspected], artifacts=artifacts)
    return run_id


# --- the process manager ----------------------------------------------------------------------


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C in the main thread, so one path handles both."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)




class GateProcess:
    """Drives one run to its conclusion from whatever its ledger already holds.

    Everything it needs comes in through the constructor (`ledger/use_cases.py` wires it):
    the executor, the one that measures and isolates files (the same one unless the
    executor's capabilities say files are measured locally), and `hooks` — extra decisions
    (owner questions, ...) run after the built-in steps have nothing to do and before the run
    completes; each returns True when it appended events.
    """

    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        executor: Executor,
        observer: Observer | None = None,
        measuring_executor: Executor | None = None,
        hooks: Sequence[StepHook] = (),
        interpreter: str = "",
        finish: bool = True,
        pinned_executor: PinnedExecutor | None = None,
    ) -> None:
        # One interpreter's lane of a matrix gate: its facts carry the label, it decides from
        # its own state, and only the lane that `finish`es runs the hooks and completes the run.
        self.interpreter = interpreter
        self.finish = finish
        self.ledger = ledger.for_interpreter(interpreter) if interpreter else ledger
        self.run_id = run_id
        self.executor = executor
        self.measuring = measuring_executor or executor
        self.observer = observer or QuietObserver()
        self.hooks = tuple(hooks)
        # An executor like this lane's whose environments install a given package set: head's
        # introduced failures run with base's packages (`attribute`); None: not attributed.
        self.pinned_executor = pinned_executor
        state = lane(project(ledger, run_id), interpreter)
        if state.started is None:
            raise BadInput(f"run {run_id} has no RunStarted event")
        self.started: ev.RunStarted = state.started
        # What this lane's results are keyed by: its interpreter's version (the gate's own
        # when the run has no matrix).
        recorded = {
            str(i.get("label")): str(i.get("version") or "")
            for i in state.started.options.get("interpreters") or ()
            if isinstance(i, dict)
        }
        self.python_version = recorded.get(interpreter) or state.started.python_version
        self.options = options_from(state.started)
        # What the hooks get of this process (`ledger/hooks.py`).
        self.context = HookContext(self.ledger, run_id, self.started, self.options, self.observer)
        self.repo = Path(state.started.repo)
        self.capabilities: Capabilities = spec_for(state.started.executor).capabilities
        self._measure_keys: dict[str, tuple[str, str]] | None = None  # file -> (blob, key)
        self.reserved: dict[str, int] = {}  # shard -> MB a pool could place it with, if less
        # (revision, where, key, status) of environments already recorded in this run.
        self._environments = {
            (e.revision, e.where, e.key, e.status) for e in state.environments.values()
        }
        self._keys: dict[str, ContentKeys | None] = {}
        self._handlers: dict[StepKind, Callable[[RunState, Step], None]] = {
            "discover": self._discover,
            "measure": self._measure,
            "plan": self._plan,
            "run": self._run,
            "split": self._split,
            "isolate": self._isolate,
            "exonerate": self._exonerate,
            "attribute": self._attribute,
            "reject-source": self._reject_source,
            "in-order": self._in_order,
        }
        # Declared sources rejected at each revision (`ledger/confirm.py`), for every run.
        self.skips: dict[str, tuple[tuple[str, str], ...]] = {}

    # -- driving --

    def drive(self) -> Verdict:
        with _interruptible(), self.ledger.driving(self.run_id):
            try:
                return self._loop()
            except LeaseLost:
                # Another process took the run over: stop here, appending nothing more.
                self.executor.cancel_all()
                if self.measuring is not self.executor:
                    self.measuring.cancel_all()
                raise
            except BadInput as error:
                # Found only mid-run (e.g. a reused measurement over the budget): the run
                # says why it stopped, so it is not left looking like it is still running.
                self.ledger.record(self.run_id, ev.RunInterrupted, reason=f"bad input: {error}")
                raise
            except KeyboardInterrupt:
                self.executor.cancel_all()
                if self.measuring is not self.executor:
                    self.measuring.cancel_all()
                self.ledger.record(self.run_id, ev.RunInterrupted, reason="interrupted by signal")
                raise GateInterrupted(self.run_id) from None

    def _loop(self) -> Verdict:
        while True:
            run = project(self.ledger, self.run_id)
            state = lane(run, self.interpreter)
            step = next_step(state, rounds=self.options.rounds, measure=self.options.measure)
            self.skips = {r: skipped_sources(state, r) for r in (HEAD, BASE)}
            if step.kind == "complete":
                if not self.finish:
                    return verdict_of(run)  # this lane is done; the matrix goes on
                try:
                    if any(hook(self.context, run) for hook in self.hooks):
                        continue
                except GateSuspended:
                    return verdict_of(project(self.ledger, self.run_id))
                self.ledger.record(self.run_id, ev.RunCompleted)
                continue
            if step.kind == "done":
                return verdict_of(run)
            self._handlers[step.kind](state, step)

    def _state(self) -> RunState:
        """This lane's state as the ledger holds it now."""
        return lane(project(self.ledger, self.run_id), self.interpreter)

    # -- steps --

    def _discover(self, state: RunState, step: Step) -> None:
        self.observer.notice("discovering test files at head")
        worktrees = git.Worktrees(self.repo)
        try:
            checkout = worktrees.checkout(self.started.head)
            patterns = list(self.options.discover) or None
            files, collected_by = self._collected(self.started.head, patterns)
            if files is None:
                files = discover_test_files(checkout, patterns)
                order = collection_order(files, collection_starts(checkout) if patterns is None
                                         else ["."])  # fmt: skip
            else:  # the order the declared invocation collected them in
                order, files = files, sorted(files)
            sizes, tests = nominal_inputs(checkout, files)
            # Test files base has and head has not: lost coverage unless git pairs them
            # with a file at head by content (a rename moves its tests, it removes none).
            base_files, _ = self._collected(self.started.base, patterns)
            if base_files is None:
                base_files = discover_test_files(worktrees.checkout(self.started.base), patterns)
            gone = set(base_files)
            gone -= set(files)
        finally:
            worktrees.close()
        if not files:
            raise BadInput(f"no test files found at {self.started.head_ref} in {self.repo}")
        at_base = git.files_at_commit(self.repo, self.started.base)
        # an installed module (`{site-packages}/...`) is in no tree: base has it if collected
        missing = [f for f in files if f not in at_base and f not in base_files]
        moved = git.renames(self.repo, self.started.base, self.started.head) if gone else {}
        renamed = {old: new for old, new in moved.items() if old in gone}
        self.ledger.record(
            self.run_id,
            ev.TestFilesDiscovered,
            files=files,
            missing_at_base=missing,
            removed_at_head=sorted(gone - set(renamed)),
            renamed_at_head=renamed,
            harness_changed=harness_changes(self.repo, self.started.base, self.started.head),
            sizes=sizes,
            test_functions=tests,
            order=order,
            collected_by=collected_by,
        )

    def _collected(
        self, commit: str, patterns: Sequence[str] | None
    ) -> tuple[list[str] | None, str]:
        """The test files the revision's declared invocation collects, in its environment
        (`adapters/executors/collection.py`), and how they were found; None: walk the files."""
        if patterns is not None:
            return None, ""
        timeout_s = min(self.options.timeout_s, COLLECT_TIMEOUT_S)
        return collect_files(self.executor, commit, timeout_s, int(self.options.budget_mb))

    def _measure(self, state: RunState, step: Step) -> None:
        files = list(step.files)
        if self.options.measure != "always":
            reused = self._reuse_measurements(files)
            if reused:
                self.ledger.append(self.run_id, reused)
                self.observer.notice(f"reused {len(reused)} measurements from earlier runs")
                done = {e.file for e in reused if isinstance(e, ev.MeasurementReused)}
                files = [f for f in files if f not in done]
        if not files or self.options.measure == "never":
            return
        requests = [
            ShardRun(
                run_id=self.run_id,
                shard_id=f"measure-{index}",
                attempt=1,
                revision="head",
                commit=self.started.head,
                files=(file,),
                command=tuple(self.started.command),
                timeout_s=self.options.timeout_s,
                memory_limit_mb=int(self.options.isolation_budget_mb),  # a file alone
            )
            for index, file in enumerate(files)
        ]
        self.measuring.prepare([self.started.head])
        self.observer.begin("measuring files", len(requests))
        for request, observation in self._run_parallel(self.measuring, requests, "measuring files"):
            if observation.failure_kind == "cancelled":
                continue  # interrupted: measured again on resume
            self._record_measurement(request, observation)
        self.observer.end("measuring files")

    def _record_measurement(self, run: ShardRun, o: Observation) -> None:
        file = run.files[0]
        o, too_large = _bounded(o, self.options.max_report_mb)
        assessment = assess_observation(o, [file], too_large)
        # A file that holds no test is measured all the same (the plan leaves it out: a shard
        # report could never cover it).
        empty = o.exit_code == NO_TESTS_COLLECTED and o.signal is None
        empty = empty and not (o.timed_out or o.oom)
        # A file that only skips itself (module-level `importorskip`) exits 5 too, but its
        # report holds the skip: it is measured and planned like any file, so its tests can
        # be seen lost at head.
        report = assessment.report
        skipped_only = empty and report is not None and report.tests > 0
        empty = empty and not skipped_only
        dies = too_large is not None or (
            not empty
            and not skipped_only
            and (
                o.timed_out
                or o.oom
                or o.signal is not None
                or o.report is None
                or o.exit_code not in (0, 1)
                or o.failure_kind is not None
            )
        )
        environment, artifacts = self._environment_events(run, o)
        if dies:
            tail = {sha256_hex(o.log_tail): o.log_tail} if o.log_tail else {}
            failed = self.ledger.make(
                ev.MeasurementFailed,
                self.run_id,
                file=file,
                reason=assessment.reason or "job-failed",
                exit_code=o.exit_code,
                signal=o.signal,
                rss_mb=o.rss_mb,
                seconds=o.seconds,
                log_tail_hash=next(iter(tail), None),
                infrastructure_failure=o.failure_reason,
                failure_kind=o.failure_kind,
                detail=assessment.detail,
            )
            self.ledger.append(self.run_id, [*environment, failed], artifacts=artifacts | tail)
            return
        blob, key = self._measurement_keys([file]).get(file, (None, None))
        split: dict[str, float | None] = {}
        if report is not None and report.plugin and file in report.figures:
            split = file_terms(report, file, first=True)  # alone: its process's first
        measured = self.ledger.make(
            ev.FileMeasured,
            self.run_id,
            file=file,
            rss_mb=o.rss_mb,
            seconds=o.seconds,
            exit_code=o.exit_code,
            signal=o.signal,
            empty=empty,
            commit=self.started.head,
            blob=blob,
            key=key,
            baseline_mb=split.get("baseline_mb"),
            retained_mb=split.get("retained_mb"),
            transient_mb=split.get("transient_mb"),
            shared_mb=split.get("shared_mb"),
            ceiling_mb=split.get("ceiling_mb"),
        )
        self.ledger.append(self.run_id, [*environment, measured], artifacts=artifacts)

    def _measurement_keys(self, files: Sequence[str]) -> dict[str, tuple[str, str]]:
        """file -> (its blob at head, its measurement key): what reuse matches on."""
        if self._measure_keys is None:
            head = self._content_keys(HEAD)  # the head's blobs, read once for both caches
            blobs = head.blobs if head is not None else {}
            # Figures depend on the machine as well as the environment: the executor is part
            # of the setting (a pod's memory is not a laptop's).
            setting = f"{self.options.environment_setting} on {self.started.executor}"
            environment = content.environment_key(setting, self.python_version, blobs)
            command = content.command_key(self.started.command)
            self._measure_keys = {
                file: (blob, content.measurement_key(blob, environment, command))
                for file, blob in blobs.items()
            }
        return {file: self._measure_keys[file] for file in files if file in self._measure_keys}

    def _reuse_measurements(self, files: Sequence[str]) -> list[ev.Event]:
        """The newest measurement from an earlier run of each file whose content, environment
        and command are the same (its measurement key, looked up in the ledger's content
        index), with the lowest ceiling any of them saw: never by path alone, so a changed
        file, dependency declaration or command is measured again."""
        from release_ledger.ledger.read_side import content
        from release_ledger.projections.content_index import MEASUREMENT

        wanted: dict[str, list[str]] = {}
        for file, (_, key) in self._measurement_keys(files).items():
            wanted.setdefault(key, []).append(file)
        hits = [
            h for h in content(self.ledger, MEASUREMENT, sorted(wanted)) if h.run_id != self.run_id
        ]
        # Each observation's ceiling bounds what the file needs cold wherever it ran: the
        # lowest seen for the same content is the tightest (domain/memory.py).
        ceilings: dict[str, float] = {}
        for hit in hits:
            ceiling = json.loads(hit.data).get("ceiling_mb")
            if ceiling is not None:
                ceilings[hit.key] = min(ceiling, ceilings.get(hit.key, ceiling))
        found: list[ev.Event] = []
        for hit in hits:
            if hit.key not in wanted:
                continue  # newest first: a key already taken has its newest measurement
            measured = json.loads(hit.data)
            for file in wanted.pop(hit.key):
                found.append(
                    self.ledger.make(
                        ev.MeasurementReused,
                        self.run_id,
                        file=file,
                        from_run=hit.run_id,
                        rss_mb=measured["rss_mb"],
                        seconds=measured["seconds"],
                        key=hit.key,
                        baseline_mb=measured.get("baseline_mb"),
                        retained_mb=measured.get("retained_mb"),
                        transient_mb=measured.get("transient_mb"),
                        shared_mb=measured.get("shared_mb"),
                        ceiling_mb=ceilings.get(hit.key),
                    )
                )
        return found

    def _plan(self, state: RunState, step: Step) -> None:
        """Plan from what is known: measurements (this run's solo ones, or reused from earlier
        runs by content), else a nominal cost from discovery; measuring in place, the shard
        runs then measure every file (`FileMeasured` with `source="shard"`)."""
        reused: list[ev.Event] = []
        if self.options.measure in ("inplace", "never"):
            unknown = [f for f in state.files if f not in state.costs]
            reused = self._reuse_measurements(unknown)
            if reused:
                self.observer.notice(f"reused {len(reused)} measurements from earlier runs")
        known = dict(state.costs)
        baselines = [state.baseline_mb] if state.baseline_mb is not None else []
        for event in reused:
            assert isinstance(event, ev.MeasurementReused)
            known[event.file] = FileCost(
                event.rss_mb,
                event.seconds,
                event.retained_mb,
                event.transient_mb,
                event.shared_mb,
                event.ceiling_mb,
            )
            if event.baseline_mb is not None:
                baselines.append(event.baseline_mb)
        costs: dict[str, FileCost] = {}
        for file in state.files:
            if file in state.empty_files or file in state.measure_failures:
                continue  # planned never (empty) or reported unmeasured (failed alone)
            costs[file] = known.get(file) or nominal_cost(
                state.discovered_sizes.get(file, 0), state.discovered_tests.get(file, 0)
            )
        planned = self.ledger.make(
            ev.ShardsPlanned,
            self.run_id,
            budget_mb=self.options.budget_mb,
            count=self.options.shard_count if costs else 0,
            shards=plan_shards(
                costs,
                self.options.budget_mb,
                self.options.shard_count,
                baseline_mb=max(baselines, default=DEFAULT_BASELINE_MB),
                alone_budget_mb=self.options.isolation_budget_mb,
                collection=state.order,
            )
            if costs
            else [],
        )
        self.ledger.append(self.run_id, [*reused, planned])

    def _run(self, state: RunState, step: Step) -> None:
        requests = list(step.runs)
        requests = self._reuse_baselines(state, requests)
        if not requests:
            return
        members = self._place(state, requests, step.round)
        # Base first: a head attempt then has base's figures for its files' time limits.
        ordered = sorted(requests, key=lambda r: r.revision != BASE)
        known = known_seconds(state)
        runs = [self._shard_run(state, r, members.get(r.shard), known) for r in ordered]
        if self.capabilities.places_on_pool:
            # A pool with no room for a shard this round: an unmeasured attempt, so the
            # retry rounds (and bisection) bound the wait instead of looping on placement.
            unplaced_detail = _pool_detail(self._state())
            for run in [r for r in runs if r.member is None]:
                self._record_attempt(
                    run, Observation.failed("unplaced", "unplaced", unplaced_detail)
                )
            runs = [r for r in runs if r.member is not None]
        if not runs:
            return
        self.executor.prepare(sorted({run.commit for run in runs}))
        label = f"round {step.round}: shards" if step.round > 1 else "running shards"
        self.observer.begin(label, len(runs))
        for batch in (BASE, HEAD):
            if batch == HEAD:  # the limits again, from base's figures just recorded
                known = known_seconds(self._state())
                runs = [r.model_copy(update=self._limits(r.files, known)) for r in runs]
            chosen = [r for r in runs if r.revision == batch]
            for run, observation in self._run_parallel(self.executor, chosen, label):
                self._record_attempt(run, observation)
        self.observer.end(label)

    def _shard_run(
        self, state: RunState, request: RunRequest, member: str | None, known: dict[str, float]
    ) -> ShardRun:
        commit = {HEAD: self.started.head, BASE: self.started.base}
        return ShardRun(
            run_id=self.run_id,
            shard_id=request.shard,
            attempt=request.attempt,
            revision=request.revision,  # type: ignore[arg-type]
            commit=commit[request.revision],
            files=request.files,
            command=tuple(self.started.command),
            memory_limit_mb=self.memory_limit(state, request.shard),
            member=member,
            skip_sources=self.skips.get(request.revision, ()),
            **self._limits(request.files, known),
        )

    def _limits(self, files: Sequence[str], known: dict[str, float]) -> dict[str, Any]:
        """A run's time limits: each file's from what it is known to take (`known`), the
        shard's from them (`domain/timing.py`); `--timeout` where nothing is known."""
        limits = file_limits(
            files, known, timeout_s=self.options.timeout_s,
            factor=self.options.time_factor, floor_s=self.options.time_floor_s,
        )  # fmt: skip
        return {"file_limits": limits,
                "timeout_s": shard_timeout(files, limits, self.options.timeout_s)}  # fmt: skip

    def memory_limit(self, state: RunState, shard_id: str) -> int:
        """One figure for every executor's watchdog and a pool's request and limit."""
        wanted = attempt_limit_mb(
            state, shard_id, self.options.budget_mb, self.options.isolation_budget_mb
        )
        return min(wanted, self.reserved.get(shard_id, wanted))

    def _place(
        self, state: RunState, requests: Sequence[RunRequest], round_: int
    ) -> dict[str, str]:
        """Pool executors only: measure the pool, place shards, record both."""
        needs = {r.shard: float(self.memory_limit(state, r.shard)) for r in requests}
        placed = place_round(
            self.ledger, self.run_id, self.executor, state, needs, self.options.budget_mb, round_
        )
        self.reserved.update(placed.reduced_mb)
        return placed.members

    def _environment_events(
        self, run: ShardRun, o: Observation
    ) -> tuple[list[ev.Event], dict[str, bytes]]:
        """`EnvironmentPrepared` for an environment this run has not recorded yet (once per
        revision, machine, key and outcome), with its package list and log as artifacts."""
        report = o.environment
        if report is None:
            return [], {}
        seen = (run.revision, report.where, report.key, report.status)
        if seen in self._environments:
            return [], {}
        self._environments.add(seen)
        artifacts: dict[str, bytes] = {}
        packages_hash = log_hash = None
        if report.packages:
            data = report.packages.encode()
            packages_hash = sha256_hex(data)
            artifacts[packages_hash] = data
        if report.status != "ready" and report.log_tail:
            data = report.log_tail.encode("utf-8", "replace")
            log_hash = sha256_hex(data)
            artifacts[log_hash] = data
        tried = []
        for source in report.tried:
            tail_hash = None
            if source.log_tail:
                data = source.log_tail.encode("utf-8", "replace")
                tail_hash = sha256_hex(data)
                artifacts[tail_hash] = data
            recorded = source.model_dump(exclude={"log_tail"}) | {"log_tail_hash": tail_hash}
            tried.append(ev.EnvironmentSource.model_validate(recorded))
        event = self.ledger.make(
            ev.EnvironmentPrepared,
            self.run_id,
            revision=run.revision,
            commit=run.commit,
            where=report.where,
            status=report.status,
            how=report.how,
            key=report.key,
            python=report.python,
            python_version=report.python_version,
            reused=report.reused,
            seconds=report.seconds,
            packages_hash=packages_hash,
            packages=len([line for line in report.packages.splitlines() if line.strip()]),
            imports=dict(report.imports),
            warnings=list(report.warnings),
            error=report.error,
            log_tail_hash=log_hash,
            project=report.project,
            extra=report.extra,
            group=report.group,
            files_read=list(report.files_read),
            source=report.source,
            deps_key=report.deps_key,
            exclude_newer=report.exclude_newer,
            tried=tried,
            requires_dist=list(report.requires_dist),
            provides_extra=list(report.provides_extra),
            invocation=report.invocation,
            lock=report.lock,
            lock_note=report.lock_note,
        )
        for line in describe(event, {}).splitlines():  # each source tried on a line
            self.observer.notice(line)
        for warning in report.warnings:
            self.observer.notice(f"warning: {run.revision} environment: {warning}")
        return [event], artifacts

    def _record_attempt(self, run: ShardRun, o: Observation) -> None:
        o, too_large = _bounded(o, self.options.max_report_mb)
        artifacts, report_hash, log_hash = _evidence(o)
        member = o.member or run.member or self.executor.name
        events, env_artifacts = self._environment_events(run, o)
        artifacts |= env_artifacts
        # A failure of the machinery on a remote executor is also a fact about its member.
        pod_failure = o.failure_kind not in (
            None, "cancelled", "unplaced", "env-setup", "checkout-modified"
        )  # fmt: skip
        if pod_failure and self.capabilities.infrastructure_failures:
            events.append(
                self.ledger.make(
                    ev.PodFailed,
                    self.run_id,
                    member=member,
                    shard=run.shard_id,
                    attempt=run.attempt,
                    revision=run.revision,
                    reason=o.failure_reason,
                    detail=o.failure_detail,
                    failure_kind=o.failure_kind,
                )
            )
        attempt = self.ledger.make(
            ev.ShardAttemptRecorded,
            self.run_id,
            shard=run.shard_id,
            attempt=run.attempt,
            revision=run.revision,
            files=list(run.files),
            member=member,
            exit_code=o.exit_code,
            signal=o.signal,
            **_ended(o, run),
            oom=o.oom,
            report_hash=report_hash,
            log_tail_hash=log_hash,
            rss_mb=o.rss_mb,
            seconds=o.seconds,
            infrastructure_failure=o.failure_reason,
            infrastructure_detail=o.failure_detail if o.failure_reason else "",
            failure_kind=o.failure_kind,
            modified_files=list(o.modified_files),
            sandbox=o.sandbox,
            report_too_large=too_large,
            **self._attempt_keys(run),
        )
        events.append(attempt)
        if too_large is None:
            events += self._measured_in_place(run, attempt, artifacts, o.rss_mb)
        self.ledger.append(self.run_id, events, artifacts=artifacts)

    def _measured_in_place(
        self,
        run: ShardRun,
        attempt: ev.ShardAttemptRecorded,
        artifacts: dict[str, bytes],
        peak_mb: float,
    ) -> list[ev.Event]:
        """Per-file figures of a head attempt, from the gate's pytest plugin (seconds and the
        memory model's split) or, for other runners, the report's `time` attributes (seconds)
        with the shard's peak shared out: the next plan's measurements, at no extra run. The
        report is read through the fold's memoised assessment (read once for all three)."""
        if run.revision != HEAD or self.options.measure != "inplace":
            return []
        report = attempt_assessment(attempt, artifacts).report
        if report is None:
            return []  # nothing trustworthy to learn from a rejected report
        keys = self._measurement_keys(run.files)
        events: list[ev.Event] = []
        for file, measured in shard_measurements(report, run.files, peak_mb).items():
            blob, key = keys.get(file, (None, None))
            events.append(
                self.ledger.make(
                    ev.FileMeasured,
                    self.run_id,
                    file=file,
                    rss_mb=measured.rss_mb,
                    seconds=measured.seconds,
                    empty=measured.empty,
                    source="shard",
                    shard=run.shard_id,
                    attempt=run.attempt,
                    commit=run.commit,
                    blob=blob,
                    key=key,
                    **measured.terms,
                )
            )
        return events

    def _attempt_keys(self, run: ShardRun) -> dict[str, Any]:
        """The content keys recorded on a shard attempt (its results are then cached)."""
        keys = self._content_keys(run.revision)
        if keys is None:
            return {}
        return {
            "commit": run.commit,
            "blobs": {f: keys.blobs[f] for f in run.files if f in keys.blobs},
            "environment_key": keys.environment,
            "command_key": keys.command,
        }

    def _content_keys(self, revision: str) -> ContentKeys | None:
        """What this run's results at a revision are valid for (commit, file blobs,
        environment, command), for the result cache; None when git cannot say."""
        if revision not in self._keys:
            commit = self.started.head if revision == HEAD else self.started.base
            try:
                blobs = git.blob_hashes(self.repo, commit)
            except (BadInput, OSError, RuntimeError):
                self._keys[revision] = None
            else:
                self._keys[revision] = content_keys(
                    commit,
                    blobs,
                    self.options.environment_setting,
                    self.python_version,
                    self.started.command,
                )
        return self._keys[revision]

    def _reuse_baselines(self, state: RunState, requests: list[RunRequest]) -> list[RunRequest]:
        """First base attempts: each file's results at base from any earlier run with the
        same content keys (its head sweep included); only the files not cached are run."""
        candidates = [r for r in requests if r.revision == BASE and r.attempt == 1]
        keys = self._content_keys(BASE) if candidates else None
        if not candidates or keys is None:
            return requests
        reuse = find_reuse(self.ledger, self.run_id, self.started.base, candidates, keys)
        if not reuse.events:
            return requests
        self.ledger.append(self.run_id, list(reuse.events), artifacts={})
        tests = sum(len(e.result_keys) for e in reuse.events)
        whole = sorted(s for s, files in reuse.remaining.items() if not files)
        self.observer.notice(
            f"base reused from earlier runs {', '.join(r[:12] for r in reuse.sources)}: "
            f"{reuse.files} files ({tests} keys) of {len(candidates)} shards; "
            f"{len(whole)} shards need no base run"
        )
        kept = []
        for r in requests:
            if r.revision != BASE or r.attempt != 1 or r.shard not in reuse.remaining:
                kept.append(r)
            elif reuse.remaining[r.shard]:
                kept.append(replace(r, files=reuse.remaining[r.shard]))
        return kept

    def _split(self, state: RunState, step: Step) -> None:
        events: list[ev.Event] = []
        for split in step.splits:
            events.append(
                self.ledger.make(
                    ev.ShardSplit,
                    self.run_id,
                    parent=split.parent,
                    children=[
                        ev.ChildShard(id=cid, files=list(files)) for cid, files in split.children
                    ],
                    reason=split.reason,
                )
            )
        self.ledger.append(self.run_id, events)
        self.observer.notice(
            "bisecting " + ", ".join(f"{s.parent} ({s.reason})" for s in step.splits)
        )

    def _alone(
        self,
        shard_id: str,
        revision: str,
        commit: str,
        files: tuple[str, ...],
        known: dict[str, float] | None = None,
    ) -> ShardRun:
        """A run outside the plan (an isolation, an attribution): one attempt, with the room a
        file alone gets (`isolation_budget_mb`) and the time its files are known to take."""
        return ShardRun(
            run_id=self.run_id,
            shard_id=shard_id,
            attempt=1,
            revision=revision,  # type: ignore[arg-type]
            commit=commit,
            files=files,
            command=tuple(self.started.command),
            memory_limit_mb=int(self.options.isolation_budget_mb),
            skip_sources=self.skips.get(revision, ()),
            **self._limits(files, known if known is not None else known_seconds(self._state())),
        )

    def _isolate(self, state: RunState, step: Step) -> None:
        commit = {HEAD: self.started.head, BASE: self.started.base}
        known = known_seconds(state)
        runs = [
            self._alone(f"isolate-{index}", revision, commit[revision], (file,), known)
            for index, (file, revision) in enumerate(step.isolations)
        ]
        self.measuring.prepare(sorted({run.commit for run in runs}))
        self.observer.begin("isolating new failures", len(runs))
        isolated = self._run_parallel(
            self.measuring, runs, "isolating new failures", retry_infrastructure=True
        )
        for run, o in isolated:
            o, too_large = _bounded(o, self.options.max_report_mb)
            artifacts, report_hash, log_hash = _evidence(o)
            environment, env_artifacts = self._environment_events(run, o)
            isolation = self.ledger.make(
                ev.IsolationRecorded,
                self.run_id,
                file=run.files[0],
                revision=run.revision,
                exit_code=o.exit_code,
                signal=o.signal,
                **_ended(o, run),
                report_hash=report_hash,
                log_tail_hash=log_hash,
                seconds=o.seconds,
                report_too_large=too_large,
                sandbox=o.sandbox,
                oom=o.oom,
                rss_mb=o.rss_mb,
            )
            self.ledger.append(
                self.run_id, [*environment, isolation], artifacts=artifacts | env_artifacts
            )
        self.observer.end("isolating new failures")

    def _reject_source(self, state: RunState, step: Step) -> None:
        """No test ran at a revision in its declared source: record it, so its shards run
        again in the next source (`ledger/confirm.py`)."""
        assert step.rejection is not None
        u = step.rejection
        commit = self.started.head if u.revision == HEAD else self.started.base
        line = reject_source(self.ledger, self.run_id, commit, u)
        self.observer.notice(
            f"{u.revision}: no test ran in {u.source} ({u.reason}{': ' + line if line else ''});"
            " trying the next declared source"
        )

    def _in_order(self, state: RunState, step: Step) -> None:
        """Run files failing at both revisions in the project's own order, all that precede
        them first, in one process per revision (`domain/order.py`)."""
        commit = {HEAD: self.started.head, BASE: self.started.base}
        room = int(max(self.options.budget_mb, self.options.isolation_budget_mb))
        runs = [
            self._alone(f"in-order-{revision}", revision, commit[revision], files,
                        known_seconds(state)).model_copy(update={"memory_limit_mb": room})
            for revision, files, _ in step.in_order
        ]  # fmt: skip
        self.measuring.prepare(sorted({run.commit for run in runs}))
        label = "running in the project's order"
        self.observer.begin(label, len(runs))
        record_in_order(
            self.ledger, self.run_id,
            self._run_parallel(self.measuring, runs, label, retry_infrastructure=True),
            {revision: confirms for revision, _, confirms in step.in_order},
            bounded=lambda o: _bounded(o, self.options.max_report_mb), evidence=_evidence,
            environments=self._environment_events,
        )  # fmt: skip
        self.observer.end(label)

    def _exonerate(self, state: RunState, step: Step) -> None:
        """Look head's introduced failures up in the history and the quarantine before they
        are called introduced (`ledger/exoneration.py`)."""
        found = record_exonerations(
            self.ledger, self.run_id, tests=step.tests, interpreter=self.interpreter,
            head=self.started.head, base=self.started.base,
            quarantine=self.options.quarantine, started_position=1,
        )  # fmt: skip
        for e in found:
            self.observer.notice(f"{e.test} exonerated ({e.reason})")

    def _attribute(self, state: RunState, step: Step) -> None:
        """Run head's introduced failures at head with base's package set
        (`ledger/attribution.py`); without a way to build that environment, or without both
        package lists in the ledger, record that nothing could be installed."""
        lists = {r: e.packages_hash for (r, _), e in state.environments.items()}
        texts = {r: self.ledger.artifact(h) if h else None for r, h in lists.items()}
        rerun = self._alone("attribute", HEAD, self.started.head, step.files)
        base, head = texts.get(BASE), texts.get(HEAD)
        if self.pinned_executor is None or base is None or head is None:
            why = ("this executor cannot install a given package set" if base and head
                   else "a revision's package list is not in the ledger")  # fmt: skip
            self.ledger.record(self.run_id, ev.AttributionRecorded, tests=list(step.tests),
                               files=list(step.files), moved=[], environment_error=why)  # fmt: skip
            return
        self.observer.notice(
            f"running {len(step.tests)} introduced failures with base's package set"
        )
        record_attribution(
            self.ledger, self.run_id, rerun=rerun, tests=step.tests,
            base_packages=base.decode("utf-8", "replace"),
            head_packages=head.decode("utf-8", "replace"),
            executor_for=self.pinned_executor,
            bounded=lambda o: _bounded(o, self.options.max_report_mb),
        )  # fmt: skip

    # -- parallelism --

    def _run_parallel(
        self,
        executor: Executor,
        runs: Sequence[ShardRun],
        label: str,
        *,
        retry_infrastructure: bool = False,
    ) -> Iterator[tuple[ShardRun, Observation]]:
        """Run up to `--jobs` at once; yield each result in the main thread as it lands.

        With `retry_infrastructure` (isolations, which have no retry rounds of their own), a
        run whose infrastructure failed (a dropped SSH connection, a failed pod) is tried
        again up to `--rounds` times before its result counts.
        """
        pool = ThreadPoolExecutor(max_workers=max(1, self.options.jobs), thread_name_prefix="shard")
        futures: dict[Future[Observation], ShardRun] = {}
        tries = 1 + (self.options.rounds if retry_infrastructure else 0)
        room = MemoryRoom(self.options.machine_mb)

        def run_once_or_again(run: ShardRun) -> Observation:
            with room.held(run.memory_limit_mb):
                observation = executor.run(run)
                for _ in range(tries - 1):
                    if not observation.infrastructure:
                        break
                    observation = executor.run(run)
            return observation

        try:
            for run in runs:
                futures[pool.submit(run_once_or_again, run)] = run
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in sorted(
                    done, key=lambda f: (futures[f].shard_id, futures[f].revision)
                ):
                    run = futures[future]
                    observation = future.result()
                    self.observer.advance(
                        label, f"{run.shard_id} {run.revision}: {_summary(observation)}"
                    )
                    yield run, observation
        except BaseException:
            # Ctrl-C / SIGTERM: kill the children first, or shutting the pool down would
            # wait for every running shard to finish on its own.
            executor.cancel_all()
            raise
        finally:
            for future in futures:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)


class MemoryRoom:
    """The machine's memory shared by the runs going at once: a run starts only when its
    limit fits beside the limits of those running (one bigger than the machine waits for
    the machine to itself), so their sum never exceeds what the machine has. Without a
    figure (a pool: placement reserves there) every run starts at once."""

    def __init__(self, machine_mb: float | None) -> None:
        self.machine_mb = machine_mb
        self.held_mb = 0.0
        self.changed = threading.Condition()

    @contextlib.contextmanager
    def held(self, limit_mb: float | None) -> Iterator[None]:
        if not self.machine_mb or not limit_mb:
            yield
            return
        machine = self.machine_mb
        wanted = min(float(limit_mb), machine)
        with self.changed:
            self.changed.wait_for(lambda: self.held_mb + wanted <= machine + 1e-6)
            self.held_mb += wanted
        try:
            yield
        finally:
            with self.changed:
                self.held_mb -= wanted
                self.changed.notify_all()


def _ended(o: Observation, run: ShardRun) -> dict[str, Any]:
    """How a run ended in time, as its event records it: timed out, and when the gate's
    pytest plugin ended it at a file's limit, the test that was running and the limit. A
    time-limit line the supervisor's figures do not bear out is recorded as not believed."""
    killed = parse_time_limit(o.log_tail.decode("utf-8", "replace"), run.files)
    doubt = None
    if killed is not None:
        doubt = time_limit_doubt(killed, exit_code=o.exit_code, signal=o.signal,
                                 seconds=o.seconds, limits=run.file_limits)  # fmt: skip
        if doubt is not None:
            killed = None
    return {
        "timed_out": o.timed_out or killed is not None,
        "killed_test": killed.test if killed else None,
        "time_limit_s": killed.limit_s if killed else None,
        "time_limit_not_believed": doubt,
    }


REPORT_HEAD_BYTES = 64 * 1024  # what is kept of a report over the limit


def _bounded(o: Observation, max_report_mb: float) -> tuple[Observation, int | None]:
    """The observation as the gate may keep it: a report over `--max-report-mb` is cut to its
    head (evidence of what it was, never parsed); returns its full size when so."""
    if o.report is None or len(o.report) <= max_report_mb * 1024 * 1024:
        return o, None
    return o.model_copy(update={"report": o.report[:REPORT_HEAD_BYTES]}), len(o.report)


def _evidence(o: Observation) -> tuple[dict[str, bytes], str | None, str | None]:
    """The report and log tail as content-addressed artifacts, with their hashes."""
    artifacts: dict[str, bytes] = {}
    report_hash = log_hash = None
    if o.report is not None:
        report_hash = sha256_hex(o.report)
        artifacts[report_hash] = o.report
    if o.log_tail:
        log_hash = sha256_hex(o.log_tail)
        artifacts[log_hash] = o.log_tail
    return artifacts, report_hash, log_hash


def _pool_detail(state: RunState) -> str:
    """Why no member took a shard: every member of the latest pool measurement, named."""
    if not state.pool_rounds:
        return "no pool member was measured"
    parts = []
    failed = state.excluded_members
    for lease in state.pool_rounds[-1].members:
        if not lease.ready:
            parts.append(f"{lease.member}: {lease.reason or 'not ready'}")
        elif lease.member in failed:
            parts.append(f"{lease.member}: excluded after a pod failure")
        else:
            parts.append(f"{lease.member}: no free slot or node with room")
    return "no pool member could take it (" + "; ".join(parts) + ")"


def _summary(o: Observation) -> str:
    if o.failure_reason:
        return o.failure_reason
    if o.timed_out:
        return "timeout"
    if o.oom:
        return "oom"
    if o.signal is not None:
        return f"signal {o.signal}"
    return f"exit {o.exit_code}"
