"""Errors the domain raises; the command line turns `BadInput` into exit code 2."""

from __future__ import annotations


class BadInput(Exception):
    """Input that the user must correct: one readable sentence, never a traceback."""


class IntegrityProblem(Exception):
    """The ledger's stored history does not match its hash chain."""
