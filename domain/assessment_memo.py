"""Assessments kept by content: what a fold may take instead of reading a report again."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from release_ledger.domain.assessment import ASSESSMENT_FORMAT, Assessment
from release_ledger.domain.versions import READER_VERSION


class AssessmentMemo:
    """Assessments of stored reports by `content_key`: those a caller kept from an earlier
    fold (the read models keep them, so a rebuild need not read every report again), and
    those this fold had to make, with their report's hash, for the caller to keep. A key
    covers every fact the assessment is a function of and the `READER_VERSION`, so a kept
    assessment is the one reading the report again would give, until the reader changes."""

    __slots__ = ("known", "made")

    def __init__(self, known: Mapping[str, Assessment] | None = None) -> None:
        self.known: dict[str, Assessment] = dict(known or {})
        self.made: dict[str, tuple[str, Assessment]] = {}


def content_key(facts: tuple[object, ...]) -> str:
    """The key of an assessment's facts (str, int, bool, None and tuples of str: `repr` is
    exact and stable for them) under this reader version and stored form."""
    return hashlib.sha256(repr((READER_VERSION, ASSESSMENT_FORMAT, *facts)).encode()).hexdigest()
