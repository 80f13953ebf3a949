"""`--code LABEL=CHECKOUT`, shared by the benches that measure revisions of the tool side by
side (`cores.py`, `first_gate.py`): each gate row runs `python -m release_ledger` from that
checkout, so its release_ledger is the one imported."""

from __future__ import annotations

import argparse
from pathlib import Path


def tool_checkouts(parser: argparse.ArgumentParser, values: list[str]) -> list[tuple[str, Path]]:
    """(label, checkout) for each `LABEL=CHECKOUT`; one that is not such a pair, or names no
    folder, stops the bench with the parser's one-line error."""
    found: list[tuple[str, Path]] = []
    for value in values:
        label, sep, path = value.partition("=")
        checkout = Path(path).resolve()
        if not sep or not label or not checkout.is_dir():
            parser.error(f"--code {value!r}: expected LABEL=CHECKOUT, a folder")
        found.append((label, checkout))
    return found
