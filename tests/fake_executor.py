"""An executor that returns scripted observations instead of running pytest (issue 27, part 6).

The gate's process manager (`ledger/gate.GateProcess`) is driven with it in fast unit tests
of its decisions — retry rounds, bisection, isolation, attribution — beside the real
end-to-end gates. A `Suite` says what each test file does at each revision: its cases'
outcomes, or that it kills its shard (`DIES`), or that the machinery fails under it for the
first N tries (`FLAKY_INFRA`), or that it fails unless another file ran before it in the same
process (`coupled`: an order-coupled suite); the declared environment sources it makes
environments from, and those in which pytest stops at a usage error (`broken_sources`: a
conftest that does not import). Every call is kept in `calls`, so a test can assert what was
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
    SourceTried,
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
    coupled: dict[str, str] = field(default_factory=dict)  # file -> the file it needs first
    sources: tuple[str, ...] = ()  # declared sources, in precedence order (needs `packages`)
    broken_sources: frozenset[str] = frozenset()  # every run in them exits 4 ("": no source)


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
        environment = self._environment(shard.revision, dict(shard.skip_sources))
        if environment is not None and environment.status == "failed":
            return Observation.failed("env-setup", "env-setup", environment.error,
                                      environment=environment)  # fmt: skip
        if (environment.source if environment else "") in self.suite.broken_sources:
            log = b"ImportError while loading conftest '/w/tests/conftest.py'.\n" \
                  b"E   ModuleNotFoundError: No module named 'plugin'\n"  # fmt: skip
            return Observation(exit_code=4, log_tail=log, seconds=0.1, environment=environment)
        if any(self.suite.files.get((shard.revision, f)) == DIES for f in shard.files):
            return Observation(signal=9, seconds=0.1, environment=environment)
        cases: dict[str, str] = {}
        for index, file in enumerate(shard.files):
            found = self._cases(shard, file)
            needed = self.suite.coupled.get(file)
            if needed is not None and needed not in shard.files[:index]:
                found = {test: "failed" for test in found}  # its namespace was never filled
            cases.update(found)
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

    def _environment(self, revision: str, skip: dict[str, str]) -> EnvironmentReport | None:
        packages = self.suite.packages.get(revision)
        if packages is None:
            return None
        if self.request.pinned:
            packages = self.request.pinned
        key = f"{revision}-{hash(packages) & 0xFFFF:x}"
        if not self.suite.sources:
            return EnvironmentReport(how="uv", key=key, packages=packages)
        tried = [SourceTried(source=s, detail=s, outcome="failed", error=skip[s])
                 for s in self.suite.sources if s in skip]  # fmt: skip
        left = [s for s in self.suite.sources if s not in skip]
        if not left:
            return EnvironmentReport(status="failed", how="uv", tried=tuple(tried),
                                     error="no declared test environment installs")  # fmt: skip
        tried.append(SourceTried(source=left[0], detail=left[0]))
        return EnvironmentReport(how="uv", key=f"{key}-{left[0]}", packages=packages,
                                 source=left[0], tried=tuple(tried))  # fmt: skip

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
