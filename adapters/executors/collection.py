"""Discovery from the declared invocation: the files whose items the revision's own runner
collects (`--collect-only` with the invocation's options and targets, in the revision's
environment), instead of a model of pytest's rules. The file walk (adapters/discovery.py)
stays the fallback where collection cannot run, and the ledger says which it was.

The `Collector` port is what the gate's `discover` step asks (`ledger/steps/discover.py`);
`ExecutorCollector` answers it with a lane's executor. It is a port of its own, not part of the
`Workspace` (`adapters/workspace.py`): collection runs in a revision's environment, which is
each interpreter lane's (its executor), while the workspace is the repository all lanes share.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from release_ledger.domain.invocation import INSTALLED_PREFIX, collected_items

COLLECT_TIMEOUT_S = 300.0  # at most, for collecting a whole suite before it is sharded


class Collected(NamedTuple):
    """A commit's collection: the files in collection order (None: the walk must find them),
    how they were found, and the items collected in each file (empty where none were).
    A plain `(files, how)` pair reads as one with no items (`Collected(*pair)`)."""

    files: list[str] | None
    how: str
    items: Mapping[str, int] = MappingProxyType({})


def collect_files(
    executor: Any, commit: str, timeout_s: float, memory_limit_mb: int | None
) -> Collected:
    """(files in collection order, how they were found, items per file), or (None, why the
    walk is used). A module of the installed package is named `{site-packages}/pkg/mod.py`.
    Collection runs under the run's shard limits (`timeout_s`, `memory_limit_mb`)."""
    collect = getattr(executor, "collect", None)
    if collect is None:
        return Collected(None, "file walk (fallback: the executor cannot collect before the run)")
    node_ids, why = collect(commit, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb)
    if node_ids is None:
        return Collected(None, f"file walk (fallback: {why})")
    if not node_ids:
        return Collected(None, "file walk (fallback: the declared invocation collected no items)")
    invocation = executor.invocation_for(commit)  # the one the collection ran
    source = invocation.source if invocation is not None else "pytest"
    items = collected_items(node_ids)  # in the order the invocation collects them
    files = list(items)
    installed = [f for f in files if f.startswith(INSTALLED_PREFIX)]
    how = f"collected by {source}: {len(node_ids)} items in {len(files)} files"
    if installed:
        how += f", {len(installed)} of them modules of the installed package"
    return Collected(files, how, items)


class Collector(Protocol):
    """The test files a commit's declared invocation collects, in its collection order, how
    they were found and the items collected in each; (None, why) where the file walk must
    find them instead."""

    def collected(
        self, commit: str, timeout_s: float, memory_limit_mb: int | None
    ) -> Collected: ...


class ExecutorCollector:
    """The port over a lane's executor: its `collect`, where it has one (`collect_files`)."""

    def __init__(self, executor: Any) -> None:
        self.executor = executor

    def collected(self, commit: str, timeout_s: float, memory_limit_mb: int | None) -> Collected:
        return collect_files(self.executor, commit, timeout_s, memory_limit_mb)
