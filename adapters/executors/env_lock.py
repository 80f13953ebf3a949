"""Whether a revision's lock file (`uv.lock`) pins its test environment: only where the tool its
CI installs with reads it.

tox-uv's lock runner (`runner = uv-venv-lock-runner`) runs `uv sync`, and so does a project uv
manages (a `[tool.uv]` table in pyproject.toml) for its groups and extras; pip installing a
requirements file, tox's other runners, or a project that only keeps a lock beside its
declaration never read it. Applying a lock where CI does not would give one revision pinned
packages and the other freshly resolved ones (the lock added or updated in between), so a
package change reads as the code's. The decision is the same rule at every revision and is
recorded (`lock`, `lock_note` of `EnvironmentPrepared`).

Stdlib only and importing nothing of ours: sent, before `environment.py`, in the program SSH
hosts and pods run (`programs.py`).
"""

from __future__ import annotations

import hashlib
import os

LOCK_FILE = "uv.lock"
LOCK_RUNNER = "uv-venv-lock-runner"
UV_SYNC = "uv sync"  # a nox session's runner where it installs with `uv sync`
# Sources `uv sync` installs in a project uv manages: its groups, its extras, and the project
# alone (pytest added, as the gate does for every source).
UV_SYNC_SOURCES = ("dependency-group", "extras", "pytest")


def lock_digest(checkout: str) -> str:
    """The lock file's sha256, or "" when the checkout has none."""
    path = os.path.join(checkout, LOCK_FILE)
    if not os.path.isfile(path):
        return ""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def uv_managed(pyproject: dict[str, object]) -> bool:
    """A project uv manages: a `[tool.uv]` table that does not say `managed = false`."""
    tool = pyproject.get("tool")
    uv = tool.get("uv") if isinstance(tool, dict) else None
    return isinstance(uv, dict) and uv.get("managed", True) is not False


def lock_use(
    source: dict[str, object], pyproject: dict[str, object], digest: str
) -> tuple[bool, str]:
    """Whether the lock (`digest`: its sha256, "" without one) pins this declared source's
    environment, and why, for the ledger ("" when there is no lock and none was asked for)."""
    kind, detail = str(source.get("source", "")), str(source.get("detail", ""))
    runner = str(source.get("runner") or "")
    if source.get("pins"):
        why = "the pinned package set replaces it"
    elif kind == "tox" and runner == LOCK_RUNNER:
        if digest:
            return True, f"{LOCK_FILE} applied: {detail} runs {LOCK_RUNNER} (uv sync)"
        return False, f"{detail} runs {LOCK_RUNNER} but the revision has no {LOCK_FILE}"
    elif kind == "nox" and runner == UV_SYNC:
        if digest:
            return True, f"{LOCK_FILE} applied: {detail} installs with uv sync"
        return False, f"{detail} installs with uv sync but the revision has no {LOCK_FILE}"
    elif kind == "tox":
        why = f"{detail} installs with {f'runner {runner}' if runner else 'a runner'} " \
              "that does not read it"  # fmt: skip
    elif kind in UV_SYNC_SOURCES and uv_managed(pyproject):
        if digest:
            return True, f"{LOCK_FILE} applied: uv sync installs {detail} of a project uv " \
                         "manages ([tool.uv])"  # fmt: skip
        return False, ""
    elif kind in UV_SYNC_SOURCES:
        why = f"{detail} of a project uv does not manage (no [tool.uv]) is not installed by uv sync"
    elif kind == "requirements-file":
        why = f"pip installs {detail}, which does not read it"
    else:
        why = f"the {kind} source ({detail}) does not read it"
    return False, f"{LOCK_FILE} not applied: {why}" if digest else ""
