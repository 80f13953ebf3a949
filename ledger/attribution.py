"""The gate's attribution step (issue 25): head's introduced failures run again at head with
base's package set, recorded as `AttributionRecorded`; `domain/attribution.py` reads it.

Its inputs are explicit (the ledger, the run, the executor to use) rather than the whole gate
process, so this module imports nothing of the gate's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from release_ledger.adapters.executors import Executor
from release_ledger.domain import events as ev
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.execution import Observation, ShardRun
from release_ledger.ledger.service import Ledger
from release_ledger.projections.checks import packages_of

# Builds an executor whose environments install the given frozen package set (`pinned`).
PinnedExecutor = Callable[[str], Executor]


def package_moves(base: str, head: str) -> list[ev.PackageMove]:
    """Packages whose versions differ between two frozen lists (added and removed included)."""
    at_base, at_head = packages_of(base), packages_of(head)
    return [
        ev.PackageMove(name=name, base=at_base.get(name, ""), head=at_head.get(name, ""))
        for name in sorted(set(at_base) | set(at_head))
        if at_base.get(name) != at_head.get(name)
    ]


def record_attribution(
    ledger: Ledger,
    run_id: str,
    *,
    rerun: ShardRun,
    tests: Sequence[str],
    base_packages: str,
    head_packages: str,
    executor_for: PinnedExecutor,
    bounded: Callable[[Observation], tuple[Observation, int | None]],
) -> ev.AttributionRecorded:
    """Run `rerun` (head's commit, the files of `tests`) in an environment with base's
    package set, and append what happened."""
    moved = package_moves(base_packages, head_packages)
    pins = base_packages.encode()
    pins_hash = sha256_hex(pins)
    artifacts: dict[str, bytes] = {pins_hash: pins}
    try:
        executor = executor_for(base_packages)
        try:
            executor.prepare([rerun.commit])
            observation = executor.run(rerun)
        finally:
            executor.close()
    except Exception as error:  # the evidence is optional: a fault here never stops the run
        fields: dict[str, object] = {"environment_error": f"{type(error).__name__}: {error}"}
    else:
        fields = _observed(*bounded(observation), artifacts)
    event = ledger.make(
        ev.AttributionRecorded,
        run_id,
        tests=list(tests),
        files=list(rerun.files),
        moved=moved,
        pins_hash=pins_hash,
        **fields,
    )
    ledger.append(run_id, [event], artifacts=artifacts)
    return event


def _observed(
    o: Observation, too_large: int | None, artifacts: dict[str, bytes]
) -> dict[str, object]:
    """The event's facts of one observation (its report already bounded: `too_large` is the
    full size of one cut to its head); its report and log tail added to `artifacts`."""
    environment = o.environment
    if environment is not None and environment.status != "ready":
        error = environment.error or "the environment could not be prepared"
        return {"environment_key": environment.key, "environment_error": error}
    report = o.report
    fields: dict[str, object] = {
        "environment_key": environment.key if environment is not None else "",
        "exit_code": o.exit_code,
        "signal": o.signal,
        "timed_out": o.timed_out,
        "seconds": o.seconds,
        "report_too_large": too_large,
        "failure_kind": o.failure_kind,
        "failure_reason": o.failure_reason,
        "sandbox": o.sandbox,
    }
    if report is not None:
        report_hash = fields["report_hash"] = sha256_hex(report)
        artifacts[report_hash] = report
    if o.log_tail:
        log_hash = fields["log_tail_hash"] = sha256_hex(o.log_tail)
        artifacts[log_hash] = o.log_tail
    return fields
