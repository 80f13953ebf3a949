"""Versions that remembered or cached conclusions depend on, in a module that imports nothing:
the run list checks a remembered verdict status against them without loading the reader."""

from __future__ import annotations

# The version of the reading of an attempt (the JUnit reader and `domain.assessment`): bump it
# when the same report could read differently, so that results cached by content under the old
# reading are never reused (`domain.content.result_key` takes it).
READER_VERSION = 1
