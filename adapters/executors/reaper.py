"""The reaper: outlives the gate to kill what the gate's shards left (stdlib only, run as
`python -c` after the supervisor's source, see `adapters/executors/programs.py`).

Usage: python -c PROGRAM TAG_PREFIX [SCRATCH_DIR]

It waits for end-of-file on its stdin, a pipe only the gate's executor holds: the executor
closing it, or the gate dying in any way (`kill -9` included, which no handler of the gate's
own can catch). Then it kills every process whose environment carries a shard tag starting
with TAG_PREFIX — wherever it went, `setsid()` and double forks included — removes the
executor's scratch folder, and exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys

# On this machine (for linting and types); in the program the supervisor's source defines it.
with contextlib.suppress(ImportError):
    from release_ledger.adapters.executors.supervisor import kill_tagged


def main(argv: list[str]) -> int:
    prefix = argv[0]
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    for _ in range(3):  # a process forking while it is killed: look again
        if not kill_tagged(prefix, prefix=True):
            break
    if len(argv) > 1 and argv[1]:
        shutil.rmtree(argv[1], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
