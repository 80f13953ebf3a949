"""The SSH executor: shards run on one build host, from a bare mirror of pinned commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from release_ledger.adapters.executors.port import (
    Capabilities,
    Executor,
    ExecutorOptions,
    ExecutorSpec,
    option,
    per_interpreter,
)
from release_ledger.adapters.executors.ssh.target import REMOTE_PYTHON
from release_ledger.domain.execution import EnvironmentRequest


class SshOptions(ExecutorOptions):
    host: str = option("SSH build host.", required=True, metavar="USER@HOST")
    remote_mirror: str | None = option("Bare mirror on the host.", metavar="PATH")
    port: int | None = option("SSH port of the build host.", flag="--ssh-port", table=False,
                              low=1, high=65_535)  # fmt: skip
    identity: str | None = option("SSH private key file.", flag="--ssh-identity", table=False,
                                  path=True)  # fmt: skip
    ssh_options: list[str] | None = option("Extra ssh -o option (repeatable).",
                                           flag="--ssh-option", table=False, multiple=True,
                                           metavar="KEY=VALUE")  # fmt: skip
    remote_python: str | None = option(f"Python on the build host ({REMOTE_PYTHON}).")


def _build(repo: Path, options: Any, environment: EnvironmentRequest) -> Executor:
    from release_ledger.adapters.executors.ssh import executor as ssh

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
