"""Executors: where shards run. One module or package each, one registry line each.

To add one: a package beside these with an `ExecutorSpec` (`port.py`) naming it, its options
model, capabilities and builder; then one line in `REGISTRY` below. The command line's
`--executor` choices, option validation, and the gate's behaviour come from the spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from release_ledger.adapters.executors import kubernetes, local, ssh
from release_ledger.adapters.executors.port import (
    Capabilities,
    Executor,
    ExecutorOptions,
    ExecutorSpec,
)
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import EnvironmentRequest

REGISTRY: dict[str, ExecutorSpec] = {
    spec.name: spec for spec in (local.SPEC, ssh.SPEC, kubernetes.SPEC)
}


def spec_for(name: str) -> ExecutorSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(REGISTRY)
        raise BadInput(f"unknown executor {name!r}; use one of {known}") from None


def validate_options(name: str, given: dict[str, Any]) -> dict[str, Any]:
    """The executor's options, validated and as `RunStarted` records them (BadInput, exit 2)."""
    spec = spec_for(name)
    return spec.recorded(spec.validate(given))


def build_executor(
    name: str,
    repo: Path,
    options: dict[str, Any],
    environment: EnvironmentRequest | None = None,
) -> Executor:
    """Validate and build; BadInput (exit 2) before anything is appended."""
    spec = spec_for(name)
    return spec.build(repo, spec.validate(options), environment or EnvironmentRequest())


__all__ = [
    "REGISTRY",
    "Capabilities",
    "Executor",
    "ExecutorOptions",
    "ExecutorSpec",
    "build_executor",
    "spec_for",
    "validate_options",
]
