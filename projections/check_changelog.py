"""The `changelog` check: head's changelog names the release's version, or towncrier
fragments are left for it to be written from."""

from __future__ import annotations

import re

from release_ledger.domain.text import some
from release_ledger.projections.check_model import Evidence, Metric

CHANGELOG = "changelog"


def names_version(text: str, version: str) -> bool:
    """Does the text name this exact version (`1.2.0`, `v1.2.0`; not `1.2.0rc1` or `11.2.0`)?"""
    pattern = r"(?<![0-9A-Za-z.])v?" + re.escape(version) + r"(?![0-9A-Za-z]|\.[0-9]|-[0-9A-Za-z])"
    return re.search(pattern, text) is not None


def changelog_check(evidence: Evidence) -> Metric:
    """A changelog file at head names the version being released (towncrier fragments left
    unbuilt mean it was not compiled)."""
    r = evidence.release
    if r is None:
        why = "no ReleaseInspected event: head's tree was never read for this run"
        return Metric(CHANGELOG, "not inspected", "unmeasured", (), why)
    if not r.version:
        why = "head's version could not be read (no [project] version, no version tag)"
        return Metric(CHANGELOG, "version unknown", "unmeasured", evidence.release_events(), why)
    version = r.version
    named, unread = [], []
    for f in r.changelog_files:
        data = evidence.artifacts.get(f.sha256)
        if data is None:
            unread.append(f.path)
        elif names_version(data.decode("utf-8", "replace"), version):
            named.append(f.path)
    paths = [f.path for f in r.changelog_files]
    fragments = list(r.fragments)
    left = f"{len(fragments)} towncrier fragments not built ({some(fragments)})"
    if named:
        value = f"{named[0]} names {version}"
        why = f"{', '.join(named)} at head name {version}"
        if fragments:
            value += f"; {left}"
            why += f"; {left}, for a later release"
        return Metric(CHANGELOG, value, "pass", evidence.release_events(named[0]), why)
    if unread:
        why = f"{', '.join(unread)} missing from the ledger's artifacts"
        return Metric(CHANGELOG, "unreadable", "unmeasured", evidence.release_events(), why)
    if fragments:
        value = f"{version} not in {', '.join(paths) or 'any changelog'}; {left}"
        why = f"run `towncrier build --version {version}` and commit before tagging"
        return Metric(CHANGELOG, value, "fail", evidence.release_events(), why)
    if paths:
        value = f"{', '.join(paths)} do not name {version}"
        why = f"no changelog file at head mentions {version}"
        return Metric(CHANGELOG, value, "fail", evidence.release_events(), why)
    why = (
        "no changelog at head (CHANGES, CHANGELOG, HISTORY or NEWS, with .md, .rst or .txt) "
        "and no towncrier fragments"
    )
    return Metric(CHANGELOG, "no changelog file", "unmeasured", evidence.release_events(), why)
