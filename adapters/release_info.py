"""Read what a commit's tree says about its release: version, tags, changelog, settings.

I/O (git reads of one commit, no checkout). The result is recorded as a `ReleaseInspected`
event at gate start, with the changelog files as content-addressed artifacts, so the checks
and the approval report built on it stay pure functions of the ledger.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from release_ledger.adapters import git
from release_ledger.domain.chain import sha256_hex

CHANGELOG_STEMS = ("changes", "changelog", "history", "news", "releasenotes", "release-notes")
CHANGELOG_SUFFIXES = ("", ".md", ".rst", ".txt", ".markdown")
CHANGELOG_DIRS = ("", "docs/", "doc/")
FRAGMENT_DIRS = ("newsfragments", "changelog.d", "changes", "news")
CHANGELOG_LIMIT = 2 * 1024 * 1024  # bytes of one changelog file kept as evidence
_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*(?:[-._]?(?:a|b|rc|alpha|beta|post|dev)\.?\d*)*)$")


@dataclass
class ReleaseFacts:
    """The fields of a `ReleaseInspected` event, plus the artifacts it references."""

    fields: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)


def _pyproject(repo: Path, sha: str) -> tuple[dict[str, Any], str | None]:
    data = git.read_file_at_commit(repo, sha, "pyproject.toml")
    if data is None:
        return {}, None
    try:
        return tomllib.loads(data.decode("utf-8", "replace")), None
    except tomllib.TOMLDecodeError as error:
        return {}, f"pyproject.toml at {sha[:12]} is not valid TOML: {error}"


def _section(document: dict[str, Any], *path: str) -> dict[str, Any]:
    node: Any = document
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def version_from_tag(tag: str) -> str | None:
    """`v1.2.0` or `1.2.0` (also `release-1.2.0`, `pkg-v1.2.0`): the version it names."""
    tail = re.split(r"[-/_](?=v?\d)", tag)[-1]
    match = _VERSION.match(tail)
    return match.group(1) if match else None


def _static_version(document: dict[str, Any]) -> str | None:
    project = _section(document, "project")
    version = project.get("version")
    if isinstance(version, str) and version.strip():
        return version.strip()
    poetry = _section(document, "tool", "poetry").get("version")
    return poetry.strip() if isinstance(poetry, str) and poetry.strip() else None


def dynamic_version(document: dict[str, Any], files: set[str]) -> str:
    """How the build declares a version the tree does not name (setuptools_scm, hatch-vcs,
    flit's `__version__`, ...): the approval then takes the one head's built wheel states.
    "" when `[project]` names the version, or nothing declares one."""
    if _static_version(document):
        return ""
    build = _section(document, "build-system")
    requires = [str(r).lower() for r in build.get("requires", []) if isinstance(r, str)]
    backend = str(build.get("build-backend") or "")
    hatch = _section(document, "tool", "hatch", "version").get("source")
    pdm = _section(document, "tool", "pdm", "version").get("source")
    setuptools = _section(document, "tool", "setuptools", "dynamic").get("version")
    dynamic = _section(document, "project").get("dynamic")
    cases = (
        (bool(_section(document, "tool", "setuptools_scm"))
         or any(re.match(r"setuptools[-_]scm\b", r) for r in requires), "setuptools_scm"),
        (hatch == "vcs", "hatch-vcs"),
        (isinstance(hatch, str), f"hatch version source {hatch}"),
        (backend.startswith("flit"), "flit (the module's __version__)"),
        (isinstance(pdm, str), f"pdm version source {pdm}"),
        (isinstance(setuptools, dict), "[tool.setuptools.dynamic] version"),
        (isinstance(dynamic, list) and "version" in dynamic, "[project] dynamic"),
        (not _section(document, "project") and "setup.py" in files, "setup.py"),
    )  # fmt: skip
    return next((label for holds, label in cases if holds), "")


def _project_name(document: dict[str, Any]) -> str | None:
    for name in (_section(document, "project").get("name"),
                 _section(document, "tool", "poetry").get("name")):  # fmt: skip
        if isinstance(name, str) and name.strip():
            return name.strip()
    return None


def _changelogs(
    repo: Path, sha: str, files: set[str]
) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    wanted = {
        f"{d}{stem}{suffix}"
        for d in CHANGELOG_DIRS
        for stem in CHANGELOG_STEMS
        for suffix in CHANGELOG_SUFFIXES
    }
    found, artifacts = [], {}
    for path in sorted(f for f in files if f.lower() in wanted):
        data = git.read_file_at_commit(repo, sha, path)
        if data is None:
            continue
        kept = data[:CHANGELOG_LIMIT]
        digest = sha256_hex(kept)
        artifacts[digest] = kept
        found.append(
            {"path": path, "sha256": digest, "size": len(data), "truncated": len(data) > len(kept)}
        )
    return found, artifacts


def _fragments(document: dict[str, Any], files: set[str]) -> tuple[bool, list[str]]:
    towncrier = _section(document, "tool", "towncrier")
    configured = bool(towncrier)
    dirs: list[str] = []
    directory = towncrier.get("directory")
    if isinstance(directory, str) and directory.strip():
        dirs.append(directory.strip().strip("/"))
    package_dir = towncrier.get("package_dir")
    package = towncrier.get("package")
    if isinstance(package, str) and package:
        base = package_dir.strip("/") + "/" if isinstance(package_dir, str) and package_dir else ""
        dirs.append(f"{base}{package}/newsfragments")
    if not dirs:
        dirs = list(FRAGMENT_DIRS)
    ignored = {".gitignore", ".gitkeep", "readme", "readme.md", "readme.rst", "template.rst",
               "template.md", "_template.rst", "_template.md.jinja", ".keep"}  # fmt: skip
    fragments = sorted(
        f
        for f in files
        for d in dirs
        if str(PurePosixPath(f).parent) == d and PurePosixPath(f).name.lower() not in ignored
    )
    return configured, fragments


def _settings(document: dict[str, Any]) -> tuple[list[str] | None, list[str], list[str]]:
    section = _section(document, "tool", "release-ledger")
    problems: list[str] = []
    rollback: list[str] | None = None
    raw = section.get("rollback")
    if isinstance(raw, str) and raw.strip():
        rollback = [line for line in raw.strip().splitlines()]
    elif isinstance(raw, list) and all(isinstance(x, str) for x in raw) and raw:
        rollback = [str(x) for x in raw]
    elif raw is not None:
        problems.append("[tool.release-ledger] rollback must be a string or a list of strings")
    required: list[str] = []
    raw_required = section.get("required-checks")
    if isinstance(raw_required, list) and all(isinstance(x, str) for x in raw_required):
        required = [str(x) for x in raw_required]
    elif raw_required is not None:
        problems.append("[tool.release-ledger] required-checks must be a list of check names")
    return rollback, required, problems


def inspect_release(repo: Path, head: str, base: str, head_ref: str = "") -> ReleaseFacts:
    """Read head's (and base's) tree: never fails; what cannot be read is a `problem`."""
    document, problem = _pyproject(repo, head)
    base_document, _ = _pyproject(repo, base)
    problems = [problem] if problem else []
    tags = git.tags_at(repo, head)
    version = _static_version(document)
    source = "pyproject.toml [project] version" if version else ""
    named = [(t, version_from_tag(t)) for t in tags + ([head_ref] if head_ref else [])]
    named = [(t, v) for t, v in named if v]
    if version is None and named:
        tag_name, tag_version = named[0]
        version, source = tag_version, f"tag {tag_name}"
    tag = None
    if version is not None:
        matching = [t for t, v in named if v == version and t in tags]
        tag = matching[0] if matching else f"v{version}"
    files = git.files_at_commit(repo, head)
    changelogs, artifacts = _changelogs(repo, head, files)
    towncrier, fragments = _fragments(document, files)
    # The release's policy comes from base, the release already approved: its rollback
    # commands, and its required checks, which head may add to but not take from.
    rollback, required, settings_problems = _settings(base_document)
    _, added, head_problems = _settings(document)
    required += [check for check in added if check not in required]
    settings_problems += [p for p in head_problems if p not in settings_problems]
    base_version = _static_version(base_document)
    if base_version is None:
        base_tags = [(t, version_from_tag(t)) for t in git.tags_at(repo, base)]
        base_version = next((v for _, v in base_tags if v), None)
    return ReleaseFacts(
        fields={
            "project": _project_name(document),
            "version": version,
            "version_source": source,
            "version_dynamic": dynamic_version(document, files),
            "base_version": base_version,
            "tags_at_head": tags,
            "tag": tag,
            "changelog_files": changelogs,
            "towncrier": towncrier,
            "fragments": fragments,
            "rollback": rollback,
            "required_checks": required,
            "problems": problems + settings_problems,
        },
        artifacts=artifacts,
    )
