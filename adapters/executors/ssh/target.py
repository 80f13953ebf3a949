"""Where and how to reach the build host: validated once, then turned into ssh argument lists.

Everything a user types (host, mirror path, options) is checked up front with a one-line
`BadInput`, so nothing unsafe ever reaches a remote shell; remote arguments are still quoted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from release_ledger.domain.errors import BadInput

REMOTE_PYTHON = "python3"  # the build host's interpreter; `python3.12` in a matrix lane

_USER = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}"
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?"
_HOST_RE = re.compile(rf"(?:{_USER}@)?{_HOST}")
_MIRROR_RE = re.compile(r"(?:/|~/)[A-Za-z0-9._+@%=,:/~-]*")
_OPTION_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*=[^\n\r\0]*")
_PATH_RE = re.compile(r"/[^:\s'\"\\]*(?::/[^:\s'\"\\]*)*")

# Keep-alives make a silently dead connection an ssh error instead of an endless wait.
_ALWAYS = ("BatchMode=yes", "ServerAliveInterval=15", "ServerAliveCountMax=4")


@dataclass(frozen=True)
class SshTarget:
    """A validated build host and the options every connection to it uses."""

    host: str
    mirror: str
    port: int | None
    identity: Path | None
    options: tuple[str, ...]
    remote_python: str
    remote_path: str
    connect_timeout: int

    def ssh_options(self) -> list[str]:
        """The ssh arguments before the destination, the same for commands and `git push`."""
        args = ["-T", "-x", "-a"]
        for option in (*_ALWAYS, f"ConnectTimeout={self.connect_timeout}", *self.options):
            args += ["-o", option]
        if self.port is not None:
            args += ["-p", str(self.port)]
        if self.identity is not None:
            args += ["-i", str(self.identity), "-o", "IdentitiesOnly=yes"]
        return args

    def ssh_argv(self, remote_command: str) -> list[str]:
        """`ssh ... -- host COMMAND`; the command string is read by the remote login shell."""
        return ["ssh", *self.ssh_options(), "--", self.host, remote_command]

    def git_ssh_command(self) -> str:
        """`GIT_SSH_COMMAND` for `git push`: git runs it through a shell, so quote everything."""
        return shlex.join(["ssh", *self.ssh_options()])


def validate_target(
    *,
    host: str,
    remote_mirror: str,
    port: int | None,
    identity: Path | None,
    ssh_options: Sequence[str],
    remote_python: str,
    remote_path: str,
    connect_timeout: int,
) -> SshTarget:
    """Check every setting and return the target, or raise `BadInput` naming the first problem."""
    if not isinstance(host, str) or not _HOST_RE.fullmatch(host):
        raise BadInput(
            f"bad ssh host {host!r}: expected [user@]host of letters, digits, '.', '-', '_'"
        )
    check_mirror(remote_mirror)
    if port is not None and not (isinstance(port, int) and 1 <= port <= 65535):
        raise BadInput(f"bad ssh port {port!r}: expected 1-65535")
    if identity is not None and not Path(identity).is_file():
        raise BadInput(f"ssh identity file {str(identity)!r} does not exist")
    for option in ssh_options:
        if not _OPTION_RE.fullmatch(option):
            raise BadInput(f"bad ssh option {option!r}: expected Key=Value")
    if not remote_python or any(c in remote_python for c in "\n\r\0"):
        raise BadInput(f"bad remote python {remote_python!r}")
    if not _PATH_RE.fullmatch(remote_path):
        raise BadInput(f"bad remote PATH {remote_path!r}: expected absolute directories and ':'")
    if not (isinstance(connect_timeout, int) and 1 <= connect_timeout <= 3600):
        raise BadInput(f"bad ssh connect timeout {connect_timeout!r}: expected 1-3600 seconds")
    return SshTarget(
        host=host,
        mirror=remote_mirror,
        port=port,
        identity=Path(identity) if identity is not None else None,
        options=tuple(ssh_options),
        remote_python=remote_python,
        remote_path=remote_path,
        connect_timeout=connect_timeout,
    )


def check_mirror(path: str) -> None:
    """An absolute or `~/` path of plain characters, never climbing out with `..`."""
    parts = path.split("/") if isinstance(path, str) else []
    if (
        not isinstance(path, str)
        or not _MIRROR_RE.fullmatch(path)
        or ".." in parts
        or path.rstrip("/") in ("", "~")
        or "~" in path[1:]
    ):
        raise BadInput(f"bad remote mirror {path!r}: expected an absolute or ~/ path without '..'")
