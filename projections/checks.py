"""The approval report's metrics: each a small pure function of recorded evidence.

A metric is `pass` / `fail` / `unmeasured` with its value, why, and the ledger events that
decided it. The built-in release checks are registered in `BUILTIN_CHECKS` (one entry each, in
report order), each in its own module (`check_gate.py`, `check_dependencies.py`,
`check_builds.py`, `check_changelog.py`); each reads only an `Evidence`
(`check_model.py`) — the run's folded state, its verdict, its `ReleaseInspected`,
`EnvironmentPrepared`, `DistributionsBuilt` and `UpgradeChecked` events and the artifacts
those reference — never the clock, disk or network. To add one: write
`def my_check(evidence: Evidence) -> Metric` in a `projections/check_*.py` module and add one
line to `BUILTIN_CHECKS` (a new check changes the report's table, so it comes with a new
report format: see `projections.approval`).
"""

from __future__ import annotations

from collections.abc import Callable

from release_ledger.projections.check_builds import (
    DISTRIBUTIONS,
    UPGRADE,
    distributions_check,
    normal_version,
    upgrade_check,
)
from release_ledger.projections.check_changelog import CHANGELOG, changelog_check, names_version
from release_ledger.projections.check_dependencies import (
    DEPENDENCIES,
    dependencies_check,
    dependency_changes,
    packages_of,
)
from release_ledger.projections.check_gate import (
    GATE,
    RUNTIME_PIN,
    gate_check,
    gate_metric_v1,
    gate_value,
    pin_metric,
    pin_satisfied,
    runtime_pin_check,
)
from release_ledger.projections.check_model import (
    KEY_PATTERN,
    Deciding,
    Evidence,
    Index,
    Metric,
    check_key,
)

__all__ = [
    "BUILTIN_CHECKS", "CHANGELOG", "CHECKS_OF_FORMAT", "DEPENDENCIES", "DISTRIBUTIONS", "GATE",
    "KEY_PATTERN", "RUNTIME_PIN", "UPGRADE", "Check", "Deciding", "Evidence", "Index", "Metric",
    "check_key", "dependency_changes", "gate_metric_v1", "gate_value", "names_version",
    "normal_version", "packages_of", "pin_metric", "pin_satisfied",
]  # fmt: skip

Check = Callable[[Evidence], Metric]

# The built-in checks, in report order (format 3). Adding one is one function above, one line
# here, and a new report format in `projections.approval` (issued reports keep theirs).
BUILTIN_CHECKS: dict[str, Check] = {
    GATE: gate_check,
    RUNTIME_PIN: runtime_pin_check,
    DEPENDENCIES: dependencies_check,
    DISTRIBUTIONS: distributions_check,
    UPGRADE: upgrade_check,
    CHANGELOG: changelog_check,
}

# The checks of each report format that has built-in checks (issued reports re-derive by it).
CHECKS_OF_FORMAT: dict[int, tuple[str, ...]] = {
    2: (GATE, RUNTIME_PIN, CHANGELOG),
    3: tuple(BUILTIN_CHECKS),
    4: tuple(BUILTIN_CHECKS),  # the gate's why also tells skips for a missing module
    5: tuple(BUILTIN_CHECKS),  # the gate's value leads with the failures' causes
    6: tuple(BUILTIN_CHECKS),  # a dynamic version is the built wheel's
}
