"""What a run's results and measurements are valid for: the content keys (commit, file blobs,
environment, command) the result cache and measurement reuse match on, read once per run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from release_ledger.domain import content
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import ShardRun
from release_ledger.domain.run_state import HEAD
from release_ledger.ledger.result_cache import ContentKeys, content_keys
from release_ledger.ledger.steps.context import StepContext


def revision_keys(
    ctx: StepContext, revision: str, skip: Sequence[tuple[str, str]] = ()
) -> ContentKeys | None:
    """What this run's results at a revision are valid for (commit, file blobs, environment,
    command), for the result cache, made with the declared sources `skip` passed by (a run's
    `skip_sources`); None when the workspace cannot say."""
    skipped = tuple(sorted({source for source, _ in skip}))
    cached = f"{revision} {' '.join(skipped)}".strip()
    if cached not in ctx.content_keys:
        commit = ctx.commit(revision)
        try:
            blobs = ctx.workspace.blob_hashes(commit)
        except (BadInput, OSError, RuntimeError):
            ctx.content_keys[cached] = None
        else:
            ctx.content_keys[cached] = content_keys(
                commit,
                blobs,
                ctx.options.environment_setting,
                ctx.python_version,
                ctx.started.command,
                skipped,
            )
    return ctx.content_keys[cached]


def attempt_keys(ctx: StepContext, run: ShardRun) -> dict[str, Any]:
    """The content keys recorded on a shard attempt (its results are then cached): those of
    the source its environment came from, as far as the run decides it (`skip_sources`)."""
    keys = revision_keys(ctx, run.revision, run.skip_sources)
    if keys is None:
        return {}
    return {
        "commit": run.commit,
        "blobs": {f: keys.blobs[f] for f in run.files if f in keys.blobs},
        "environment_key": keys.environment,
        "command_key": keys.command,
    }


def measurement_keys(ctx: StepContext, files: Sequence[str]) -> dict[str, tuple[str, str]]:
    """file -> (its blob at head, its measurement key): what reuse matches on."""
    if ctx.measure_keys is None:
        head = revision_keys(ctx, HEAD)  # the head's blobs, read once for both caches
        blobs = head.blobs if head is not None else {}
        # Figures depend on the machine as well as the environment: the executor is part
        # of the setting (a pod's memory is not a laptop's).
        setting = f"{ctx.options.environment_setting} on {ctx.started.executor}"
        environment = content.environment_key(setting, ctx.python_version, blobs)
        command = content.command_key(ctx.started.command)
        ctx.measure_keys = {
            file: (blob, content.measurement_key(blob, environment, command))
            for file, blob in blobs.items()
        }
    return {file: ctx.measure_keys[file] for file in files if file in ctx.measure_keys}
