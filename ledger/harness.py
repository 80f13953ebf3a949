"""Which harness files differ between base and head (`domain/harness.py`), read from git's
blobs through the workspace (never from a checkout the project's code could have written or
linked out of); the `discover` step records them."""

from __future__ import annotations

from typing import Literal

from release_ledger.adapters.workspace import Workspace
from release_ledger.domain.harness import HarnessChange, config_change, harness_kind


def harness_changes(workspace: Workspace, base: str, head: str) -> list[HarnessChange]:
    """Each conftest.py whose blob differs between the commits, and each pytest
    configuration file whose pytest settings do, sorted by path."""
    at_base, at_head = workspace.blob_hashes(base), workspace.blob_hashes(head)
    found = []
    for path in sorted(set(at_base) | set(at_head)):
        kind = harness_kind(path)
        if kind is None or at_base.get(path) == at_head.get(path):
            continue
        if kind == "conftest":
            found.append(HarnessChange(path=path, what=kind, change=_presence(
                path in at_base, path in at_head)))  # fmt: skip
            continue
        before = workspace.read_file(base, path) if path in at_base else None
        after = workspace.read_file(head, path) if path in at_head else None
        change = config_change(path, before, after)
        if change is not None:
            found.append(HarnessChange(path=path, what=kind, change=change))
    return found


def _presence(at_base: bool, at_head: bool) -> Literal["added", "removed", "modified"]:
    return "modified" if at_base and at_head else "added" if at_head else "removed"
