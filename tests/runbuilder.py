"""Build synthetic runs (events + report artifacts) for pure projection and rule tests."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from release_ledger.domain import events as ev
from release_ledger.domain.chain import sha256_hex


def junit(cases: dict[str, str], details: dict[str, tuple[str, str]] | None = None) -> bytes:
    """A pytest xunit1 report. `cases` maps `FILE::NAME` to passed/failed/error/skipped;
    `details` a failing test to its failure's message and text (a traceback)."""
    body = []
    counts = {"failed": 0, "error": 0, "skipped": 0}
    for test, outcome in cases.items():
        file, name = test.split("::", 1)
        classname = file[:-3].replace("/", ".")
        inner = {
            "passed": "",
            "failed": '<failure message="assert">assert 0</failure>',
            "error": '<error message="boom">boom</error>',
            "skipped": '<skipped message="skip"/>',
        }[outcome]
        if details and test in details and outcome in ("failed", "error"):
            tag = "failure" if outcome == "failed" else "error"
            message, text = details[test]
            inner = f"<{tag} message={quoteattr(message)}>{escape(text)}</{tag}>"
        counts[outcome] = counts.get(outcome, 0) + 1
        body.append(
            f'<testcase file="{file}" classname="{classname}" name="{name}">{inner}</testcase>'
        )
    return (
        f'<testsuites><testsuite name="pytest" tests="{len(cases)}" '
        f'failures="{counts["failed"]}" errors="{counts["error"]}" '
        f'skipped="{counts["skipped"]}">{"".join(body)}</testsuite></testsuites>'
    ).encode()


class RunBuilder:
    def __init__(self, run_id: str = "a" * 32, rule: str = "default") -> None:
        self.run_id = run_id
        self.events: list[ev.Event] = []
        self.artifacts: dict[str, bytes] = {}
        self.clock = datetime(2026, 1, 1, tzinfo=UTC)
        self.add(
            ev.RunStarted,
            repo="/repo",
            head_ref="HEAD",
            base_ref="v1",
            head="1" * 40,
            base="2" * 40,
            rule=rule,
            executor="local",
            command=["{python}", "-m", "pytest", "--junitxml={junit}", "{files}"],
            tool_version="test",
        )

    def add(self, cls: type[ev.Event], **fields: Any) -> ev.Event:
        self.clock += timedelta(seconds=1)
        event = cls(run_id=self.run_id, at=self.clock, **fields)
        self.events.append(event)
        return event

    def release(
        self,
        version: str | None = "1.2.0",
        changelog: bytes | None = b"# Changes\n\n## 1.2.0\n\n- fixed things\n",
        **fields: Any,
    ) -> RunBuilder:
        """A `ReleaseInspected` for head: the version and one CHANGES.md (None: no file)."""
        files = []
        if changelog is not None:
            digest = hashlib.sha256(changelog).hexdigest()
            self.artifacts[digest] = changelog
            files.append({"path": "CHANGES.md", "sha256": digest, "size": len(changelog)})
        fields.setdefault("project", "demo")
        fields.setdefault("tag", f"v{version}" if version else None)
        fields.setdefault("version_source", "pyproject.toml [project] version" if version else "")
        self.add(ev.ReleaseInspected, version=version, changelog_files=files, **fields)
        return self

    def discover(
        self,
        files: list[str],
        missing_at_base: list[str] | None = None,
        order: list[str] | None = None,
    ) -> RunBuilder:
        self.add(
            ev.TestFilesDiscovered, files=files, missing_at_base=missing_at_base or [],
            order=order or [],
        )  # fmt: skip
        for f in files:
            self.add(ev.FileMeasured, file=f, rss_mb=50.0, seconds=1.0)
        return self

    def plan(self, shards: dict[str, list[str]]) -> RunBuilder:
        planned = [
            ev.PlannedShard(id=sid, files=files, rss_mb=50.0, seconds=float(len(files)))
            for sid, files in shards.items()
        ]
        self.add(ev.ShardsPlanned, budget_mb=8192.0, count=len(planned), shards=planned)
        return self

    def attempt(
        self,
        shard: str,
        revision: str,
        files: list[str],
        cases: dict[str, str] | None,
        *,
        attempt: int = 1,
        exit_code: int | None = None,
        signal: int | None = None,
        timed_out: bool = False,
        details: dict[str, tuple[str, str]] | None = None,
        **extra: Any,
    ) -> RunBuilder:
        report_hash = None
        if cases is not None:
            data = junit(cases, details)
            report_hash = sha256_hex(data)
            self.artifacts[report_hash] = data
            if exit_code is None and signal is None:
                failing = any(o in ("failed", "error") for o in cases.values())
                exit_code = 1 if failing else 0
        self.add(
            ev.ShardAttemptRecorded,
            shard=shard,
            attempt=attempt,
            revision=revision,
            files=files,
            exit_code=exit_code,
            signal=signal,
            timed_out=timed_out,
            report_hash=report_hash,
            **extra,
        )
        return self

    def isolation(self, file: str, revision: str, cases: dict[str, str]) -> RunBuilder:
        data = junit(cases)
        digest = sha256_hex(data)
        self.artifacts[digest] = data
        failing = any(o in ("failed", "error") for o in cases.values())
        self.add(
            ev.IsolationRecorded,
            file=file,
            revision=revision,
            exit_code=1 if failing else 0,
            report_hash=digest,
        )
        return self

    def split(self, parent: str, children: dict[str, list[str]], reason: str) -> RunBuilder:
        self.add(
            ev.ShardSplit,
            parent=parent,
            children=[ev.ChildShard(id=c, files=f) for c, f in children.items()],
            reason=reason,
        )
        return self

    def environment(
        self,
        revision: str,
        packages: str | None = "pytest==8.3.0\niniconfig==2.0.0\n",
        **fields: Any,
    ) -> RunBuilder:
        """An `EnvironmentPrepared` of a revision with its frozen package list (None: none)."""
        digest = None
        if packages is not None:
            digest = sha256_hex(packages.encode())
            self.artifacts[digest] = packages.encode()
        fields.setdefault("status", "ready")
        fields.setdefault("how", "uv")
        self.add(
            ev.EnvironmentPrepared,
            revision=revision,
            commit=("1" if revision == "head" else "2") * 40,
            where=fields.pop("where", "local"),
            packages_hash=digest,
            packages=len((packages or "").split()),
            **fields,
        )
        return self

    def built(
        self,
        revision: str = "head",
        version: str = "1.2.0",
        project: str = "demo",
        readme: str = "passed",
        **fields: Any,
    ) -> RunBuilder:
        """A `DistributionsBuilt` of a revision: one sdist and one wheel of `project` `version`."""
        stem = project.replace("-", "_")
        files = [
            ev.DistributionFile(type="sdist", filename=f"{stem}-{version}.tar.gz",
                                sha256=("5" if revision == "head" else "6") * 64, size=1000,
                                name=project, version=version, description=True, readme=readme),
            ev.DistributionFile(type="wheel", filename=f"{stem}-{version}-py3-none-any.whl",
                                sha256=("7" if revision == "head" else "8") * 64, size=1200,
                                name=project, version=version, description=True, readme=readme),
        ]  # fmt: skip
        fields.setdefault("status", "built")
        fields.setdefault("files", files if fields["status"] == "built" else [])
        fields.setdefault("how", "uv build")
        fields.setdefault("readme_check", "twine check" if readme else "")
        commit = ("1" if revision == "head" else "2") * 40
        self.add(ev.DistributionsBuilt, revision=revision, commit=commit, **fields)
        return self

    def upgraded(self, before: str = "1.1.0", after: str = "1.2.0", **fields: Any) -> RunBuilder:
        """An `UpgradeChecked`: base's wheel, then head's, every step clean unless told."""
        fields.setdefault("steps", [
            ev.UpgradeStep(step="install base", exit_code=0),
            ev.UpgradeStep(step="upgrade to head", exit_code=0),
            ev.UpgradeStep(step="pip check", exit_code=0),
        ])  # fmt: skip
        fields.setdefault("imports", {"demo": "ok"})
        fields.setdefault("version_before", before)
        fields.setdefault("version_after", after)
        self.add(
            ev.UpgradeChecked,
            base_commit="2" * 40,
            head_commit="1" * 40,
            project="demo",
            base_wheel=f"demo-{before}-py3-none-any.whl",
            head_wheel=f"demo-{after}-py3-none-any.whl",
            head_wheel_sha256="7" * 64,
            how="uv",
            **fields,
        )
        return self

    def release_files(self, version: str = "1.2.0") -> RunBuilder:
        """Every release check's evidence, passing: both environments, head's and base's
        distributions, a clean upgrade (as a gate with release builds records them)."""
        self.environment("head").environment("base")
        self.built("head", version).built("base", "1.1.0", readme="")
        return self.upgraded("1.1.0", version)
