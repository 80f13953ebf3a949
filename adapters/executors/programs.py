"""Programs sent to other machines (SSH hosts, pods) as one `python -c` source text.

They are built from stdlib-only modules of ours, concatenated: the shard supervisor and the
environment preparation first, then the entry module. Only the first part keeps its
`from __future__` line (Python allows it only at the top); an entry module imports the earlier
parts inside `try: ... except ImportError: pass`, which holds on this machine (for linting,
typing and tests) and falls through on the host, where the names are already defined.
"""

from __future__ import annotations

import base64
import functools
import zlib
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


# The modules every remote program is made of, in the order they are joined: a module may use
# at run time only names of the ones before it (and its own).
REMOTE_PARTS = (
    "supervisor.py", "env_lock.py", "invocation_source.py", "env_installer.py",
    "env_variables.py", "env_cache.py", "env_sources.py", "bytecode.py", "environment.py",
    "runners.py", "nox_reader.py", "hatch_reader.py", "sandbox.py", "host_build.py",
    "checkout_guard.py", "invocation_run.py",
)  # fmt: skip


def remote_program(entry: str) -> str:
    """Supervisor + lock rule + environment preparation (its parts `env_*.py`, then
    `environment.py`, with the nox and hatch readers) + sandbox + how a host confines its
    builds and keeps their caches apart (`host_build.py`) + checkout guard + where the
    invocation runs and what it collects (`invocation_run.py`) + the entry
    module (`ssh/wrapper.py`), `packed`."""
    return packed(program(*REMOTE_PARTS, entry))


def packed(source: str) -> str:
    """A short `python -c` text that unpacks `source` (zlib, base64) and runs it as the main
    module: one argument of a command line (the ssh command the remote shell runs, a
    container's args) holds at most 128 KiB, which the program and its prelude neared."""
    data = base64.b64encode(zlib.compress(source.encode("utf-8"), 9)).decode("ascii")
    return (
        "import base64, zlib\n"
        f"exec(compile(zlib.decompress(base64.b64decode('{data}')), '<release-ledger>', 'exec'))\n"
    )
