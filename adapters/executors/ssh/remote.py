"""The shell scripts sent to the build host and the parsing of what comes back.

Scripts are constant text; every variable part travels as a positional argument through
`shlex.quote`, so nothing from a shard (file names, commands) is ever parsed by a shell.
Each script prints `release-ledger-started` first: from then on the session exists.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from release_ledger.adapters.executors.programs import remote_program

STARTED = b"release-ledger-started"
TMP_PREFIX = b"release-ledger-tmp "
FRAME_PREFIX = b"release-ledger-frame "
TMP_MARK = "@RELEASE_LEDGER_TMP@"  # replaced on the host by the shard's temporary directory
# A shard's folder on the host: `release-ledger.XXXXXX` in the host's `$TMPDIR` (else /tmp),
# an absolute path without `.` or `..` parts (`temporary_dir` reads nothing else back; the
# cleanup passes it as one argument, whatever its characters).
TMP_RE = re.compile(r"(?:/(?!\.\.?(?:/|$))[^/\x00\n]+)*/release-ledger\.[A-Za-z0-9]{6,}")

# Exit codes of the run script before the wrapper takes over.
EXIT_MKTEMP = 90
EXIT_CLONE = 91
EXIT_CHECKOUT = 92
EXIT_NOT_BARE = 93

_PRELUDE = r"""
PATH=$1; export PATH
m=$2
case $m in "~/"*) m=$HOME/${m#"~/"};; esac
t=${TMPDIR:-/tmp}
case $t in /*) t=${t%/};; *) t=/tmp;; esac
printf 'release-ledger-started\n'
"""

# Args: PATH MIRROR SHA... ; prints the mirror's absolute path, then one line per commit:
# `have SHA` (ref pinned), `object SHA` (object there, ref missing; now pinned), `missing SHA`.
MIRROR_SCRIPT = (
    _PRELUDE
    + r"""
shift 2
if [ ! -e "$m" ]; then
  mkdir -p "$m" && git init -q --bare "$m" </dev/null >&2 || exit 1
fi
bare=$(git -C "$m" rev-parse --is-bare-repository 2>/dev/null </dev/null)
[ "$bare" = true ] || exit 93
printf 'mirror %s\n' "$(cd "$m" && pwd -P)"
for sha in "$@"; do
  ref=refs/release-ledger/gate/$sha
  if git -C "$m" show-ref --verify -q "$ref" </dev/null; then
    printf 'have %s\n' "$sha"
  elif git -C "$m" cat-file -e "$sha^{commit}" 2>/dev/null </dev/null; then
    git -C "$m" update-ref "$ref" "$sha" </dev/null >&2 || exit 1
    printf 'object %s\n' "$sha"
  else
    printf 'missing %s\n' "$sha"
  fi
done
"""
)

# Args: PATH MIRROR SHA PYTHON SPEC_JSON PROGRAM ARGV...
RUN_SCRIPT = (
    _PRELUDE
    + r"""
sha=$3; py=$4; spec=$5; wrapper=$6
shift 6
umask 077
d=$(mktemp -d "$t/release-ledger.XXXXXX") || exit 90
trap 'rm -rf "$d"' EXIT
trap 'exit 129' HUP INT TERM PIPE
printf 'release-ledger-tmp %s\n' "$d"
# Objects copied, no origin: nothing in the checkout leads back into the host's mirror.
git clone -q --no-hardlinks --no-checkout "$m" "$d/w" </dev/null >&2 || exit 91
git -C "$d/w" remote remove origin </dev/null >&2 || exit 91
git -C "$d/w" -c advice.detachedHead=false checkout -q --detach "$sha" </dev/null >&2 || exit 92
[ "$(git -C "$d/w" rev-parse HEAD </dev/null)" = "$sha" ] || exit 92
"$py" -c "$wrapper" "$d" "$spec" "$m" "$@"
"""
)

# Args: PATH IGNORED DIR... ; removes temporaries a dropped connection left behind.
CLEANUP_SCRIPT = (
    _PRELUDE
    + r"""
shift 2
for d in "$@"; do
  case $d in "$t"/release-ledger.*) rm -rf -- "$d";; esac
done
"""
)

WRAPPER_SOURCE = remote_program("ssh/wrapper.py")


def remote_command(script: str, *args: str) -> str:
    """One command line for the remote login shell: `/bin/sh -c SCRIPT release-ledger ARGS`."""
    return shlex.join(["exec", "/bin/sh", "-c", script, "release-ledger", *args])


@dataclass(frozen=True)
class Frame:
    """The wrapper's answer, its sizes and hashes verified."""

    exit_code: int | None
    signal: int | None
    timed_out: bool
    oom: bool
    rss_kb: int
    seconds: float
    report: bytes | None
    log_tail: bytes
    environment: dict[str, Any] | None = None
    sandbox: str = ""  # how the host confined the suite (bwrap, none)
    modified_files: tuple[str, ...] = ()  # tracked files the tests changed in their checkout
    collect_error: str | None = None  # a collect-only run's: why it found nothing to trust


class FrameError(Exception):
    """The answer is missing, cut short (`complete=False`) or does not match its hashes."""

    def __init__(self, message: str, *, complete: bool) -> None:
        super().__init__(message)
        self.complete = complete


def session_started(stdout: bytes) -> bool:
    return _line_with(stdout, STARTED) is not None


def temporary_dir(stdout: bytes) -> str | None:
    """The host's temporary directory for this shard, if the script got that far."""
    start = _line_with(stdout, TMP_PREFIX)
    if start is None:
        return None
    end = stdout.find(b"\n", start)
    value = stdout[start + len(TMP_PREFIX) : end].decode("utf-8", "replace")
    return value if TMP_RE.fullmatch(value) else None


def parse_frame(stdout: bytes) -> Frame:
    """Find the header line and check the bytes after it against the sizes and sha256s."""
    start = _line_with(stdout, FRAME_PREFIX)
    if start is None:
        raise FrameError("no answer from the host", complete=False)
    end = stdout.find(b"\n", start)
    if end < 0:
        raise FrameError("the answer's header was cut short", complete=False)
    try:
        header = json.loads(stdout[start + len(FRAME_PREFIX) : end])
        report_size = int(header["report_size"])
        log_size = int(header["log_size"])
    except (ValueError, KeyError, TypeError) as error:
        raise FrameError(f"unreadable answer header: {error}", complete=True) from error
    body = stdout[end + 1 :]
    expected = max(report_size, 0) + log_size
    if len(body) < expected:
        raise FrameError(
            f"the answer was cut short ({len(body)} of {expected} bytes)", complete=False
        )
    report = body[:report_size] if report_size >= 0 else None
    log_tail = body[max(report_size, 0) : expected]
    if hashlib.sha256(report or b"").hexdigest() != header["report_sha256"]:
        raise FrameError("the report's sha256 does not match", complete=True)
    if hashlib.sha256(log_tail).hexdigest() != header["log_sha256"]:
        raise FrameError("the log tail's sha256 does not match", complete=True)
    return Frame(
        exit_code=header["exit_code"],
        signal=header["signal"],
        timed_out=bool(header["timed_out"]),
        oom=bool(header.get("oom", False)),
        rss_kb=int(header["rss_kb"]),
        seconds=float(header["seconds"]),
        report=report,
        log_tail=log_tail,
        environment=header.get("environment"),
        sandbox=str(header.get("sandbox", "")),
        modified_files=tuple(str(f) for f in header.get("modified_files") or ()),
        collect_error=None if header.get("collect_error") is None else str(header["collect_error"]),
    )


def _line_with(stdout: bytes, prefix: bytes) -> int | None:
    """Offset of the first line starting with `prefix` (login shells may print banners first)."""
    if stdout.startswith(prefix):
        return 0
    found = stdout.find(b"\n" + prefix)
    return None if found < 0 else found + 1
