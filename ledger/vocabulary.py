"""What the command line may name of the layers below the ledger, in one place.

`cli/` talks to the ledger layer only (an import-linter contract in pyproject.toml): the errors
it turns into exit codes and the words and values it renders reach it through this module
(light modules only: a reading command imports it), so a change below shows here first; the
settings and executors it turns into flags come from `ledger/options.py`.
"""

from __future__ import annotations

from release_ledger.adapters.store_errors import LeaseHeld, LeaseLost, StoreBusy
from release_ledger.domain.attribution import CAUSE_WORDS
from release_ledger.domain.clusters import Cluster, headline
from release_ledger.domain.errors import BadInput, IntegrityProblem
from release_ledger.domain.resources import OutOfMemory, change_line
from release_ledger.domain.text import masked, one_line
from release_ledger.domain.timing import Hang

__all__ = [
    "CAUSE_WORDS",
    "BadInput",
    "Cluster",
    "Hang",
    "IntegrityProblem",
    "LeaseHeld",
    "LeaseLost",
    "OutOfMemory",
    "StoreBusy",
    "change_line",
    "headline",
    "masked",
    "one_line",
]
