"""The SSH executor: shards run on one build host, from a bare mirror of pinned commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.executors.port import (
    Capabilities,
    Executor,
    ExecutorOptions,
    ExecutorSpec,
    per_interpreter,
)
from domain.execution import EnvironmentRequest

REMOTE_PYTHON = "python3"  # the build host's interpreter; `python3.12` in a matrix lane


class SshOptions(ExecutorOptions):
    host: str
    remote_mirror: str | None = None
    port: int | None = None
    identity: str | None = None
    ssh_options: list[str] | None = None
    remote_python: str | None = None


def _build(repo: Path, options: Any, environment: EnvironmentRequest) -> Executor:
    from adapters.executors.ssh import executor as ssh

    given = {k: v for k, v in options.model_dump().items() if v is not None}
    if environment.interpreter:  # a matrix lane: this interpreter's python on the host
        given["remote_python"] = per_interpreter(
            given.get("remote_python", REMOTE_PYTHON), environment.interpreter, REMOTE_PYTHON,
            "--remote-python",
        )  # fmt: skip
    if given.get("identity"):
        given["identity"] = Path(given["identity"])
    return ssh.build_ssh_executor(repo=repo, environment_request=environment, **given)


SPEC = ExecutorSpec(
    name="ssh",
    summary="one build host over SSH (--host USER@HOST)",
    options=SshOptions,
    # Files are measured on the build host, as the local executor measures them here.
    capabilities=Capabilities(infrastructure_failures=True),
    build=_build,
)
