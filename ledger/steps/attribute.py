"""The `attribute` step (issue 25): head's introduced failures run again at head with base's
package set, recorded as `AttributionRecorded`; `domain/attribution.py` reads it. Without a
way to build that environment, or without both package lists in the ledger, it records that
nothing could be installed.
"""

from __future__ import annotations

from collections.abc import Sequence

from release_ledger.domain import events as ev
from release_ledger.domain.chain import sha256_hex
from release_ledger.domain.execution import ShardRun
from release_ledger.domain.observed import attribution_fields, kept
from release_ledger.domain.run_state import BASE, HEAD, RunState
from release_ledger.ledger.service import Ledger
from release_ledger.ledger.steps.context import PinnedExecutor, StepContext
from release_ledger.projections.checks import packages_of
from release_ledger.projections.next_step import Step


def attribute(ctx: StepContext, state: RunState, step: Step) -> None:
    lists = {r: e.packages_hash for (r, _), e in state.environments.items()}
    texts = {r: ctx.ledger.artifact(h) if h else None for r, h in lists.items()}
    rerun = ctx.alone("attribute", HEAD, step.files)
    base, head = texts.get(BASE), texts.get(HEAD)
    if ctx.pinned_executor is None or base is None or head is None:
        why = ("this executor cannot install a given package set" if base and head
               else "a revision's package list is not in the ledger")  # fmt: skip
        ctx.ledger.record(ctx.run_id, ev.AttributionRecorded, tests=list(step.tests),
                          files=list(step.files), moved=[], environment_error=why)  # fmt: skip
        return
    ctx.observer.notice(f"running {len(step.tests)} introduced failures with base's package set")
    record_attribution(
        ctx.ledger, ctx.run_id, rerun=rerun, tests=step.tests,
        base_packages=base.decode("utf-8", "replace"),
        head_packages=head.decode("utf-8", "replace"),
        executor_for=ctx.pinned_executor,
        max_report_mb=ctx.options.max_report_mb,
    )  # fmt: skip


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
    max_report_mb: float,
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
        k = kept(observation, max_report_mb)
        fields = attribution_fields(k)
        referenced = (k.report_hash, k.log_hash) if "exit_code" in fields else ()
        artifacts |= {h: k.artifacts[h] for h in referenced if h}  # what the event names
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
