"""A declared source that installs but cannot run its tests is a failed source.

When every shard of a revision stops before running a test — pytest's usage error (exit 4: a
conftest that does not import, an option no installed plugin knows), or reports that hold
nothing but collection errors of modules the environment lacks — the environment, not the
code, is what failed: the source is rejected (`SourceRejected`, with the log's end), its
attempts stop counting and the revision runs again with the next declared source; only when
none is left is the revision unmeasured. A usage error is never retried nor bisected: it says
how the run was invoked, not which file dies.

A revision whose own code breaks every test module's import (`No module named 'pkg.gone'`,
the project's own package) is measured as it is: those are its failures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from release_ledger.domain.junit import Report

if TYPE_CHECKING:
    from release_ledger.domain.run_state import AttemptView, RunState

USAGE_ERROR_EXIT = 4  # pytest's ExitCode.USAGE_ERROR (a conftest's ImportError included)
USAGE_ERROR = "usage-error"
COLLECTION_ERRORS = "collection-errors"
_COLLECTION = "collection failure"  # the message the gate's plugin and pytest give
_MISSING = re.compile(r"No module named '([A-Za-z_][\w.]*)'")
_ERROR_LINE = re.compile(
    r"(ImportError while loading conftest.*|^E\s+\S*Error:.*|^ERROR: .*|^\S*Error: .*"
    r"|^\S+: error: .*)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Unrunnable:
    """A revision whose every shard stopped before running a test, in its environment."""

    revision: str
    reason: str
    shards: tuple[str, ...]
    where: str
    source: str
    detail: str
    key: str
    log_tail_hash: str | None
    reused: tuple[str, ...] = ()  # base files whose results the result cache gave


def is_usage_error(attempt: AttemptView | None) -> bool:
    """pytest stopped on how it was invoked (exit 4), not on a test."""
    return attempt is not None and attempt.exit_code == USAGE_ERROR_EXIT and not attempt.reused_from


def only_collection_errors(report: Report | None) -> bool:
    """A report whose every case is a collection error: no test ran."""
    if report is None or not report.cases:
        return False
    return all(c.outcome == "error" and c.message == _COLLECTION for c in report.cases)


def missing_modules(report: Report) -> set[str]:
    """The top-level names of the modules the collection errors say are missing."""
    return {
        name.split(".", 1)[0]
        for case in report.cases
        for name in _MISSING.findall(case.text or "")
    }


def stopped_before_tests(attempt: AttemptView | None) -> str | None:
    """Why an attempt ran no test (`usage-error`, `collection-errors`), or None when it ran
    some or died (a signal, a timeout, memory). Base results reused from the result cache
    count as fresh ones: they were made in an environment of the same key, so the same
    source (a reused report of nothing but collection errors left the revision stuck with
    them while a fresh run of the same files rejected the source)."""
    if attempt is None:
        return None
    if is_usage_error(attempt):
        return USAGE_ERROR
    if only_collection_errors(attempt.assessment.report):
        return COLLECTION_ERRORS
    return None


def error_line(log_tail: str) -> str:
    """The line of a log that says what stopped the run (the last error named), or ''."""
    found = _ERROR_LINE.findall(log_tail)
    return found[-1].strip()[:300] if found else ""


def own_names(state: RunState, revision: str) -> set[str]:
    """Top-level names that are the project's own: its packages (as its environment resolved
    them) and the first folder or module name of each test file."""
    names = {
        name.split(".", 1)[0]
        for (r, _), e in state.environments.items()
        if r == revision
        for name in e.imports
    }
    for file in state.files:
        first = file.split("/", 1)[0]
        names.add(first.removesuffix(".py"))
    return names


def unrunnable(state: RunState) -> Unrunnable | None:
    """The first revision (head, then base) whose every shard stopped before running a test
    in a source the gate can move on from: an environment made from a declared source (not
    `--env none` or a setup command), not rejected already (an executor that made the same
    one again leaves its shards unmeasured instead of looping)."""
    for revision in ("head", "base"):
        shards = [s for s in state.leaves() if (s.files if revision == "head"
                                                 else state.base_files_of(s))]  # fmt: skip
        if not shards:
            continue
        attempts = [s.latest(revision) for s in shards]
        reasons = [stopped_before_tests(a) for a in attempts]
        if any(r is None for r in reasons):
            continue
        if COLLECTION_ERRORS in reasons:
            missing: set[str] = set()
            for a in attempts:
                if a is not None and a.assessment.report is not None:
                    missing |= missing_modules(a.assessment.report)
            if not missing or missing & own_names(state, revision):
                continue  # the revision's own code does not import: its failures
        ready = [
            e for (r, _), e in sorted(state.environments.items())
            if r == revision and e.status == "ready" and e.source
        ]  # fmt: skip
        if not ready:
            continue  # no declared source was used: nothing else to try
        env = ready[0]
        rejected = {(r.source, r.key) for r in state.rejected_sources.get(revision, [])}
        if (env.source, env.key) in rejected:
            continue
        used = next((t.detail for t in env.tried if t.outcome == "used"), "")
        first = next((a for a in attempts if a is not None and a.log_tail_hash), None)
        return Unrunnable(
            revision=revision,
            reason=USAGE_ERROR if USAGE_ERROR in reasons else COLLECTION_ERRORS,
            shards=tuple(s.id for s in shards),
            where=env.where,
            source=env.source,
            detail=used,
            key=env.key,
            log_tail_hash=first.log_tail_hash if first else None,
            reused=tuple(sorted({f for s in shards for f in s.reused})) if revision == "base"
            else (),
        )  # fmt: skip
    return None
