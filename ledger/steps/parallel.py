"""Runs at once: up to `--jobs` in threads, within the machine's memory (`MemoryRoom`), the
longest first where the caller says how long each is, a run that depends on another's result
started once that result is recorded, and each result handed back to the main thread as it
lands so the step records it there."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from release_ledger.adapters.executors import Executor
from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.ledger.steps.context import StepContext


def run_parallel(
    ctx: StepContext,
    executor: Executor,
    runs: Sequence[ShardRun],
    label: str,
    *,
    retry_infrastructure: bool = False,
    first: Callable[[ShardRun], float] | None = None,
    ready: Callable[[ShardRun], ShardRun | None] | None = None,
) -> Iterator[tuple[ShardRun, Observation]]:
    """Run up to `--jobs` at once; yield each result in the main thread as it lands.

    With `retry_infrastructure` (isolations, which have no retry rounds of their own), a
    run whose infrastructure failed (a dropped SSH connection, a failed pod) is tried
    again up to `--rounds` times before its result counts.

    A run starts when a worker is free, the highest `first` first (the longest: the round
    ends with its slowest run, so it must not start last; ties as given). With `ready`, a
    run is asked for, on the main thread, before it starts and again after each result the
    caller has taken: the run to start (its limits as they can be set now), or None while
    what it depends on is not yet recorded; a run that waits never holds a worker.
    """
    jobs = max(1, ctx.options.jobs)
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="shard")
    futures: dict[Future[Observation], ShardRun] = {}
    pending: set[Future[Observation]] = set()
    tries = 1 + (ctx.options.rounds if retry_infrastructure else 0)
    room = MemoryRoom(ctx.options.machine_mb)
    queue = list(runs)
    if first is not None:
        queue.sort(key=lambda r: -first(r))  # stable: ties keep the order given

    def run_once_or_again(run: ShardRun) -> Observation:
        with room.held(run.memory_limit_mb):
            observation = executor.run(run)
            for _ in range(tries - 1):
                if not observation.infrastructure:
                    break
                observation = executor.run(run)
        return observation

    def start_what_may() -> None:
        for queued in list(queue):
            if len(pending) >= jobs:
                return
            run = ready(queued) if ready is not None else queued
            if run is None:
                continue  # waits for a result not yet recorded
            queue.remove(queued)
            future = pool.submit(run_once_or_again, run)
            futures[future] = run
            pending.add(future)

    def stuck() -> None:
        """Runs still waiting with nothing running and no result left to hand back: what
        they wait for will never be recorded (checked once every result landed is taken,
        not between two results that landed together)."""
        if queue and not pending:
            raise RuntimeError(f"{len(queue)} runs wait for results no run will give")

    try:
        start_what_may()
        stuck()
        while pending:
            done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            pending.difference_update(done)
            for future in sorted(done, key=lambda f: (futures[f].shard_id, futures[f].revision)):
                run = futures[future]
                observation = future.result()
                said = f"{run.shard_id} {run.revision}: {summary(observation)}"
                ctx.observer.advance(label, said)
                yield run, observation
                start_what_may()  # the caller has recorded it: what waited on it may start
            stuck()
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


def summary(o: Observation) -> str:
    """One word or two for the progress line: how the run ended."""
    if o.failure_reason:
        return o.failure_reason
    if o.timed_out:
        return "timeout"
    if o.oom:
        return "oom"
    if o.signal is not None:
        return f"signal {o.signal}"
    return f"exit {o.exit_code}"
