"""A real OpenSSH server on 127.0.0.1 for tests, as the current user (root or not).

    server = start_sshd(tmp_path)          # skips the test when /usr/sbin/sshd is absent
    build_ssh_executor(host=server.host, port=server.port, identity=server.identity,
                       ssh_options=server.client_options, ...)
    server.stop()

Throwaway host and user keys, config, pid file, authorized keys and known hosts all live in
the given directory; nothing in ~/.ssh or /etc/ssh is read or written. Each server's sessions
have a `TMPDIR` of their own there (`server.tmp`), so what a test's shards leave on the "host"
is told apart from what another test running at the same time leaves. Debian's package is
`openssh-server`; as root sshd also needs its privilege-separation directory `/run/sshd`,
created here when missing.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")


def free_port() -> int:
    """A port nobody listens on right now (the kernel's choice, released at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path) -> Path:
    """A passphrase-less ed25519 key pair at `path` and `path.pub`."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "release-ledger", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


@dataclass
class SshServer:
    """A running sshd and what a client needs to reach it."""

    directory: Path
    port: int
    user: str
    identity: Path  # authorised
    wrong_identity: Path  # a valid key the server does not know
    config: Path
    log: Path
    tmp: Path  # the sessions' TMPDIR: the shards' temporary folders are made here
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return f"{self.user}@127.0.0.1"

    def temporaries(self) -> set[Path]:
        """The shards' temporary folders on this "host" now (in its sessions' TMPDIR)."""
        return set(self.tmp.glob("release-ledger.*"))

    @property
    def client_options(self) -> tuple[str, ...]:
        """Trust exactly the throwaway host key; ignore the machine's known hosts."""
        return (
            f"UserKnownHostsFile={self.directory / 'known_hosts'}",
            "GlobalKnownHostsFile=/dev/null",
            "StrictHostKeyChecking=yes",
        )

    def start(self) -> None:
        log = self.log.open("ab")
        self.process = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited at start: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    if sock.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not listen on {self.port}: {self.log.read_text()[-2000:]}")

    def probe(self) -> None:
        """Log in once with the authorised key, so a broken setup fails with its reason."""
        options = [arg for option in self.client_options for arg in ("-o", option)]
        done = subprocess.run(
            ["ssh", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", *options,
             "-i", str(self.identity), "-p", str(self.port), self.host, "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(
                f"cannot log in to the test sshd as {self.user}: {done.stderr.strip()[-500:]}; "
                f"sshd log: {self.log.read_text()[-1500:]}"
            )

    def stop(self) -> None:
        """Stop the listener and every connection it serves (sessions see end-of-file)."""
        self.kill(sessions=False)

    def kill(self, *, sessions: bool) -> None:
        """SIGKILL the listener and its per-connection sshd processes.

        With `sessions=True` the users' commands (shells, tests) are killed too, as when the
        host itself goes down: nothing on the host can then clean up after them.
        """
        if self.process is None:
            return
        victims = [self.process.pid, *_descendants(self.process.pid)]
        for pid in victims:
            if sessions or _command_name(pid) == "sshd":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None


def _host_settings(env: dict[str, str]) -> list[str]:
    """The machine's own TLS trust settings, as a build host's login environment has them,
    and `env` (a host's own home or installers' caches, as its login would set them).

    The login session sshd starts has none of this process's environment; where this machine
    reaches package registries through its own certificate authority, a host set up on it
    would carry the same settings (here: `SetEnv`), or installing an environment fails.
    """
    names = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "PIP_CERT")
    pairs = [f"{name}={os.environ[name]}" for name in names if os.environ.get(name)]
    pairs += [f"{name}={value}" for name, value in env.items()]
    return [f"SetEnv {' '.join(pairs)}"] if pairs else []  # one line: sshd keeps the first


def start_sshd(directory: Path, env: dict[str, str] | None = None) -> SshServer:
    """Generate keys and a config in `directory` and start sshd on a free port; `env`: set in
    every session (values without spaces), beside a `TMPDIR` of the server's own."""
    if not SSHD.exists():
        pytest.skip("OpenSSH server not installed (/usr/sbin/sshd); apt-get install openssh-server")
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and not PRIVSEP_DIR.is_dir():
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    host_key = keygen(directory / "host_key")
    identity = keygen(directory / "user_key")
    wrong = keygen(directory / "wrong_key")
    authorized = directory / "authorized_keys"
    authorized.write_text(identity.with_suffix(".pub").read_text())
    authorized.chmod(0o600)
    tmp = directory / "host-tmp"
    tmp.mkdir(exist_ok=True)
    port = free_port()
    user = getpass.getuser()
    host_pub = host_key.with_suffix(".pub").read_text().split()
    (directory / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    config = directory / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {directory / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}",
                f"AllowUsers {user}",
                "AuthenticationMethods publickey",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "UsePAM no",
                "PrintMotd no",
                "MaxStartups 64",
                "MaxSessions 64",
                "LogLevel VERBOSE",
                *_host_settings({"TMPDIR": str(tmp), **(env or {})}),
                "",
            ]
        )
    )
    server = SshServer(
        directory=directory,
        port=port,
        user=user,
        identity=identity,
        wrong_identity=wrong,
        config=config,
        log=directory / "sshd.log",
        tmp=tmp,
    )
    server.start()
    server.probe()
    return server


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
