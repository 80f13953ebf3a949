"""Which executor runs the shards: built from the options recorded in `RunStarted`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.executor import Executor
from adapters.local_executor import LocalExecutor
from domain.errors import BadInput

EXECUTORS = ("local", "kubernetes", "ssh")


def build_executor(name: str, repo: Path, options: dict[str, Any]) -> Executor:
    """Validate and build; BadInput (exit 2) before anything is appended."""
    if name == "local":
        return LocalExecutor(repo)
    if name == "kubernetes":
        from adapters.kubernetes_executor import build_kubernetes_executor

        return build_kubernetes_executor(repo=repo, **options)  # type: ignore[no-any-return]
    if name == "ssh":
        from adapters.ssh_executor import build_ssh_executor

        ssh = dict(options)
        if ssh.get("identity"):
            ssh["identity"] = Path(ssh["identity"])
        return build_ssh_executor(repo=repo, **ssh)
    raise BadInput(f"unknown executor {name!r}; use one of {', '.join(EXECUTORS)}")
