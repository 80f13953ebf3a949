"""The run state's views of files run again outside the plan: alone (isolation), with base's
package set (attribution), looked up in the history (exoneration), in the project's own order
(`domain/order.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from release_ledger.domain import events as ev
from release_ledger.domain.assessment import Assessment


@dataclass(frozen=True)
class IsolationView:
    file: str
    revision: str
    assessment: Assessment
    position: int
    killed_test: str | None = None  # ended at its file's time limit, this test running
    time_limit_s: float | None = None
    seconds: float = 0.0
    oom: bool = False  # killed over its memory limit
    rss_mb: float = 0.0
    time_limit_not_believed: str | None = None  # a time-limit line the supervisor belied


@dataclass(frozen=True)
class AttributionView:
    """Head's introduced failures run again with base's package set (`AttributionRecorded`)."""

    tests: tuple[str, ...]
    moved: tuple[ev.PackageMove, ...]
    assessment: Assessment | None  # None: base's package set did not install with head
    environment_error: str
    position: int


@dataclass(frozen=True)
class ExonerationView:
    """Why a failure the gate would call introduced is not blamed on head (`FailureExonerated`)."""

    test: str
    reason: str
    proof: tuple[ev.Proof, ...]
    position: int


@dataclass(frozen=True)
class InOrderView:
    """One run of files in the project's order at one revision (`InOrderRecorded`)."""

    revision: str
    files: tuple[str, ...]
    confirms: tuple[str, ...]  # the files whose failures it judges
    assessment: Assessment
    position: int
