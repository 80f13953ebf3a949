"""The `--pool-config` TOML file: per-member namespace, capacity, image, node selector, account.

    [members."gke-east"]
    namespace = "ci"
    capacity = 8
    image = "python:3.12-slim"
    node_selector = { pool = "tests" }
    service_account = "gate-runner"

Every problem is a `BadInput` naming the file and the offending key, before anything runs.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from release_ledger.adapters.executors.kubernetes.jobs import MemberSettings
from release_ledger.domain.errors import BadInput

_KEYS = frozenset({"namespace", "capacity", "image", "node_selector", "service_account"})
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{where} must be a non-empty string")
    return value


def _member(base: MemberSettings, table: Any, where: str) -> MemberSettings:
    if not isinstance(table, Mapping):
        raise BadInput(f"{where} must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise BadInput(
            f"{where} has unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})"
        )
    settings = base
    if "namespace" in table:
        namespace = _text(table["namespace"], f"{where}.namespace")
        if len(namespace) > 63 or not _DNS.match(namespace):
            raise BadInput(f"{where}.namespace {namespace!r} is not a valid namespace name")
        settings = replace(settings, namespace=namespace)
    if "capacity" in table:
        capacity = table["capacity"]
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise BadInput(f"{where}.capacity must be a whole number >= 1, not {capacity!r}")
        settings = replace(settings, capacity=capacity)
    if "image" in table:
        settings = replace(settings, image=_text(table["image"], f"{where}.image"))
    if "node_selector" in table:
        selector = table["node_selector"]
        if not isinstance(selector, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
        ):
            raise BadInput(f"{where}.node_selector must be a table of strings")
        settings = replace(settings, node_selector=dict(selector))
    if "service_account" in table:
        account = _text(table["service_account"], f"{where}.service_account")
        settings = replace(settings, service_account=account)
    return settings


def load_pool_config(
    path: Path | None, pool: Sequence[str], defaults: MemberSettings
) -> dict[str, MemberSettings]:
    """Settings per member: the defaults, overridden by the member's table in the file."""
    settings = {member: defaults for member in pool}
    if path is None:
        return settings
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise BadInput(f"pool config {path}: cannot read it ({error.strerror or error})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise BadInput(f"pool config {path} is not valid TOML: {error}") from None
    unknown = sorted(set(document) - {"members"})
    if unknown:
        raise BadInput(
            f"pool config {path}: unknown top-level key {unknown[0]!r} (use [members.NAME])"
        )
    members = document.get("members", {})
    if not isinstance(members, Mapping):
        raise BadInput(f"pool config {path}: 'members' must be a table of member tables")
    for name, table in members.items():
        if name not in settings:
            raise BadInput(
                f"pool config {path} configures member {name!r}, which is not in the pool "
                f"({', '.join(pool)})"
            )
        settings[name] = _member(defaults, table, f"pool config {path}: members.{name}")
    return settings
