"""Approval: external checks recorded, the release inspected at head, its distributions
built, the upgrade from base checked, the approval issued, attestations issued."""

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from release_ledger.domain.events.base import (
    OWNER_INPUT,
    Event,
    Revision,
)

MetricVerdict = Literal["pass", "fail", "unmeasured"]


class CheckRecorded(Event):
    kind: Literal["CheckRecorded"] = "CheckRecorded"
    TRAITS: ClassVar[frozenset[str]] = frozenset({OWNER_INPUT})
    name: str  # the safe key (letters, digits, '.', '_', '-')
    verdict: MetricVerdict
    value: str = ""
    by: str = ""
    display_name: str = ""  # as the owner typed it ("installation files"); empty: the key


class ChangelogFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    sha256: str  # the file's bytes at head (first `limit` bytes), stored as an artifact
    size: int
    truncated: bool = False


class ReleaseInspected(Event):
    """What head's tree says about the release, read once at gate start (git, no checkout):
    the project's name and version, tags at head, changelog files and towncrier fragments,
    and the `[tool.release-ledger]` settings. The built-in checks and the approval report
    are pure functions of this evidence."""

    kind: Literal["ReleaseInspected"] = "ReleaseInspected"
    project: str | None = None
    version: str | None = None
    version_source: str = ""  # "pyproject.toml [project] version", "tag v1.2.0", ...
    # How the build declares a version the tree does not name ("setuptools_scm", "hatch-vcs",
    # "flit (the module's __version__)", ...): the release is then what head's wheel states.
    version_dynamic: str = Field(default="", exclude_if=lambda value: not value)
    base_version: str | None = None
    tags_at_head: list[str] = Field(default_factory=list)
    tag: str | None = None  # the release's tag: one at head naming the version, else v<version>
    changelog_files: list[ChangelogFile] = Field(default_factory=list)
    towncrier: bool = False  # [tool.towncrier] configured at head
    fragments: list[str] = Field(default_factory=list)  # towncrier fragments left at head
    rollback: list[str] | None = None  # [tool.release-ledger] rollback, one command a line
    required_checks: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)  # settings that could not be read

    def artifact_hashes(self) -> list[str]:
        return [f.sha256 for f in self.changelog_files]


class DistributionFile(BaseModel):
    """One built distribution (sdist or wheel) as its own metadata describes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["sdist", "wheel"]
    filename: str
    sha256: str  # of the file's bytes (the file itself is not kept in the ledger)
    size: int
    name: str = ""  # metadata Name
    version: str = ""  # metadata Version
    metadata_version: str = ""
    description_content_type: str = ""
    description: bool = False  # a long description (the README) is in the metadata
    readme: str = ""  # twine check's word for it: passed, warned, failed; empty: not checked


class DistributionsBuilt(Event):
    """A revision's sdist and wheel built with its PEP 517 backend from a clean checkout of
    the commit (or why not), their metadata and hashes, and `twine check`'s output. Made at
    gate time by `adapters/distributions.py`; the `distributions` check is a pure function of
    it (and `upgrade` reads base's and head's)."""

    kind: Literal["DistributionsBuilt"] = "DistributionsBuilt"
    revision: Revision
    commit: str
    # error: the gate itself could not build (its own fault, not the project's)
    status: Literal["built", "failed", "not-packaged", "error"]
    how: str = ""  # "uv build", "python -m build"
    python_version: str = ""
    files: list[DistributionFile] = Field(default_factory=list)
    top_level: list[str] = Field(default_factory=list)  # the wheel's importable packages
    readme_check: str = ""  # how the README was checked ("twine check"); empty: not checked
    readme_error: str = ""  # why the README could not be checked (twine not installable, ...)
    check_output_hash: str | None = None  # twine check's output, as an artifact
    error: str = ""
    log_tail_hash: str | None = None  # the build log's end, as an artifact
    seconds: float = 0.0
    reused: bool = False  # taken from the build cache (same commit, same interpreter)

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.check_output_hash, self.log_tail_hash) if h]


class UpgradeStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    step: str  # "install base", "upgrade to head", "pip check"
    exit_code: int | None = None
    error: str = ""


class UpgradeChecked(Event):
    """Base's wheel installed, then head's over it, in a fresh environment: what each step
    did, the version installed after each, and what importing head's packages gave."""

    kind: Literal["UpgradeChecked"] = "UpgradeChecked"
    base_commit: str
    head_commit: str
    project: str = ""  # the distribution name installed
    base_wheel: str = ""  # file name
    base_wheel_sha256: str = ""
    head_wheel: str = ""
    head_wheel_sha256: str = ""
    how: str = ""  # uv, pip
    python_version: str = ""
    steps: list[UpgradeStep] = Field(default_factory=list)
    version_before: str | None = None  # importlib.metadata after installing base
    version_after: str | None = None  # after installing head over it
    imports: dict[str, str] = Field(default_factory=dict)  # module -> "ok" or the error
    skipped: str = ""  # why it was not attempted (no base wheel, ...)
    packages_hash: str | None = None  # the environment's frozen list after the upgrade
    log_tail_hash: str | None = None
    seconds: float = 0.0
    reused: bool = False

    def artifact_hashes(self) -> list[str]:
        return [h for h in (self.packages_hash, self.log_tail_hash) if h]


class ApprovalIssued(Event):
    kind: Literal["ApprovalIssued"] = "ApprovalIssued"
    TRAITS: ClassVar[frozenset[str]] = frozenset({OWNER_INPUT})
    outcome: str
    rule: str
    rule_version: int = 1
    report_sha256: str
    required: list[str] = Field(default_factory=list)
    # 1: the first report (gate, checks, runtime pin); 2: titled by version, built-in release
    # checks, rollback commands from the recorded `ReleaseInspected`; 3: also dependencies,
    # distributions and upgrade, and only the required metrics decide; 4: the gate's why also
    # names tests skipped at both revisions for a missing module. Audit derives by it.
    report_format: int = 1


class AttestationIssued(Event):
    """A signed (or unsigned) bundle of in-toto statements given out for the run: the ledger
    knows what evidence it issued. The statements derive from the events up to `position`."""

    kind: Literal["AttestationIssued"] = "AttestationIssued"
    TRAITS: ClassVar[frozenset[str]] = frozenset({OWNER_INPUT})
    envelope_sha256: list[str]  # sha256 of each envelope's JSON line, in the bundle's order
    key_id: str = ""  # the signing key's id; empty: unsigned statements
    position: int  # the chain position the statements derive from
    chain_tip: str  # that position's chain hash
    verification_result: str  # the VSA's PASSED / FAILED
    rule: str
