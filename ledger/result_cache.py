"""The result cache: a base file's results reused from any earlier run, by content.

A file's test results at a commit are valid for another gate when the commit, the file's
bytes (its git blob), the environment, the command and the reader are the same: that is the
result key (`domain.content.result_key`). Every measured shard attempt that recorded its
content keys is indexed per file in the same transaction as the attempt
(`projections.content_index`), head sweeps included, so a release candidate's head results
become the next release's baseline. Reuse is per file: a base shard whose files are all
cached is not run at all; one whose files are partly cached runs only the rest.

Each reuse is a `BaselineReused` naming the run, shard, attempt and position it came from,
the earlier attempt's report (by hash) and the files that attempt ran, so replaying this run
needs no other run's events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from release_ledger.domain import events as ev
from release_ledger.domain.content import (
    command_key,
    environment_key,
    result_key,
    sourced_environment,
)
from release_ledger.ledger import read_side
from release_ledger.ledger.read_side import CachedResult
from release_ledger.ledger.service import Ledger
from release_ledger.projections.content_index import READER
from release_ledger.projections.next_step import RunRequest


@dataclass(frozen=True)
class ContentKeys:
    """What a revision's results are valid for: commit, blobs, environment and command."""

    commit: str
    blobs: dict[str, str]
    environment: str
    command: str

    def result_key(self, file: str) -> str | None:
        blob = self.blobs.get(file)
        if blob is None:
            return None
        return result_key(self.commit, blob, self.environment, self.command, READER)


def content_keys(
    commit: str, blobs: dict[str, str], setting: str, python_version: str, command: Sequence[str],
    skipped: Sequence[str] = (),
) -> ContentKeys:  # fmt: skip
    """The keys of a commit: the interpreter's version and the commit's `.python-version`
    (which picks the interpreter of a per-revision environment) go into the environment key,
    and so do the declared sources passed by (`skipped`: rejected earlier in the run), which
    pick the source that makes the environment (`sourced_environment`)."""
    python = f"{python_version} pin:{blobs.get('.python-version', '')}"
    environment = sourced_environment(environment_key(setting, python, blobs), skipped)
    return ContentKeys(commit, blobs, environment, command_key(list(command)))


@dataclass(frozen=True)
class Reuse:
    events: list[ev.BaselineReused]
    remaining: dict[str, tuple[str, ...]]  # shard -> base files still to run
    sources: tuple[str, ...]  # runs reused from

    @property
    def files(self) -> int:
        return sum(len(e.files) for e in self.events)


def find_reuse(
    ledger: Ledger,
    run_id: str,
    base: str,
    requests: Sequence[RunRequest],
    keys: ContentKeys,
) -> Reuse:
    """Per-file reuse for first base attempts: one `BaselineReused` per (shard, earlier
    attempt), and the files of each shard left to run."""
    wanted = {file: key for r in requests for file in r.files if (key := keys.result_key(file))}
    hits = read_side.cached_results(ledger, wanted, exclude_run=run_id) if wanted else {}
    events: list[ev.BaselineReused] = []
    remaining: dict[str, tuple[str, ...]] = {}
    for request in requests:
        remaining[request.shard] = tuple(f for f in request.files if f not in hits)
        groups: dict[tuple[str, int], list[CachedResult]] = {}
        for file in request.files:
            hit = hits.get(file)
            if hit is not None:
                groups.setdefault((hit.run_id, hit.position), []).append(hit)
        for (from_run, position), group in sorted(groups.items()):
            first = group[0]
            share = len(group) / max(1, len(first.files))
            events.append(
                ledger.make(
                    ev.BaselineReused,
                    run_id,
                    base=base,
                    from_run=from_run,
                    shard=request.shard,
                    files=[h.file for h in group],
                    exit_code=first.exit_code,
                    signal=first.signal,
                    report_hash=first.report_hash,
                    log_tail_hash=first.log_tail_hash,
                    rss_mb=first.rss_mb,
                    seconds=round(first.seconds * share, 6),
                    source_files=list(first.files),
                    from_position=position,
                    from_shard=first.shard,
                    from_attempt=first.attempt,
                    from_revision=first.revision,
                    result_keys={h.file: h.key for h in group},
                )
            )
    sources = tuple(sorted({e.from_run for e in events}))
    return Reuse(events, remaining, sources)
