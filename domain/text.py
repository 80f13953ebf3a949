"""Text from the suite is data, never markup: escapes for each medium it is shown in.

File names, test ids, messages and owner input can hold anything Unicode allows: newlines
that would forge lines, control characters that drive terminals, `|` that splits a Markdown
table, `[` that starts a link (or rich markup), backticks, HTML. Every renderer passes such
text through the escape for its medium, so nothing a test suite names changes the shape of
what is shown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# `scheme://user:password@`: the password runs to the last `@` of the word (a malformed URL's
# included: `postgresql://u:p@ss@host`).
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s'\"]*):[^\s'\"]*@")


def masked(text: str) -> str:
    """`text` with every URL's password shown as `***` (`postgresql://gate:***@db/ledger`):
    what a message quotes of a URL the user gave never shows its secret."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group('head')}:***@", text)


def _visible(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def one_line(text: str) -> str:
    """`text` on one line: every control, format or separator character shown as an escape
    (`\\n`, `\\x1b`, `\\u202e`), so it can neither break a line nor drive a terminal."""
    if text.isprintable():  # the usual case (spaces are printable, other whitespace is not)
        return text
    # Not printable: controls, format characters (bidi overrides, zero-width), separators
    # other than the space (line and paragraph separators), surrogates, private, unassigned.
    return "".join(c if c.isprintable() else _visible(c) for c in text)


# Markdown (CommonMark, GFM tables and strikethrough) punctuation that can start markup inside
# a line (`>` quotes only at a line start, where no name is put); `_` only where it could
# open or close emphasis (never inside a word: `test_a_b` stays as it is).
_MD_SPECIAL = re.compile(r"[\\`*\[\]<|~&]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def markdown_text(text: str) -> str:
    """Plain text for one line of Markdown (a paragraph, a list item or a table cell)."""
    return _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), one_line(text))


def markdown_code(text: str) -> str:
    """`text` as a Markdown code span, whatever backticks it holds (never in a table cell)."""
    shown = one_line(text)
    runs = [len(r) for r in re.findall(r"`+", shown)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if not shown.strip(" ") or shown[0] == "`" or shown[-1] == "`" else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def some(items: Sequence[str], limit: int = 3) -> str:
    """The first `limit` items and how many more: `a, b, c and 4 more`."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
