"""Options every subcommand shares (`--ledger`, `--json`) and the error boundary.

Each subcommand takes `--ledger URL` and `--json` itself, so they can be written after the
subcommand name as users expect (`ledger runs --json`).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from release_ledger.ledger import outputs
from release_ledger.ledger.vocabulary import (
    BadInput,
    IntegrityProblem,
    LeaseHeld,
    LeaseLost,
    StoreBusy,
    masked,
)

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNMEASURED = 3

# The largest --limit / --offset: SQLite's integers end at 2**63 - 1, and no ledger holds more.
MAX_PAGE = 2**62
PAGE = click.IntRange(min=0, max=MAX_PAGE)  # the type of --limit and --offset


# How a command declares an option: `click.option`, or an option group's `option` (as
# `ledger gate --help` lists its options in groups).
Declare = Callable[..., Callable[[F], F]]


def ledger_option(f: F, option: Declare[F] = click.option) -> F:
    return option(
        "--ledger",
        "ledger_url",
        envvar="LEDGER_URL",
        default=None,
        metavar="URL",
        help="sqlite:///path/ledger.db (default ./.ledger/ledger.db) or postgresql://...; "
        "also LEDGER_URL.",
    )(f)


def json_option(f: F, option: Declare[F] = click.option) -> F:
    return option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")(f)


def common(f: F) -> F:
    """`--ledger` and `--json`, plus turning `BadInput` into one line and exit code 2, and a
    broken run (its chain or an event fails the check every read makes) into one line and
    exit code 1: nothing is concluded from it, nothing appended to it."""
    return ledger_option(json_option(_one_line_errors(f)))


def common_in(option: Declare[F]) -> Callable[[F], F]:
    """`common`, with `--ledger` and `--json` declared by `option` (an option group's)."""
    return lambda f: ledger_option(json_option(_one_line_errors(f), option), option)


def _one_line_errors(f: F) -> F:
    """`f`, with the errors a command answers in one line turned into that line and its
    exit code."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except BadInput as error:
            fail(str(error))
        except IntegrityProblem as error:
            fail(str(error), EXIT_FAILED)
        except (LeaseHeld, LeaseLost, StoreBusy) as error:
            fail(str(error))

    return wrapper  # type: ignore[return-value]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Print one line on stderr and exit; used for every bad-input path."""
    line = masked(" ".join(str(message).split()))
    click.echo(f"ledger: error: {line}", err=True)
    sys.exit(code)


def emit_json(document: Any) -> None:
    click.echo(json.dumps(document, sort_keys=True, indent=2, default=str))


class OutFile:
    """An `--out FILE`, checked before anything is appended (a device, a folder or an
    unwritable place is bad input, exit 2, with nothing recorded), then written whole once
    the command has its result: a temporary file renamed over it, so a full disk leaves
    it as it was (one line, exit 2), never half written."""

    def __init__(self, out: str | None) -> None:
        self.out = out
        self.target = outputs.writable_target(out, "--out") if out else None

    def __enter__(self) -> OutFile:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        return None

    def write(self, text: str) -> None:
        if self.target is not None:
            outputs.write_whole(self.target, text.encode("utf-8"), "--out")
