"""The gate's process manager: discover, measure, plan, run, retry, bisect, isolate, conclude.

Every observation is appended to the ledger as it happens, and every decision about what to
do next comes from `projections.next_step` over the events appended so far — the same fold
an auditor replays. Interrupting the gate loses nothing: `ledger resume RUN` asks the same
question of the same ledger and does only what is missing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from adapters import git
from adapters.discovery import discover_test_files
from adapters.executor import Executor
from domain import events as ev
from domain.assessment import assess_observation
from domain.chain import sha256_hex
from domain.errors import BadInput
from domain.execution import DEFAULT_PYTEST_COMMAND, Observation, ShardRun
from domain.execution import default_command as default_command  # for cli (no domain import)
from domain.planning import FileCost, plan_shards
from domain.rules import get_rule
from domain.run_state import BASE, HEAD, NO_TESTS_COLLECTED, RunState
from domain.verdict import Verdict
from ledger.projection import project, verdict_of
from ledger.service import Ledger
from projections.next_step import RunRequest, Step, next_step


def _tool_version() -> str:
    """The installed release-ledger version, recorded in every `RunStarted`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("release-ledger")
    except PackageNotFoundError:
        return "unknown"


TOOL_VERSION = _tool_version()
NOMINAL_COST = FileCost(rss_mb=0.0, seconds=1.0)  # --measure never, for files never measured


class GateInterrupted(Exception):
    """Ctrl-C or SIGTERM: children killed, `RunInterrupted` recorded."""


class GateSuspended(Exception):
    """Raised by a hook: stop without `RunCompleted` (owner questions open, nobody waits)."""


class Observer(Protocol):
    """What the command line shows while the gate works (progress, notices)."""

    def notice(self, message: str) -> None: ...

    def begin(self, label: str, total: int) -> None: ...

    def advance(self, label: str, detail: str = "") -> None: ...

    def end(self, label: str) -> None: ...


class QuietObserver:
    def notice(self, message: str) -> None:
        pass

    def begin(self, label: str, total: int) -> None:
        pass

    def advance(self, label: str, detail: str = "") -> None:
        pass

    def end(self, label: str) -> None:
        pass


@dataclass(frozen=True)
class GateOptions:
    repo: Path
    base: str
    head: str = "HEAD"
    shards: int | None = None
    budget_gib: float = 8.0
    rounds: int = 2
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    timeout_s: float = 1200.0
    rule: str = "default"
    command: tuple[str, ...] = DEFAULT_PYTEST_COMMAND
    measure: str = "missing"  # always, missing, never
    discover: tuple[str, ...] = ()  # glob patterns for non-pytest runners
    executor: str = "local"
    executor_options: dict[str, Any] = field(default_factory=dict)
    deadline_s: float = 1800.0
    wait: bool = False
    question_budget: int = 3

    @property
    def shard_count(self) -> int:
        return self.shards if self.shards else 2 * max(1, self.jobs)

    @property
    def budget_mb(self) -> float:
        return self.budget_gib * 1024

    def recorded(self) -> dict[str, Any]:
        """The options as recorded in `RunStarted`, enough to resume the run elsewhere."""
        return {
            "shards": self.shard_count,
            "budget_gib": self.budget_gib,
            "rounds": self.rounds,
            "jobs": self.jobs,
            "timeout_s": self.timeout_s,
            "measure": self.measure,
            "discover": list(self.discover),
            "executor_options": self.executor_options,
            "deadline_s": self.deadline_s,
            "wait": self.wait,
            "question_budget": self.question_budget,
        }


def validate(options: GateOptions) -> None:
    """Reject bad options before anything is appended."""
    get_rule(options.rule)
    if options.budget_gib <= 0:
        raise BadInput(f"--budget-gib must be positive, got {options.budget_gib}")
    if options.rounds < 0:
        raise BadInput(f"--rounds must be 0 or more, got {options.rounds}")
    if options.jobs < 1:
        raise BadInput(f"--jobs must be at least 1, got {options.jobs}")
    if options.shards is not None and options.shards < 1:
        raise BadInput(f"--shards must be at least 1, got {options.shards}")
    if options.timeout_s <= 0:
        raise BadInput(f"--timeout must be positive, got {options.timeout_s}")
    if options.question_budget < 0:
        raise BadInput(f"--questions must be 0 or more, got {options.question_budget}")
    if options.measure not in ("always", "missing", "never"):
        raise BadInput(f"--measure must be always, missing or never, got {options.measure!r}")
    if not options.command:
        raise BadInput("--command must not be empty")
    if not any("{files}" in token for token in options.command):
        raise BadInput("--command must contain the {files} placeholder")
    if not any("{junit}" in token for token in options.command):
        raise BadInput("--command must contain the {junit} placeholder")


# --- starting -------------------------------------------------------------------------------


def start(ledger: Ledger, options: GateOptions) -> str:
    """Resolve revisions, validate, and append `RunStarted`; returns the new run id."""
    validate(options)
    repo = git.repo_root(options.repo)
    head = git.resolve_commit(repo, options.head)
    base = git.resolve_commit(repo, options.base)
    run_id = ledger.new_run_id()
    ledger.record(
        run_id,
        ev.RunStarted,
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
    return run_id


def options_from(started: ev.RunStarted) -> GateOptions:
    recorded = started.options
    return GateOptions(
        repo=Path(started.repo),
        base=started.base,
        head=started.head,
        shards=int(recorded.get("shards", 2)),
        budget_gib=float(recorded.get("budget_gib", 8.0)),
        rounds=int(recorded.get("rounds", 2)),
        jobs=int(recorded.get("jobs", os.cpu_count() or 1)),
        timeout_s=float(recorded.get("timeout_s", 1200.0)),
        rule=started.rule,
        command=tuple(started.command),
        measure=str(recorded.get("measure", "missing")),
        discover=tuple(recorded.get("discover", ())),
        executor=started.executor,
        executor_options=dict(recorded.get("executor_options", {})),
        deadline_s=float(recorded.get("deadline_s", 1800.0)),
        wait=bool(recorded.get("wait", False)),
        question_budget=int(recorded.get("question_budget", 3)),
    )


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


StepHook = Callable[["GateProcess", RunState], bool]


class GateProcess:
    """Drives one run to its conclusion from whatever its ledger already holds."""

    # Extra decisions (owner questions, ...) run after the built-in steps have nothing to do
    # and before the run completes; each returns True when it appended events.
    hooks: ClassVar[list[StepHook]] = []

    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        executor: Executor,
        observer: Observer | None = None,
        measuring_executor: Executor | None = None,
    ) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.executor = executor
        self.measuring = measuring_executor or executor
        self.observer = observer or QuietObserver()
        state = project(ledger, run_id)
        if state.started is None:
            raise BadInput(f"run {run_id} has no RunStarted event")
        self.started: ev.RunStarted = state.started
        self.options = options_from(state.started)
        self.repo = Path(state.started.repo)

    # -- driving --

    def drive(self) -> Verdict:
        with _interruptible():
            try:
                return self._loop()
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
            state = project(self.ledger, self.run_id)
            step = next_step(state, rounds=self.options.rounds, measure=self.options.measure)
            if step.kind == "complete":
                try:
                    if any(hook(self, state) for hook in self.hooks):
                        continue
                except GateSuspended:
                    return verdict_of(project(self.ledger, self.run_id))
                self.ledger.record(self.run_id, ev.RunCompleted)
                continue
            if step.kind == "done":
                return verdict_of(project(self.ledger, self.run_id))
            handler = getattr(self, f"_{step.kind}")
            handler(state, step)

    # -- steps --

    def _discover(self, state: RunState, step: Step) -> None:
        self.observer.notice("discovering test files at head")
        checkout = self._local_checkout(self.started.head)
        patterns = list(self.options.discover) or None
        files = discover_test_files(checkout, patterns)
        if not files:
            raise BadInput(f"no test files found at {self.started.head_ref} in {self.repo}")
        at_base = git.files_at_commit(self.repo, self.started.base)
        missing = [f for f in files if f not in at_base]
        self.ledger.record(
            self.run_id, ev.TestFilesDiscovered, files=files, missing_at_base=missing
        )

    def _local_checkout(self, commit: str) -> Path:
        checkout_for = getattr(self.measuring, "checkout_for", None)
        if checkout_for is not None:
            path: Path = checkout_for(commit)
            return path
        return git.Worktrees(self.repo).checkout(commit)

    def _measure(self, state: RunState, step: Step) -> None:
        files = list(step.files)
        if self.options.measure in ("missing", "never"):
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
                memory_limit_mb=int(self.options.budget_mb),
            )
            for index, file in enumerate(files)
        ]
        self.measuring.prepare([self.started.head])
        self.observer.begin("measuring files", len(requests))
        for request, observation in self._run_parallel(self.measuring, requests, "measuring files"):
            if observation.failure_reason == "cancelled":
                continue  # interrupted: measured again on resume
            self._record_measurement(request.files[0], observation)
        self.observer.end("measuring files")

    def _record_measurement(self, file: str, o: Observation) -> None:
        assessment = assess_observation(o, [file])
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
        dies = not empty and not skipped_only and (
            o.timed_out
            or o.oom
            or o.signal is not None
            or o.report is None
            or o.exit_code not in (0, 1)
            or o.failure_reason is not None
        )
        if dies:
            tail = {sha256_hex(o.log_tail): o.log_tail} if o.log_tail else {}
            self.ledger.record(
                self.run_id,
                ev.MeasurementFailed,
                artifacts=tail,
                file=file,
                reason=assessment.reason or "job-failed",
                exit_code=o.exit_code,
                signal=o.signal,
                rss_mb=o.rss_mb,
                seconds=o.seconds,
                log_tail_hash=next(iter(tail), None),
                infrastructure_failure=o.failure_reason,
                detail=assessment.detail,
            )
            return
        self.ledger.record(
            self.run_id,
            ev.FileMeasured,
            file=file,
            rss_mb=o.rss_mb,
            seconds=o.seconds,
            exit_code=o.exit_code,
            signal=o.signal,
            empty=empty,
        )

    def _reuse_measurements(self, files: Sequence[str]) -> list[ev.Event]:
        """The latest measurement of each file from earlier runs of the same repository."""
        wanted = set(files)
        found: list[ev.Event] = []
        for row in self.ledger.runs():
            if not wanted:
                break
            if row.run_id == self.run_id or row.repo != str(self.repo):
                continue
            latest: dict[str, tuple[float, float]] = {}
            for event in self.ledger.events(row.run_id):
                if isinstance(event, ev.FileMeasured) and event.holds_no_test:
                    latest.pop(event.file, None)  # measured again: it may hold tests now
                elif isinstance(event, ev.FileMeasured | ev.MeasurementReused):
                    latest[event.file] = (event.rss_mb, event.seconds)
            for file in sorted(wanted & set(latest)):
                rss, seconds = latest[file]
                found.append(
                    self.ledger.make(
                        ev.MeasurementReused,
                        self.run_id,
                        file=file,
                        from_run=row.run_id,
                        rss_mb=rss,
                        seconds=seconds,
                    )
                )
                wanted.discard(file)
        return found

    def _plan(self, state: RunState, step: Step) -> None:
        costs = {
            file: FileCost(rss_mb=m[0], seconds=m[1])
            for file, m in state.measured.items()
            if file not in state.empty_files
        }
        for file in state.files:
            if file not in costs and file not in state.measure_failures.keys() | state.empty_files:
                costs[file] = NOMINAL_COST
        if not costs:
            self.ledger.record(
                self.run_id,
                ev.ShardsPlanned,
                budget_mb=self.options.budget_mb,
                count=0,
                shards=[],
            )
            return
        shards = plan_shards(costs, self.options.budget_mb, self.options.shard_count)
        self.ledger.record(
            self.run_id,
            ev.ShardsPlanned,
            budget_mb=self.options.budget_mb,
            count=self.options.shard_count,
            shards=shards,
        )

    def _run(self, state: RunState, step: Step) -> None:
        requests = list(step.runs)
        requests = self._reuse_baselines(state, requests)
        if not requests:
            return
        members = self._place(state, requests, step.round)
        commit = {HEAD: self.started.head, BASE: self.started.base}
        runs = [
            ShardRun(
                run_id=self.run_id,
                shard_id=r.shard,
                attempt=r.attempt,
                revision=r.revision,  # type: ignore[arg-type]
                commit=commit[r.revision],
                files=r.files,
                command=tuple(self.started.command),
                timeout_s=self.options.timeout_s,
                memory_limit_mb=self._memory_limit(state, r.shard),
                member=members.get(r.shard),
            )
            for r in requests
        ]
        if hasattr(self.executor, "measure_pool"):
            # A pool with no room for a shard this round: an unmeasured attempt, so the
            # retry rounds (and bisection) bound the wait instead of looping on placement.
            unplaced_detail = _pool_detail(project(self.ledger, self.run_id))
            for run in [r for r in runs if r.member is None]:
                self._record_attempt(
                    run,
                    Observation(failure_reason="unplaced", failure_detail=unplaced_detail),
                )
            runs = [r for r in runs if r.member is not None]
        if not runs:
            return
        self.executor.prepare(sorted({run.commit for run in runs}))
        label = f"round {step.round}: shards" if step.round > 1 else "running shards"
        self.observer.begin(label, len(runs))
        for run, observation in self._run_parallel(self.executor, runs, label):
            self._record_attempt(run, observation)
        self.observer.end(label)

    def _memory_limit(self, state: RunState, shard_id: str) -> int:
        if not hasattr(self.executor, "measure_pool"):
            return int(self.options.budget_mb)  # local and SSH: the shard budget is the limit
        # Pool executors reserve per shard from its planned RSS (see domain.placement).
        planned = {s.id: s.rss_mb for s in state.plan.shards} if state.plan else {}
        root = shard_id.split(".", 1)[0]
        return int(max(planned.get(root, 0.0), 1.0))

    def _place(
        self, state: RunState, requests: Sequence[RunRequest], round_: int
    ) -> dict[str, str]:
        """Pool executors only: measure the pool, place shards, record both."""
        from ledger.placement import place_round

        return place_round(self, state, requests, round_)

    def _record_attempt(self, run: ShardRun, o: Observation) -> None:
        artifacts, report_hash, log_hash = _evidence(o)
        member = o.member or run.member or self.executor.name
        events: list[ev.Event] = []
        pod_failure = o.failure_reason not in (None, "cancelled", "unplaced")
        if pod_failure and self.executor.name != "local":
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
                )
            )
        events.append(
            self.ledger.make(
                ev.ShardAttemptRecorded,
                self.run_id,
                shard=run.shard_id,
                attempt=run.attempt,
                revision=run.revision,
                files=list(run.files),
                member=member,
                exit_code=o.exit_code,
                signal=o.signal,
                timed_out=o.timed_out,
                oom=o.oom,
                report_hash=report_hash,
                log_tail_hash=log_hash,
                rss_mb=o.rss_mb,
                seconds=o.seconds,
                infrastructure_failure=o.failure_reason,
                infrastructure_detail=o.failure_detail if o.failure_reason else "",
            )
        )
        self.ledger.append(self.run_id, events, artifacts=artifacts)

    def _reuse_baselines(self, state: RunState, requests: list[RunRequest]) -> list[RunRequest]:
        """First base attempts of planned shards: reuse an earlier run's measured base."""
        candidates = [r for r in requests if r.revision == BASE and r.attempt == 1]
        if not candidates:
            return requests
        from ledger.baseline import find_baselines

        reused = find_baselines(self.ledger, self.run_id, self.started, candidates)
        if not reused:
            return requests
        self.ledger.append(self.run_id, [e for e, _ in reused.values()], artifacts={})
        self.observer.notice(
            f"base reused from earlier runs for {len(reused)} shards: " + ", ".join(sorted(reused))
        )
        return [r for r in requests if not (r.revision == BASE and r.shard in reused)]

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

    def _isolate(self, state: RunState, step: Step) -> None:
        commit = {HEAD: self.started.head, BASE: self.started.base}
        runs = [
            ShardRun(
                run_id=self.run_id,
                shard_id=f"isolate-{index}",
                attempt=1,
                revision=revision,  # type: ignore[arg-type]
                commit=commit[revision],
                files=(file,),
                command=tuple(self.started.command),
                timeout_s=self.options.timeout_s,
                memory_limit_mb=int(self.options.budget_mb),
            )
            for index, (file, revision) in enumerate(step.isolations)
        ]
        self.measuring.prepare(sorted({run.commit for run in runs}))
        self.observer.begin("isolating new failures", len(runs))
        isolated = self._run_parallel(
            self.measuring, runs, "isolating new failures", retry_infrastructure=True
        )
        for run, o in isolated:
            artifacts, report_hash, log_hash = _evidence(o)
            self.ledger.record(
                self.run_id,
                ev.IsolationRecorded,
                artifacts=artifacts,
                file=run.files[0],
                revision=run.revision,
                exit_code=o.exit_code,
                signal=o.signal,
                timed_out=o.timed_out,
                report_hash=report_hash,
                log_tail_hash=log_hash,
                seconds=o.seconds,
            )
        self.observer.end("isolating new failures")

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

        def run_once_or_again(run: ShardRun) -> Observation:
            observation = executor.run(run)
            for _ in range(tries - 1):
                if observation.failure_reason in (None, "cancelled"):
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
    for lease in state.pool_rounds[-1].members:
        failed = {e.member for _, e in state.pod_failures}
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
