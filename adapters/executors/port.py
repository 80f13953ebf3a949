"""The port every executor implements, and what each declares about itself.

An executor is one package or module under `adapters/executors/` with an `ExecutorSpec`: its
name, a validated options model (what `--host`, `--pool`, ... fill in; recorded in
`RunStarted`), its capabilities, and a `build` function. The gate and the command line read
the registry (`adapters/executors/__init__.py`) and the capabilities — never an executor's
name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.config import JsonDict
from pydantic.fields import FieldInfo

from release_ledger.adapters.setting import Kind, Setting
from release_ledger.domain.errors import BadInput
from release_ledger.domain.events import MemberLease
from release_ledger.domain.execution import EnvironmentRequest, Observation, ShardRun


class Executor(Protocol):
    """Runs shards somewhere. `run` blocks and is called from several worker threads at once."""

    name: str

    def prepare(self, commits: list[str]) -> None:
        """Make the commits (and their environments) ready where shards run."""

    def run(self, shard: ShardRun) -> Observation:
        """Run one shard at one commit and observe it. Never raises for test failures."""

    def cancel_all(self) -> None:
        """Kill everything still running (Ctrl-C, SIGTERM); safe to call from any thread."""

    def close(self) -> None:
        """Release resources (worktrees stay cached; remote temporaries are removed)."""


class PoolExecutor(Executor, Protocol):
    """An executor over several members (clusters) whose free capacity must be measured.

    The gate measures the pool before each round (`PoolMeasured`), places shards with the
    pure placement in `domain/`, and sets `ShardRun.member` before calling `run`.
    """

    def members(self) -> list[str]:
        """The configured member names, in configuration order."""

    def measure_pool(self) -> list[MemberLease]:
        """Readiness, capacity, running/pending gate Jobs and free memory per node, per member.

        A member that cannot be measured is returned with `ready=False` and its reason.
        Never waits unbounded.
        """


@dataclass(frozen=True)
class Capabilities:
    """What the gate may expect of an executor (read instead of its name)."""

    # Shards are placed on a pool of members (the executor is a `PoolExecutor`): the pool is
    # measured each round and each shard reserves its planned memory there.
    places_on_pool: bool = False
    # Shards run on this machine (its interpreters are the matrix's).
    runs_locally: bool = False
    # Files are measured and isolated on this machine by the local executor, not by this one.
    measures_locally: bool = False
    # Its failures can be the machinery's (a dropped connection, a failed pod): each one is
    # also recorded as `PodFailed`, naming the member.
    infrastructure_failures: bool = False


class ExecutorOptions(BaseModel):
    """Base of every executor's options: validated, and recorded as given in `RunStarted`.
    Each field declared with `option(...)` is also a flag of `ledger gate` and a key of
    `[tool.release-ledger]`: the executor's settings live in this one model."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def option(
    help: str,
    *,
    required: bool = False,
    flag: str = "",
    table: bool = True,
    metavar: str | None = None,
    multiple: bool = False,
    path: bool = False,
    low: float | None = None,
    high: float | None = None,
) -> Any:
    """A field of an executor's options with its flag (default `--field-name`), whether the
    repository's table may set it, and the range `ledger gate` checks before it appends."""
    declared: JsonDict = {"flag": flag, "table": table, "metavar": metavar,
                          "multiple": multiple, "path": path, "low": low, "high": high}  # fmt: skip
    if required:
        return Field(description=help, json_schema_extra=declared)
    return Field(default=None, description=help, json_schema_extra=declared)


def _setting(name: str, info: FieldInfo) -> Setting:
    """One executor option as a `Setting` (its flag's parameter named after the flag)."""
    declared = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    flag = str(declared.get("flag") or "--" + name.replace("_", "-"))
    multiple = bool(declared.get("multiple"))
    kind: Kind = "path" if declared.get("path") else "int" if info.annotation is int or (
        info.annotation == int | None) else "text"  # fmt: skip
    table_type: Any = str | list[str] if "list" in str(info.annotation) else info.annotation
    low, high, metavar = declared.get("low"), declared.get("high"), declared.get("metavar")
    return Setting(
        name=flag[2:].replace("-", "_"),
        help=info.description or "",
        kind=kind,
        flag=flag,
        table=flag[2:] if declared.get("table", True) else None,
        table_type=table_type,
        field=name,
        metavar=metavar if isinstance(metavar, str) else None,
        multiple=multiple,
        low=float(low) if isinstance(low, int | float) else None,
        high=float(high) if isinstance(high, int | float) else None,
        low_open=False,
        group="Executor",
    )


Builder = Callable[[Path, Any, EnvironmentRequest], Executor]


@dataclass(frozen=True)
class ExecutorSpec:
    """One executor's declaration: the registry holds one per executor."""

    name: str
    summary: str
    options: type[ExecutorOptions]
    capabilities: Capabilities
    build: Builder  # (repository, validated options, environment request) -> executor

    @property
    def settings(self) -> list[Setting]:
        """Its options as the gate's flags and table keys, in the model's order."""
        return [_setting(name, info) for name, info in self.options.model_fields.items()]

    def validate(self, given: dict[str, Any]) -> ExecutorOptions:
        """The options for this executor, or BadInput naming the first problem (one line)."""
        try:
            return self.options.model_validate(given)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "options"
            flags = {s.target: s.flag for s in self.settings}
            flag = flags.get(where) or "--" + where.replace("_", "-")
            if first["type"] == "missing":
                raise BadInput(f"--executor {self.name} needs {flag}") from None
            if first["type"] == "extra_forbidden":
                raise BadInput(f"{flag} does not apply to --executor {self.name}") from None
            raise BadInput(f"{flag}: {first['msg']}") from None

    def recorded(self, options: ExecutorOptions) -> dict[str, Any]:
        """The options as `RunStarted` records them (defaults left out, JSON values)."""
        return options.model_dump(mode="json", exclude_defaults=True)


def per_interpreter(value: str, label: str, default: str, flag: str) -> str:
    """An executor setting for one interpreter of a matrix: `{python}` in it is replaced by
    the label (`python:{python}-slim`); the built-in `default` follows the label by itself;
    any other fixed value would run every interpreter's shards on one, so it is refused."""
    if not label:
        return value
    if "{python}" in value:
        return value.replace("{python}", label)
    if value == default:
        return default_for(default, label)
    raise BadInput(
        f"{flag} {value!r} names one interpreter; for --python write it with {{python}} "
        f"(e.g. {default_for(default, '{python}')!r})"
    )


def default_for(default: str, label: str) -> str:
    """The built-in setting for `label`: `python3` -> `python3.12`, `python:3.11-slim` ->
    `python:3.12-slim`."""
    if default == "python3":
        return f"python{label}"
    return re.sub(r"\d+\.\d+", label, default, count=1)
