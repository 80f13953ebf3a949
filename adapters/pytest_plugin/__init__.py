"""The gate's own pytest plugin, shipped as a self-contained module in this folder.

`release_ledger_pytest.py` imports nothing of ours (stdlib and pytest only), so it loads in any
environment that has pytest: a per-revision virtual environment, an SSH host, a pod. The default
command loads it with `-p release_ledger_pytest`; an executor makes it importable by putting
`PLUGIN_DIR` first on the child's `PYTHONPATH` (`with_plugin_path`).
"""

from __future__ import annotations

import os
from pathlib import Path

PLUGIN_DIR: Path = Path(__file__).resolve().parent
PLUGIN_MODULE = "release_ledger_pytest"
# Its text, for executors that write it where the shard runs (SSH hosts, pods).
PLUGIN_SOURCE = (PLUGIN_DIR / f"{PLUGIN_MODULE}.py").read_text(encoding="utf-8")


def with_plugin_path(env: dict[str, str]) -> dict[str, str]:
    """A copy of `env` whose `PYTHONPATH` starts with `PLUGIN_DIR` (kept once, entries kept)."""
    entries = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    entries = [str(PLUGIN_DIR), *(e for e in entries if e != str(PLUGIN_DIR))]
    return {**env, "PYTHONPATH": os.pathsep.join(entries)}
