"""The suite is untrusted code: each shard runs inside a bubblewrap sandbox where it can.

bubblewrap (`bwrap`, Flatpak's sandbox; Debian's `bubblewrap`) gives the shard its own mount,
PID and IPC namespaces:

- the whole file system read-only (`--ro-bind / /`), with a private `/tmp`, a private empty
  home, and the gate's secrets out of sight: the user's repository, the ledger's folder, the
  gate's scratch (other attempts' checkouts) and the home directory are covered by empty
  tmpfs mounts;
- what the tests need read back in, read-only: the revision's environment (its venv and the
  interpreter it was made from) and the gate's pytest plugin;
- writable: the attempt's own folder (its checkout and report) and nothing else;
- its own PID namespace, whose first process is bwrap's: whatever the suite leaves behind
  (a double fork, `setsid`, an emptied environment) dies with the shard, and `--die-with-parent`
  ends it all if the gate itself dies.

Run by a root gate (most CI containers), bwrap also makes a user namespace in which the
shard is an unprivileged user (`nobody`'s uid, mapped to the gate's own outside: files keep
their owners) with no capability at all (`--cap-drop ALL`): it cannot remount `/`, unmount
its tmpfs covers or read past them; nor (`--disable-userns`, bwrap 0.8 and later) make a user
namespace of its own, in which it would be root over mounts of its making. `--new-session`:
no terminal to push keystrokes into.

Stdlib-only and importing nothing of ours, like the supervisor: the same wrapper can be sent
to an SSH build host. Where bwrap is missing or cannot make its namespaces, a gate running as
root runs each attempt as a user of its own (`sandbox: uid`: a fresh uid and gid from
`LEDGER_SANDBOX_UIDS`, no account, no groups): its attempt folder is given to that user, and
what other users may not read (a private home, the ledger's key, a 0700 scratch, another
attempt's folder, the gate's environment in /proc) stays out of its reach; this needs a test
command, interpreter and environment that other users can run (one under root's private home
cannot be). An environment build's steps run the same way (`as_build_user`: a user of the
build's own, given its folders for each step and taking nothing back with it). Where neither
can be had (or the gate is told `LEDGER_SANDBOX=none`) the shard
runs unsandboxed and the attempt says so (`sandbox: none`); the shard's tag and session then
still find what it left behind. `LEDGER_SANDBOX=bwrap` or `=uid` insists on that sandbox: where
it cannot apply the gate stops (`Unavailable`, exit 2) instead of running the suite without.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence

BWRAP = "bwrap"
UID = "uid"
NONE = "none"
AUTO = "auto"
PROBE_TIMEOUT_S = 20.0
# `LEDGER_SANDBOX=none` in the gate's environment runs suites unconfined (a suite that needs
# the home directory or the repository); every attempt then records `sandbox: none`.
# `bwrap` and `uid` insist on that sandbox; `auto` (the default) takes the best one here.
SETTING = "LEDGER_SANDBOX"
MODES = (AUTO, BWRAP, UID, NONE)
# `sandbox: uid` gives each attempt a uid (and gid) of its own, drawn from this range: no
# account has them, so nothing on the machine is theirs but what the attempt is given.
UIDS_SETTING = "LEDGER_SANDBOX_UIDS"
DEFAULT_UIDS = (0x6F000000, 0x6FFFFFFE)
_taken: set[int] = set()
_taken_lock = threading.Lock()


class Unavailable(Exception):
    """The sandbox `LEDGER_SANDBOX` insists on cannot apply here: the gate stops (exit 2)
    rather than run the suite with less than it was told."""


def setting() -> str:
    """`LEDGER_SANDBOX` (`auto` when unset); an unknown value is `Unavailable`."""
    value = os.environ.get(SETTING) or AUTO
    if value not in MODES:
        raise Unavailable(f"{SETTING}={value}: not a sandbox ({', '.join(MODES)})")
    return value


def check_setting() -> str:
    """The setting, checked as far as it can be before any command is known: `bwrap` needs
    bwrap able to make its namespaces here, `uid` a gate running as root."""
    value = setting()
    if value == BWRAP and bwrap() is None:
        raise Unavailable(
            f"{SETTING}=bwrap: bubblewrap is not installed or cannot make its namespaces here"
        )
    if value == UID and os.geteuid() != 0:
        raise Unavailable(f"{SETTING}=uid: running attempts as users of their own needs root")
    return value


def inner_user() -> tuple[int, int]:
    """The unprivileged (uid, gid) a root gate's bwrap runs the command as inside its user
    namespace: `nobody`'s, else 65534."""
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return 65534, 65534
    return (entry.pw_uid, entry.pw_gid) if entry.pw_uid != 0 else (65534, 65534)


def _confining() -> list[str]:
    """What bwrap adds for a root gate: a user namespace where the command is an
    unprivileged user, and no capability (without them root keeps every capability inside:
    it could remount `/` read-write and unmount what covers the gate's secrets)."""
    if os.geteuid() != 0:
        return []  # unprivileged bwrap already runs the command with no capability
    uid, gid = inner_user()
    nested = ["--disable-userns"] if _can_disable_userns() else []
    return ["--unshare-user", *nested, "--uid", str(uid), "--gid", str(gid), "--cap-drop", "ALL"]


@functools.cache
def _can_disable_userns() -> bool:
    """Whether this bwrap (0.8 and later) can forbid user namespaces inside its own: in one,
    the suite is root again, with every capability over mounts of its own making."""
    found = shutil.which(BWRAP)
    if found is None:
        return False
    try:
        done = subprocess.run([found, "--help"], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--disable-userns" in done.stdout + done.stderr


@functools.cache
def bwrap() -> str | None:
    """The bwrap binary, when it is installed and can make its namespaces here (checked once
    per process: a container may forbid them; a root gate's user namespace included)."""
    found = shutil.which("bwrap")
    if found is None:
        return None
    probe = [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *_confining(),
             "--new-session", "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--",
             "true"]  # fmt: skip
    try:
        done = subprocess.run(probe, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if done.returncode == 0 else None


@functools.cache
def prefixes(python: str) -> tuple[str, ...]:
    """The folders an interpreter needs to run: its `sys.prefix` (a venv) and
    `sys.base_prefix` (the installation it was made from), resolved."""
    code = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix]))"
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False,
            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")},
        )  # fmt: skip
        found = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        found = []
    real = os.path.realpath(python)
    folders = {os.path.dirname(os.path.dirname(real)), *(str(f) for f in found)}
    return tuple(sorted(os.path.realpath(f) for f in folders if f))


def _existing(paths: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if path and os.path.exists(real) and real not in seen and real != "/":
            seen.append(real)
    return seen


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _uid_range() -> tuple[int, int]:
    try:
        low, high = (int(part) for part in os.environ.get(UIDS_SETTING, "").split("-"))
    except ValueError:
        return DEFAULT_UIDS
    return (low, high) if 0 < low <= high < 2**32 - 1 else DEFAULT_UIDS


def _has_account(number: int) -> bool:
    try:
        pwd.getpwuid(number)
    except KeyError:
        return False
    return True


def shard_user() -> tuple[int, int] | None:
    """A fresh (uid, gid) for one attempt of a root gate that cannot have bwrap, or None (not
    root): a number no account has and no other attempt of this gate holds (drawn at random
    from `LEDGER_SANDBOX_UIDS`, so gates side by side do not meet either), so attempts
    cannot read or write each other's folders or processes."""
    if os.geteuid() != 0:
        return None
    low, high = _uid_range()
    with _taken_lock:
        for _ in range(64):
            number = low + secrets.randbelow(high - low + 1)
            if number not in _taken and not _has_account(number):
                _taken.add(number)
                return number, number
    return None


def credentials(sandbox: str, folder: str) -> tuple[int, int] | None:
    """(uid, gid) to start the shard's command as: under `sandbox: uid`, the owner the
    attempt's `folder` (the first writable one) was given to."""
    if sandbox != UID:
        return None
    seen = os.stat(folder)
    return seen.st_uid, seen.st_gid


def _searchable_to(path: str) -> bool:
    """Whether every folder from / down to `path` (itself included) is searchable by others."""
    parts = os.path.realpath(path).strip("/").split("/")
    try:
        return all(
            os.stat("/" + "/".join(parts[:depth])).st_mode & stat.S_IXOTH
            for depth in range(len(parts) + 1)
        )
    except OSError:
        return False


def others_may_use(path: str) -> bool:
    """Whether a user with no group in common can reach `path` and use it (a folder listed
    and searched; a file read and, when it is a program, run): the test of `sandbox: uid` for
    the command and what it reads."""
    real = os.path.realpath(path)
    if not _searchable_to(os.path.dirname(real)):
        return False
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return False
    if stat.S_ISDIR(mode):
        return bool(mode & stat.S_IROTH and mode & stat.S_IXOTH)
    return bool(mode & stat.S_IROTH and (mode & stat.S_IXOTH or not mode & stat.S_IXUSR))


def give(folders: Iterable[str], owner: tuple[int, int]) -> None:
    """Hand the attempt's own folders (checkout, report, scratch home) to the shard's user:
    the only places it may write."""
    for folder in folders:
        os.lchown(folder, *owner)
        for root, dirs, files in os.walk(folder):
            for name in (*dirs, *files):
                os.lchown(os.path.join(root, name), *owner)


def _by_uid(program: str, needed: Sequence[str], writable: Sequence[str]) -> bool:
    """Whether the shard can run as the separate user: the program and every folder the
    environment needs (venv, plugin) are usable by others, and the folders it will be given
    can be reached (what lies inside those is given with them)."""
    given = [os.path.realpath(w) for w in writable]
    uses = [n for n in needed if n and not any(_within(os.path.realpath(n), g) for g in given)]
    return all(others_may_use(p) for p in [program, *uses]) and all(
        _searchable_to(os.path.dirname(g)) for g in given
    )


def wrap(
    argv: Sequence[str],
    *,
    cwd: str,
    writable: Sequence[str],
    readable: Sequence[str],
    hidden: Sequence[str],
    path: str | None = None,
    needed: Sequence[str] = (),
    by_uid: bool = True,
    tmpfs_mb: float | None = None,
) -> tuple[list[str], str]:
    """`argv` to run sandboxed, and the sandbox used (`bwrap`; `uid`, with `argv` as it is
    and the `writable` folders given to the shard's user, whom `credentials` names; or `none`).
    `hidden` folders are covered by empty tmpfs mounts (the home directory, the user's
    repository, the ledger's folder, the gate's scratch); `readable` ones are then shown
    again read-only, `writable` ones read-write, in that order (a later mount wins). `needed`
    are what the command reads besides its program (its venv, the plugin): without bwrap they
    decide whether a separate user can run it. A program not found on `path` is left to fail
    to start, as it would without a sandbox. Without `by_uid` only bwrap confines (an
    environment build: `as_build_user` runs its steps as a user of their own). `tmpfs_mb`
    caps each writable tmpfs (`/tmp`, the home): files there are RAM, counted by the
    supervisor, and the cap bounds what a runaway writer takes before it is killed."""
    mode = setting()
    program = shutil.which(argv[0], path=path)
    if mode == NONE or program is None:
        return list(argv), NONE  # a command that cannot start fails as it would unconfined
    binary = bwrap() if mode != UID else None
    if binary is None and mode == BWRAP:
        raise Unavailable(
            f"{SETTING}=bwrap: bubblewrap is not installed or cannot make its namespaces here"
        )
    if binary is None:
        if not by_uid:
            return list(argv), NONE
        if not _by_uid(program, needed, writable):
            if mode == UID:
                raise Unavailable(
                    f"{SETTING}=uid: another user cannot run {program} or read what it needs "
                    "(an interpreter or environment under a private folder, such as root's home)"
                )
            return list(argv), NONE
        owner = shard_user()
        if owner is None:
            if mode == UID:
                raise Unavailable(
                    f"{SETTING}=uid: running attempts as users of their own needs root"
                )
            return list(argv), NONE
        give(writable, owner)
        return list(argv), UID
    args = [
        binary, "--die-with-parent", *_confining(), "--new-session", "--unshare-pid",
        "--unshare-ipc", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        *_sized(tmpfs_mb), "--tmpfs", "/tmp",
    ]  # fmt: skip
    home = os.path.realpath(os.path.expanduser("~"))
    covered: list[str] = []  # a path under /tmp or under another covered one is gone already
    for path in sorted(_existing(hidden), key=len):
        if path != home and not any(_within(path, top) for top in ["/tmp", *covered]):
            covered.append(path)
    for path in _existing([home, *covered]):
        args += [*(_sized(tmpfs_mb) if path == home else []), "--tmpfs", path]
    for path in _existing(readable):
        args += ["--ro-bind", path, path]
    for path in _existing(writable):
        args += ["--bind", path, path]
    for path in covered:  # empty and read-only; the home stays a private, writable one
        args += ["--remount-ro", path]
    args += ["--chdir", cwd, "--", *argv]
    return args, BWRAP


# A build step under `sandbox: uid` (`as_build_user`), run by the gate's interpreter (`-I -S`:
# nothing of any environment's): the folders the step may write are given to the build's
# user, a private home (with copies of the installers' configuration) and temporary folder
# made, the command run as that user; then every process of that user killed, what it wrote
# given back to the gate's user (set-id bits and group and other write bits cleared, so
# other users, later builds and shards, may read it and not write it), the home removed.
AS_USER = r"""
import json, os, shutil, signal, stat, sys, tempfile, time
spec, argv = json.loads(sys.argv[1]), sys.argv[2:]
uid, gid, mine = spec["uid"], spec["gid"], (os.geteuid(), os.getegid())
def walk(top):
    yield top
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            yield os.path.join(root, name)
def owned_by(owner, strip):
    for top in spec["give"]:
        if not os.path.lexists(top):
            continue
        for path in walk(top):
            try:
                os.lchown(path, *owner)
                mode = os.lstat(path).st_mode
                if strip and not stat.S_ISLNK(mode) and mode & 0o6022:
                    os.chmod(path, stat.S_IMODE(mode) & ~0o6022)
            except OSError:
                pass
def users_processes():
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/status" % pid) as handle:
                ids = [l.split()[1:] for l in handle if l.startswith("Uid:")][0]
        except (OSError, IndexError, ValueError):
            continue
        if str(uid) in ids:
            found.append(int(pid))
    return found
def kill_users_processes():
    for _ in range(200):
        found = users_processes()
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
home = tempfile.mkdtemp(prefix="ledger-build-home-", dir=spec["scratch"])
tmp = os.path.join(home, "tmp")
os.mkdir(tmp)
for rel, source in spec["configs"]:
    target = os.path.join(home, rel)
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(source, target)
    except OSError:
        pass
spec["give"].append(home)
owned_by((uid, gid), False)
env = dict(os.environ, HOME=home, TMPDIR=tmp)
child = os.fork()
if child == 0:
    try:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        os.chdir(spec["cwd"])
        os.execvpe(argv[0], argv, env)
    except BaseException as error:
        os.write(2, ("cannot run %s as the build's user: %s\n" % (argv[0], error)).encode())
    os._exit(127)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
status = os.waitpid(child, 0)[1]
kill_users_processes()
owned_by(mine, True)
shutil.rmtree(home, ignore_errors=True)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def uid_applies() -> bool:
    """Whether a command runs as a user of its own here: a root gate told `uid`, or left to
    `auto` where bwrap cannot run."""
    mode = setting()
    return os.geteuid() == 0 and (mode == UID or (mode == AUTO and bwrap() is None))


def _runs_for_others(program: str) -> bool:
    """`others_may_use(program)`, and for a script its `#!` interpreter too (a tool in an
    environment under a private folder: its script is readable, its interpreter is not)."""
    if not others_may_use(program):
        return False
    try:
        with open(program, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        return False
    if not first.startswith(b"#!"):
        return True
    words = first[2:].decode(errors="replace").split()
    return not words or others_may_use(words[0])


def as_build_user(
    argv: Sequence[str],
    *,
    cwd: str,
    writable: Sequence[str],
    needed: Sequence[str],
    owner: tuple[int, int],
    path: str | None = None,
    configs: Sequence[tuple[str, str]] = (),
) -> tuple[list[str], str]:
    """A build step under `sandbox: uid` (`uid_applies`): `argv` run as `owner` (the build's
    own user, `shard_user`) by `AS_USER`, which gives it the `writable` folders for the step
    and takes them back after, with a private home holding copies of `configs` (its
    relative path, the file) and temporary folder; (argv, `uid`). A program, or what it
    `needed`, that another user cannot use is `Unavailable` when `uid` was asked for, else
    the step runs as given (`none`)."""
    program = shutil.which(argv[0], path=path)
    if program is None:
        return list(argv), NONE  # fails to start, as it would unconfined
    if not (_runs_for_others(program) and _by_uid(program, needed, writable)):
        if setting() == UID:
            raise Unavailable(
                f"{SETTING}=uid: another user cannot run {program} or read what it needs "
                "(an interpreter or environment under a private folder, such as root's home)"
            )
        return list(argv), NONE
    spec = {
        "uid": owner[0], "gid": owner[1], "cwd": cwd, "scratch": tempfile.gettempdir(),
        "give": _existing(writable), "configs": [list(c) for c in configs],
    }  # fmt: skip
    return [sys.executable, "-I", "-S", "-c", AS_USER, json.dumps(spec), *argv], UID


def _sized(tmpfs_mb: float | None) -> list[str]:
    """bwrap's `--size` for the next tmpfs (none: as large as the kernel allows)."""
    return ["--size", str(int(tmpfs_mb * 1024 * 1024))] if tmpfs_mb else []


def shard_environment(env: dict[str, str], sandbox: str) -> dict[str, str]:
    """The shard's environment as the sandbox sees it: temporary files in its private /tmp
    (bwrap); otherwise as given (a separate user's files in a shared /tmp are its own)."""
    if sandbox == BWRAP:
        return {**env, "TMPDIR": "/tmp"}
    return env


def harness_levels(sandbox: str) -> int:
    """How many of the sandbox's own processes head the shard's tree (bwrap, and the init of
    its PID namespace), left out of the suite's memory by the supervisor."""
    return 2 if sandbox == BWRAP else 0


def exit_status(
    exit_code: int | None, signal: int | None, sandbox: str
) -> tuple[int | None, int | None]:
    """(exit code, signal) of the suite's command. bwrap's init reports a child killed by a
    signal as exit 128 + N, as shells do; the suite's command is then taken to have died of
    that signal (a program that exits 129-159 itself is read the same way: both unmeasured)."""
    if sandbox == BWRAP and exit_code is not None and 128 < exit_code < 128 + 65:
        return None, exit_code - 128
    return exit_code, signal
