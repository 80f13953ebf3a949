"""Programs sent to other machines (SSH hosts, pods) as one `python -c` source text.

They are built from stdlib-only modules of ours, concatenated: the shard supervisor and the
environment preparation first, then the entry module. Only the first part keeps its
`from __future__` line (Python allows it only at the top); an entry module imports the earlier
parts inside `try: ... except ImportError: pass`, which holds on this machine (for linting,
typing and tests) and falls through on the host, where the names are already defined.
"""

from __future__ import annotations

import functools
from pathlib import Path

_HERE = Path(__file__).resolve().parent
FUTURE = "from __future__ import annotations\n"


@functools.cache
def program(*relative_paths: str) -> str:
    """The source of the named modules (relative to this folder), as one program."""
    parts = []
    for index, relative in enumerate(relative_paths):
        text = (_HERE / relative).read_text(encoding="utf-8")
        if index > 0:
            text = text.replace(FUTURE, "", 1)
        parts.append(text)
    return "\n".join(parts)


def remote_program(entry: str) -> str:
    """Supervisor + lock rule + environment preparation + sandbox + checkout guard + the entry
    module (`ssh/wrapper.py`)."""
    return program(
        "supervisor.py", "env_lock.py", "environment.py", "sandbox.py", "checkout_guard.py", entry
    )
