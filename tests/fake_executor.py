"""An executor that returns scripted observations instead of running pytest (issue 27, part 6).

The gate's process manager (`ledger/gate.GateProcess`) is driven with it in fast unit tests
of its decisions — retry rounds, bisection, isolation, attribution — beside the real
end-to-end gates. A `Suite` says what each test file does at each revision: its cases'
outcomes, or that it kills its shard (`DIES`), or that the machinery fails under it for the
first N tries (`FLAKY_INFRA`). Every call is kept in `calls`, so a test can assert what was
run, in which shards, and with which environment request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from release_ledger.domain.execution import (
    EnvironmentReport,
    EnvironmentRequest,
    Observation,
    ShardRun,
)
from tests.runbuilder import junit

DIES = "dies"  # the file kills its shard (signal 9) whatever else runs with it

Cases = Mapping[str, str]  # FILE::NAME -> passed, failed, error, skipped


@dataclass
class Suite:
    """What each file does at each revision: `files[(revision, file)]` is its cases or DIES;
    `alone` overrides a file's cases when it runs by itself (a test that fails only beside
    others: flaky); `infrastructure` makes the first N runs of a file fail as the machinery's
    fault; `packages` is each revision's frozen package list (none: no environment), and
    `pinned` the cases a file gives at head with base's package set."""

    files: dict[tuple[str, str], Cases | str]
    alone: dict[tuple[str, str], Cases] = field(default_factory=dict)
    infrastructure: dict[str, int] = field(default_factory=dict)
    packages: dict[str, str] = field(default_factory=dict)
    pinned: dict[str, Cases] = field(default_factory=dict)


class FakeExecutor:
    name = "fake"

    def __init__(self, suite: Suite, request: EnvironmentRequest | None = None) -> None:
        self.suite = suite
        self.request = request or EnvironmentRequest()
        self.calls: list[ShardRun] = []
        self.closed = False

    def prepare(self, commits: list[str]) -> None:
        pass

    def run(self, shard: ShardRun) -> Observation:
        self.calls.append(shard)
        for file in shard.files:
            left = self.suite.infrastructure.get(file, 0)
            if left:
                self.suite.infrastructure[file] = left - 1
                return Observation.failed("infrastructure", "ApiError", "scripted fault")
        environment = self._environment(shard.revision)
        if any(self.suite.files.get((shard.revision, f)) == DIES for f in shard.files):
            return Observation(signal=9, seconds=0.1, environment=environment)
        cases: dict[str, str] = {}
        for file in shard.files:
            cases.update(self._cases(shard, file))
        failing = any(o in ("failed", "error") for o in cases.values())
        return Observation(
            exit_code=1 if failing else 0, report=junit(cases), seconds=0.1, rss_mb=30.0,
            environment=environment, sandbox="none",
        )  # fmt: skip

    def _cases(self, shard: ShardRun, file: str) -> Cases:
        if self.request.pinned and file in self.suite.pinned:
            return self.suite.pinned[file]
        alone = self.suite.alone.get((shard.revision, file))
        if alone is not None and len(shard.files) == 1:
            return alone
        found = self.suite.files.get((shard.revision, file), {})
        return found if isinstance(found, Mapping) else {}

    def _environment(self, revision: str) -> EnvironmentReport | None:
        packages = self.suite.packages.get(revision)
        if packages is None:
            return None
        if self.request.pinned:
            packages = self.request.pinned
        return EnvironmentReport(how="uv", key=f"{revision}-{hash(packages) & 0xFFFF:x}",
                                 packages=packages)  # fmt: skip

    def cancel_all(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def two_commit_repo(tmp_path: Path, files: list[str]) -> Path:
    """A repository of `files` (one passing test each) at `v1`, and a head that changes no
    test: the gate runs against it while the fake executor scripts what each file does."""
    from tests.gitrepo import commit, make_repo, tag

    repo = make_repo(tmp_path, {f: "def test_one():\n    pass\n" for f in files})
    tag(repo, "v1")
    commit(repo, {"README": "head\n"})
    return repo
