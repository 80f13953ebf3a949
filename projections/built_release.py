"""The release as its build declares it: a version head's tree does not name (setuptools_scm,
hatch-vcs, flit's `__version__`, `dynamic = ["version"]`) and no tag at head names either is the
version head's built wheel states in its metadata; base's likewise from base's wheel.

Pure: `ReleaseInspected` (read from git at gate start) with the `DistributionsBuilt` events the
gate records once the tests are done. The approval report reads the release through this
from report format 6 on (`projections.approval.TAKES_THE_BUILT_VERSION`); issued reports of
earlier formats keep theirs.
"""

from __future__ import annotations

from collections.abc import Iterable

from release_ledger.domain import events as ev


def built_version(facts: Iterable[tuple[int, ev.Event]], revision: str) -> tuple[str, str] | None:
    """(version, file name) of the revision's last built wheel (its sdist without one)."""
    built = [
        e for _, e in facts
        if isinstance(e, ev.DistributionsBuilt) and e.revision == revision and e.status == "built"
    ]  # fmt: skip
    if not built:
        return None
    found = built[-1]
    files = sorted(found.files, key=lambda f: f.type != "wheel")  # the wheel first
    return next(((f.version, f.filename) for f in files if f.version), None)


def as_built(
    release: ev.ReleaseInspected | None, facts: Iterable[tuple[int, ev.Event]]
) -> ev.ReleaseInspected | None:
    """`release` with the versions its tree left unknown taken from the built files."""
    if release is None:
        return None
    facts = list(facts)
    updates: dict[str, object] = {}
    head = built_version(facts, "head") if not release.version else None
    if head is not None:
        version, filename = head
        how = f", {release.version_dynamic}" if release.version_dynamic else ""
        named = [t for t in release.tags_at_head if t in (version, f"v{version}")]
        updates.update(
            version=version,
            version_source=f"head's built {filename} (its metadata Version{how})",
            tag=named[0] if named else f"v{version}",
        )
    base = built_version(facts, "base") if not release.base_version else None
    if base is not None:
        updates["base_version"] = base[0]
    return release.model_copy(update=updates) if updates else release
