"""Failures grouped by cause: 40 tests broken by one `ImportError` read as one problem.

A failure's signature is its exception type and the innermost frame of the traceback that is
neither the standard library nor the test runner's own (a path under the checkout as pytest
prints it, or a package path below `site-packages/`), as LUCI's reason clustering groups by a
normalised reason. Without a frame (another runner, a one-line message) the signature is the
type and the message's first line with numbers, addresses and temporary paths masked, so that
`took 3.2 s` and `took 4.1 s` fall together. Pure: it reads the reports' text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# `src/pkg/h.py:2: ValueError` (pytest's long traceback) or `tests/t.py:2: in <module>`
# (a collection error's short one); Windows drive letters allowed.
_FRAME = re.compile(r"^\s*((?:[A-Za-z]:)?[^\s:<>][^:<>]*?\.pyw?):(\d+):(?: (in \S.*|[\w.]+))?\s*$")
# `E   ModuleNotFoundError: No module named 'x'` and the message `ValueError: bad value 3`.
_RAISED = re.compile(
    r"^(?:E\s+)?((?:[A-Za-z_][\w.]*)?"
    r"(?:Error|Exception|Exit|Failed|Interrupt|Warning|Failure|Timeout|Fault|Iteration))\b"
)
_LOCATED = re.compile(r"^[\w.]+$")
_RUNNER = ("/_pytest/", "/pluggy/", "/pytest.py", "/unittest/", "<frozen ")
_STDLIB = re.compile(r"/lib/python\d+\.\d+/(?!site-packages/|dist-packages/)")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_TEMP = re.compile(r"(/tmp|/var/folders|/private/var)/\S+")
_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:\.\d+)?")
_WIDTH = 120


@dataclass(frozen=True)
class Cluster:
    """One cause: its signature and the tests it broke (sorted)."""

    signature: str
    tests: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {"signature": self.signature, "tests": list(self.tests)}


def mask(text: str) -> str:
    """Numbers, addresses and temporary paths replaced, so instances of one message match."""
    text = _ADDRESS.sub("<addr>", text)
    text = _TEMP.sub("<tmp>", text)
    return _NUMBER.sub("<n>", text)


def _frame(line: str) -> tuple[str, str, str] | None:
    """(path as shown, line number, the text after it) of a traceback location line."""
    found = _FRAME.match(line)
    if found is None:
        return None
    path, number, tail = found.group(1), found.group(2), found.group(3) or ""
    if any(part in path for part in _RUNNER) or _STDLIB.search(path):
        return None
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        if path.startswith("/"):
            return None  # outside the checkout and not an installed package: not the project's
    return path, number, tail


def signature(message: str | None, text: str | None, outcome: str = "failed") -> str:
    """The cause of one failure, as one line (`ImportError in src/pkg/native.py:2`)."""
    lines = (text or "").splitlines()
    kind = ""
    frame: tuple[str, str, str] | None = None
    for line in lines:
        located = _frame(line)
        if located is not None:
            frame = located
            if _LOCATED.match(located[2]) and not located[2].startswith("in"):
                kind = located[2]  # pytest names the exception after the innermost frame
        raised = _RAISED.match(line.strip()) if line.startswith("E ") else None
        if raised:
            kind = raised.group(1)
    first = (message or "").strip().splitlines()[0] if (message or "").strip() else ""
    if not kind:
        from_message = _RAISED.match(first)
        kind = from_message.group(1) if from_message else ""
    if frame is not None:
        return f"{kind or outcome} in {frame[0]}:{frame[1]}"
    reason = mask(first)[:_WIDTH] if first else outcome
    return reason if kind and reason.startswith(kind) else f"{kind}: {reason}" if kind else reason


def cluster(
    failures: Mapping[str, tuple[str | None, str | None, str]], tests: Iterable[str]
) -> tuple[Cluster, ...]:
    """The `tests` grouped by their failure's signature (`failures`: test -> message, text,
    outcome), the largest cause first, then by signature: one stable order for every output."""
    groups: dict[str, set[str]] = {}
    for test in tests:
        message, text, outcome = failures.get(test, (None, None, "failed"))
        groups.setdefault(signature(message, text, outcome), set()).add(test)
    return _ordered(groups)


def merged(clusters: Iterable[Cluster]) -> tuple[Cluster, ...]:
    """Clusters of several verdicts (an interpreter matrix) as one list: one cause once."""
    groups: dict[str, set[str]] = {}
    for one in clusters:
        groups.setdefault(one.signature, set()).update(one.tests)
    return _ordered(groups)


def _ordered(groups: Mapping[str, set[str]]) -> tuple[Cluster, ...]:
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return tuple(Cluster(sig, tuple(sorted(members))) for sig, members in ordered)


def headline(clusters: tuple[Cluster, ...]) -> str:
    """`1 cause, 37 tests: ImportError in src/jinja2/nativetypes.py:2` (the largest named)."""
    if not clusters:
        return ""
    total = sum(len(c.tests) for c in clusters)
    causes = f"{len(clusters)} cause{'s' if len(clusters) != 1 else ''}"
    return f"{causes}, {total} test{'s' if total != 1 else ''}: {clusters[0].signature}"
