"""The Kubernetes executor: shards run as Jobs on a pool of clusters (kubeconfig contexts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import field_validator

from release_ledger.adapters.executors.kubernetes.runner import DEFAULT_IMAGE
from release_ledger.adapters.executors.port import (
    Capabilities,
    Executor,
    ExecutorOptions,
    ExecutorSpec,
    option,
    per_interpreter,
)
from release_ledger.domain.execution import EnvironmentRequest


class KubernetesOptions(ExecutorOptions):
    pool: list[str] = option("Kubernetes contexts.", required=True, metavar="CTX[,CTX...]")
    namespace: str | None = option("Kubernetes namespace.")
    capacity: int | None = option("Jobs per pool member (default 4).", low=1, high=10_000)
    image: str | None = option(f"Container image (default {DEFAULT_IMAGE}).")
    source: str | None = option("Git URL pods clone (default: origin).")
    pool_config: str | None = option("TOML pool config.", table=False, path=True)

    @field_validator("pool", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


def _build(repo: Path, options: Any, environment: EnvironmentRequest) -> Executor:
    # Imported here: the kubernetes client costs ~0.5 s to import, paid only when used.
    from release_ledger.adapters.executors.kubernetes import executor as k8s

    given = {k: v for k, v in options.model_dump().items() if v is not None}
    if environment.interpreter:  # a matrix lane: this interpreter's image
        given["image"] = per_interpreter(
            given.get("image", DEFAULT_IMAGE), environment.interpreter, DEFAULT_IMAGE, "--image"
        )
    return k8s.build_kubernetes_executor(repo=repo, environment_request=environment, **given)


SPEC = ExecutorSpec(
    name="kubernetes",
    summary="Jobs on a pool of clusters (--pool CTX,...)",
    options=KubernetesOptions,
    capabilities=Capabilities(
        places_on_pool=True, measures_locally=True, infrastructure_failures=True
    ),
    build=_build,
)
