"""The SSH executor: shards run on one build host, from a bare mirror of pinned commits.

`prepare` pushes the head and base commits to `refs/release-ledger/gate/<sha>` of a bare
mirror on the host (only those not there yet). Each `run` is one ssh connection: a fresh
`release-ledger.XXXXXX` folder in the host's `$TMPDIR` (else `/tmp`), a clone of the mirror
detached at the exact SHA, the command run on the host under the shared shard supervisor
(`wrapper.py`), and the report and log tail sent back over the same connection with their
sha256. Before the command, the revision's own environment is prepared on the host
(`adapters/executors/environment.py`, cached beside the mirror). Connection faults are
`infrastructure` failures in the closed vocabulary, with ssh's own word as the reason
(`ssh-connect`, `ssh-auth`, `ssh-dropped`, ...), so the gate records the shard as unmeasured
and retries it; test failures never raise.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from release_ledger.adapters.executors.invocation_run import FILES_MARK
from release_ledger.adapters.executors.local import named_items, report_of, setup_failed
from release_ledger.adapters.executors.ssh import faults
from release_ledger.adapters.executors.ssh.remote import (
    CLEANUP_SCRIPT,
    EXIT_CHECKOUT,
    EXIT_CLONE,
    EXIT_MKTEMP,
    EXIT_NOT_BARE,
    MIRROR_SCRIPT,
    RUN_SCRIPT,
    TMP_MARK,
    WRAPPER_SOURCE,
    FrameError,
    parse_frame,
    remote_command,
    session_started,
    temporary_dir,
)
from release_ledger.adapters.executors.ssh.target import REMOTE_PYTHON, SshTarget, validate_target
from release_ledger.adapters.executors.ssh.wrapper import PYTHON_MARK
from release_ledger.adapters.git import SAFE_GIT, git_env
from release_ledger.adapters.pytest_plugin import PLUGIN_MODULE, PLUGIN_SOURCE
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import (
    EnvironmentRequest,
    Observation,
    ShardRun,
    expand_command,
)
from release_ledger.domain.failures import FailureKind
from release_ledger.domain.invocation import TestInvocation

LOG_TAIL_BYTES = 64 * 1024
GATE_REF = "refs/release-ledger/gate/"
# Beyond the shard's own timeout: connecting, cloning and sending the answer back.
LOCAL_GRACE_S = 600.0
PREPARE_TIMEOUT_S = 1800.0


class SshFault(Exception):
    """An ssh call failed for infrastructure reasons; `reason` is the recorded name."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class SshExecutor:
    """Runs shards on one build host over ssh; `run` is safe to call from many threads."""

    name = "ssh"

    def __init__(
        self, target: SshTarget, repo: Path, environment_request: EnvironmentRequest | None = None
    ) -> None:
        self.target = target
        self.repo = repo
        self.environment_request = environment_request or EnvironmentRequest()
        self.mirror_path: str | None = None  # absolute, resolved on the host
        self.pushed: list[str] = []  # commits actually transferred, in order (for tests, logs)
        self._pinned: set[str] = set()
        self._leftovers: set[str] = set()  # host temporaries a dropped connection left
        self._live: set[subprocess.Popen[bytes]] = set()
        self._invocations: dict[str, TestInvocation | None] = {}  # by commit, as collected
        self._cancelled = False
        self._lock = threading.Lock()  # guards the sets above
        self._prepare_lock = threading.Lock()  # one mirror update at a time

    # --- Executor port ----------------------------------------------------------------------

    def prepare(self, commits: list[str]) -> None:
        """Pin the commits in the mirror. Faults are not raised: `run` retries and records them.

        Raises `BadInput` only when the mirror path exists and is not a bare repository.
        """
        with contextlib.suppress(SshFault):
            self._ensure_pinned(commits)

    def run(self, shard: ShardRun) -> Observation:
        """One connection: clone, check out, run, measure, send back; faults as failure_reason."""
        if self._cancelled:
            return self._fault(faults.CANCELLED, "the gate was cancelled")
        try:
            self._ensure_pinned([shard.commit])
        except SshFault as fault:
            return self._fault(fault.reason, fault.detail)
        # The files are named on the host, from where the invocation runs (`in_workdir`).
        argv = expand_command(
            shard.command, python=PYTHON_MARK, junit=f"{TMP_MARK}/junit.xml", files=[FILES_MARK]
        )
        spec = self._spec(shard.commit, shard.timeout_s, shard.memory_limit_mb, shard.skip_sources)
        spec |= {"files": list(shard.files), "file_limits": dict(shard.file_limits)}
        deadline = shard.timeout_s + LOCAL_GRACE_S + self.target.connect_timeout
        code, stdout, stderr, expired = self._ssh(self._command(shard.commit, spec, argv), deadline)
        return self._observe(code, stdout, stderr, expired, deadline)

    def collect(
        self, commit: str, timeout_s: float = 300.0, memory_limit_mb: int | None = None
    ) -> tuple[list[str] | None, str]:
        """The items the commit's declared invocation collects on the host: its environment
        prepared there as for a shard, the local executor's collect-only run (`invocation_run`)
        from the invocation's working directory, sandboxed and watched like a shard; or None
        and why not (the file walk then finds the files)."""
        try:
            self._ensure_pinned([commit])
        except SshFault as fault:
            return None, f"collection on {self.target.host} failed: {fault}"
        spec = self._spec(commit, timeout_s, memory_limit_mb, ()) | {"collect": True}
        deadline = timeout_s + LOCAL_GRACE_S + self.target.connect_timeout
        code, stdout, stderr, expired = self._ssh(self._command(commit, spec, []), deadline)
        try:
            frame = parse_frame(stdout)
        except FrameError:  # a fault, named as a shard's would be
            seen = self._observe(code, stdout, stderr, expired, deadline)
            return None, f"collection on {self.target.host}: {seen.failure_detail}"
        if frame.environment:
            report = report_of(frame.environment, self.target.host)
            with self._lock:
                self._invocations[commit] = report.invocation
            if report.status != "ready":
                return None, report.error or "the environment could not be prepared"
        if frame.collect_error:
            return None, frame.collect_error
        if frame.report is None:
            return None, f"collection on {self.target.host} sent no items"
        return named_items(json.loads(frame.report)), ""

    def invocation_for(self, commit: str) -> TestInvocation | None:
        """The invocation the host resolved for `commit` when it collected (None before)."""
        with self._lock:
            return self._invocations.get(commit)

    def _spec(
        self,
        commit: str,
        timeout_s: float,
        memory_limit_mb: int | None,
        skip_sources: tuple[tuple[str, str], ...],
    ) -> dict[str, object]:
        """What the host's wrapper is told: the commit, its limits, how to prepare its
        environment, the gate's plugin."""
        request = self.environment_request
        return {
            "commit": commit,
            "timeout_s": float(timeout_s),
            "tail_bytes": LOG_TAIL_BYTES,
            "memory_limit_mb": memory_limit_mb,
            "env_mode": request.mode,
            "env_command": list(request.command),
            "env_extras": list(request.extras),
            "env_exclude_newer": request.exclude_newer,
            "pass_env": list(request.pass_env),
            "outputs": list(request.outputs),
            "env_pinned": request.pinned,
            "env_skip_sources": dict(skip_sources),
            # base's: the host's shared installers' caches; any other: caches of its own
            "trusted": commit in request.trusted_commits,
            "plugin_module": PLUGIN_MODULE,
            "plugin_source": PLUGIN_SOURCE,
        }

    def _command(self, commit: str, spec: dict[str, object], argv: Sequence[str]) -> str:
        """One connection's command: clone the commit, run the wrapper with `spec` and `argv`."""
        return remote_command(
            RUN_SCRIPT,
            self.target.remote_path,
            self.target.mirror,
            commit,
            self.target.remote_python,
            json.dumps(spec, sort_keys=True),
            WRAPPER_SOURCE,
            *argv,
        )

    def cancel_all(self) -> None:
        """Kill every ssh client; the host sees end-of-file and kills and removes the shard."""
        with self._lock:
            self._cancelled = True
            live = list(self._live)
        for process in live:
            _kill(process)

    def close(self) -> None:
        """Remove host temporaries that dropped connections could not remove themselves."""
        with self._lock:
            leftovers = sorted(self._leftovers)
        if not leftovers:
            return
        command = remote_command(CLEANUP_SCRIPT, self.target.remote_path, "-", *leftovers)
        code, _, _, _ = self._ssh(command, 60.0 + self.target.connect_timeout)
        if code == 0:
            with self._lock:
                self._leftovers.difference_update(leftovers)

    # --- the mirror -------------------------------------------------------------------------

    def _ensure_pinned(self, commits: Sequence[str]) -> None:
        with self._lock:
            wanted = [c for c in dict.fromkeys(commits) if c not in self._pinned]
        if not wanted:
            return
        with self._prepare_lock:
            with self._lock:
                wanted = [c for c in wanted if c not in self._pinned]
            if not wanted:
                return
            missing = self._check_mirror(wanted)
            if missing:
                self._push(missing)
            with self._lock:
                self._pinned.update(wanted)

    def _check_mirror(self, commits: list[str]) -> list[str]:
        """Create the mirror if needed, check it is bare, pin present commits; return the rest."""
        command = remote_command(
            MIRROR_SCRIPT, self.target.remote_path, self.target.mirror, *commits
        )
        code, stdout, stderr, expired = self._ssh(command, 300.0 + self.target.connect_timeout)
        if code == EXIT_NOT_BARE:
            raise BadInput(
                f"remote mirror {self.target.mirror} on {self.target.host} "
                "is not a bare git repository"
            )
        if expired or code != 0:
            raise self._call_fault(code, stdout, stderr, expired, "checking the mirror")
        missing: list[str] = []
        for line in stdout.decode("utf-8", "replace").splitlines():
            word, _, value = line.partition(" ")
            if word == "mirror":
                self.mirror_path = value
            elif word == "missing":
                missing.append(value)
        return missing

    def _push(self, commits: list[str]) -> None:
        """One `git push` of the missing commits, over ssh with the same options."""
        if self.mirror_path is None:
            raise SshFault(faults.SSH_REMOTE, "the host did not report the mirror's path")
        url = f"{self.target.host}:{self.mirror_path}"
        refspecs = [f"{sha}:{GATE_REF}{sha}" for sha in commits]
        receive_pack = f"env PATH={shlex.quote(self.target.remote_path)} git-receive-pack"
        env = git_env() | {"GIT_SSH_COMMAND": self.target.git_ssh_command()}
        try:
            done = subprocess.run(
                [
                    "git",
                    *SAFE_GIT,
                    "-C",
                    str(self.repo),
                    "push",
                    "--quiet",
                    "--no-verify",
                    f"--receive-pack={receive_pack}",
                    url,
                    *refspecs,
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=env,
                timeout=PREPARE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise SshFault(faults.TIMEOUT, "git push to the mirror did not finish") from error
        stderr = done.stderr.decode("utf-8", "replace")
        if done.returncode != 0:
            reason = faults.classify_ssh_failure(stderr, session_started=False)
            if "unknown revision" in stderr or "does not match any" in stderr:
                reason = faults.SSH_CHECKOUT
            raise SshFault(reason, f"git push: {faults.last_line(stderr)}")
        self.pushed.extend(commits)

    # --- one connection ---------------------------------------------------------------------

    def _ssh(self, command: str, deadline_s: float) -> tuple[int, bytes, str, bool]:
        """Run ssh, keep its stdin open (its end-of-file tells the host we are gone)."""
        process = subprocess.Popen(
            self.target.ssh_argv(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        with self._lock:
            self._live.add(process)
            if self._cancelled:
                _kill(process)
        assert process.stdout is not None and process.stderr is not None
        err_chunks: list[bytes] = []
        reader = threading.Thread(target=_drain, args=(process.stderr, err_chunks), daemon=True)
        reader.start()
        timer = threading.Timer(deadline_s, _kill, args=(process,))
        timer.daemon = True
        started = time.monotonic()
        timer.start()
        try:
            stdout = process.stdout.read()
            code = process.wait()
        finally:
            timer.cancel()
            if process.stdin is not None:
                process.stdin.close()
            process.stdout.close()
            reader.join(timeout=5)
            with self._lock:
                self._live.discard(process)
        expired = code < 0 and time.monotonic() - started >= deadline_s
        stderr = b"".join(err_chunks)[-16384:].decode("utf-8", "replace")
        return code, stdout, stderr, expired

    def _observe(
        self, code: int, stdout: bytes, stderr: str, expired: bool, deadline: float
    ) -> Observation:
        tmp = temporary_dir(stdout)
        extra = {"host": self.target.host}
        if tmp is not None:
            extra["remote_tmp"] = tmp
        try:
            frame = parse_frame(stdout)
        except FrameError as error:
            if tmp is not None and code != 0:
                with self._lock:  # the host may not have removed it (killed with its session)
                    self._leftovers.add(tmp)
            if self._cancelled:
                return self._fault(faults.CANCELLED, "the gate was cancelled", extra)
            if expired:
                detail = f"no answer from {self.target.host} within {deadline:.0f}s"
                return self._fault(faults.TIMEOUT, detail, extra, timed_out=True)
            if error.complete:
                return self._fault(faults.SSH_TRANSFER, str(error), extra)
            reason, detail = self._no_frame(code, stdout, stderr, str(error))
            return self._fault(reason, detail, extra)
        environment = report_of(frame.environment, self.target.host) if frame.environment else None
        if environment is not None and environment.status != "ready":
            return setup_failed(environment).model_copy(update={"extra": extra})
        # The shard's own timeout or memory overrun on the host is its outcome, as locally.
        return Observation(
            exit_code=frame.exit_code,
            signal=frame.signal,
            report=frame.report,
            log_tail=frame.log_tail,
            rss_mb=round(frame.rss_kb / 1024, 1),
            seconds=round(frame.seconds, 3),
            timed_out=frame.timed_out,
            oom=frame.oom,
            extra=extra,
            environment=environment,
            sandbox=frame.sandbox,
        ).with_modified_checkout(frame.modified_files)

    def _no_frame(self, code: int, stdout: bytes, stderr: str, why: str) -> tuple[str, str]:
        started = session_started(stdout)
        detail = faults.last_line(stderr) or why
        if code == 255 or code < 0:
            return faults.classify_ssh_failure(stderr, session_started=started), detail
        if code in (EXIT_CLONE, EXIT_CHECKOUT):
            return faults.SSH_CHECKOUT, detail
        if code == EXIT_MKTEMP:
            return faults.SSH_REMOTE, f"mktemp failed on the host: {detail}"
        return faults.SSH_REMOTE, f"exit {code}: {detail}"

    def _call_fault(
        self, code: int, stdout: bytes, stderr: str, expired: bool, doing: str
    ) -> SshFault:
        if expired:
            return SshFault(faults.TIMEOUT, f"{doing} on {self.target.host} did not finish")
        reason, detail = self._no_frame(code, stdout, stderr, f"{doing} failed")
        return SshFault(reason, detail)

    def _fault(
        self,
        reason: str,
        detail: str,
        extra: dict[str, str] | None = None,
        *,
        timed_out: bool = False,
    ) -> Observation:
        kind: FailureKind = "cancelled" if reason == faults.CANCELLED else "infrastructure"
        return Observation.failed(
            kind,
            reason,
            detail,
            timed_out=timed_out,
            extra=extra or {"host": self.target.host},
        )


def build_ssh_executor(
    *,
    host: str,
    repo: Path,
    remote_mirror: str = "~/.cache/release-ledger/mirror.git",
    port: int | None = None,
    identity: Path | None = None,
    ssh_options: Sequence[str] = (),
    remote_python: str = REMOTE_PYTHON,
    remote_path: str = "/usr/local/bin:/usr/bin:/bin",
    connect_timeout: int = 10,
    environment_request: EnvironmentRequest | None = None,
) -> SshExecutor:
    """Validate everything up front (`BadInput`, one line) and build the executor; no I/O."""
    target = validate_target(
        host=host,
        remote_mirror=remote_mirror,
        port=port,
        identity=identity,
        ssh_options=ssh_options,
        remote_python=remote_python,
        remote_path=remote_path,
        connect_timeout=connect_timeout,
    )
    if not Path(repo).is_dir():
        raise BadInput(f"repository {str(repo)!r} is not a directory")
    for tool in ("ssh", "git"):
        if shutil.which(tool) is None:
            raise BadInput(f"the ssh executor needs {tool!r} on PATH (OpenSSH client, git)")
    return SshExecutor(target, Path(repo), environment_request)


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()


def _drain(stream: IO[bytes], chunks: list[bytes]) -> None:
    while chunk := stream.read(65536):
        chunks.append(chunk)
        if len(chunks) > 64:
            del chunks[:32]
    stream.close()
