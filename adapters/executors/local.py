"""Run shards as local subprocesses in clean worktrees and observe exactly what happened.

Each shard runs under the shared shard supervisor (`adapters/executors/supervisor.py`): its own
session, memory and time watched, the whole session killed on overrun, timeout or Ctrl-C, so
nothing outlives the shard. Each revision's tests run in that revision's own environment
(`adapters/executors/environment.py`), prepared once per commit and cached across runs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from release_ledger.adapters.executors import (
    build_sandbox,
    bytecode,
    checkout_guard,
    environment,
    sandbox,
)
from release_ledger.adapters.executors.env_variables import FILE_LIMITS_VARIABLE
from release_ledger.adapters.executors.invocation_run import (
    COLLECT_PROGRAM,
    FILES_ROOT_VARIABLE,
    collect_targets,
    collection_failure,
    item_paths,
    site_packages_of,
    start_and_files,
)
from release_ledger.adapters.executors.port import (
    Capabilities,
    Executor,
    ExecutorOptions,
    ExecutorSpec,
    option,
)
from release_ledger.adapters.executors.programs import program
from release_ledger.adapters.executors.resident import (
    RETIRE_KB,
    ROOT_VARIABLE,
    WORKER_MODULE,
    ResidentWorker,
    Spawner,
)
from release_ledger.adapters.executors.supervisor import ShardProcess, log_tail
from release_ledger.adapters.git import Worktrees, isolated_copy
from release_ledger.adapters.pytest_plugin import with_plugin_path
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import (
    PYTEST_PLUGIN,
    EnvironmentReport,
    EnvironmentRequest,
    Observation,
    ShardRun,
    expand_command,
)
from release_ledger.domain.invocation import INSTALLED_PREFIX, TestInvocation, stable_node_id

LOG_TAIL_BYTES = 64 * 1024


SCRATCH_PREFIX = "ledger-local-"


def _sweep_scratch(folder: Path) -> None:
    """Remove the scratch folders of gates that died without cleaning up (their pid is gone)."""
    for path in folder.glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(path, ignore_errors=True)


def environments_dir() -> Path:
    """Where this machine caches per-revision environments (`LEDGER_ENVS_DIR` to move it)."""
    configured = os.environ.get("LEDGER_ENVS_DIR")
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(cache) / "release-ledger" / "envs"


class LocalExecutor:
    """The `Executor` port on this machine: one supervised process per shard, in threads.

    The memory limit is enforced by the supervisor's watchdog polling the session's RSS, not
    by RLIMIT_AS: under an address-space limit Python raises MemoryError, pytest reports it as
    an ordinary test failure and exits 1, so an overrun would look like a regression instead of
    a dead shard (and RLIMIT_AS counts reserved, not used, memory).
    """

    name = "local"

    def __init__(
        self,
        repo: Path,
        worktrees: Worktrees | None = None,
        python: str = sys.executable,
        work_dir: Path | None = None,
        environment_request: EnvironmentRequest | None = None,
        envs_dir: Path | None = None,
        resident: bool = False,
    ) -> None:
        try:  # a sandbox insisted on that cannot apply here stops the gate before it starts
            sandbox.check_setting()
        except sandbox.Unavailable as error:
            raise BadInput(str(error)) from None
        self.repo = repo
        self.worktrees = worktrees if worktrees is not None else Worktrees(repo)
        self._own_worktrees = worktrees is None
        self.python = python
        self.environment_request = environment_request or EnvironmentRequest()
        self.envs_dir = envs_dir or environments_dir()
        self._own_work_dir = work_dir is None
        if work_dir is None:
            _sweep_scratch(Path(tempfile.gettempdir()))
            work_dir = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
            # searchable, not listable: a shard run as a separate user (`sandbox: uid`) reaches
            # its own attempt folder (given to it) and no other (each a private mkdtemp)
            work_dir.chmod(0o711)
        work_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir = work_dir
        self._lock = threading.Lock()
        self._checkouts: dict[str, Path] = {}
        # By (commit, declared sources the gate rejected for it: `ShardRun.skip_sources`).
        self._environments: dict[
            tuple[str, tuple[tuple[str, str], ...]], tuple[EnvironmentReport, dict[str, list[str]]]
        ] = {}
        self._commit_locks: dict[str, threading.Lock] = {}
        self._running: set[ShardProcess] = set()
        self._cancelled = False
        # Every shard process carries `<tag>:<n>`; the reaper kills what carries `<tag>:` if
        # this process dies without cleaning up (kill -9), and removes the scratch folder.
        self.tag = f"rl-{os.getpid()}-{secrets.token_hex(4)}"
        self._shards_started = 0
        self._reaper: subprocess.Popen[bytes] | None = None
        # Resident workers (`resident.py`): idle ones by (commit, rejected sources, command),
        # and every one alive (cancel kills them all).
        self.resident = resident
        self._idle: dict[tuple[object, ...], list[_Lane]] = {}
        self._lanes: set[_Lane] = set()
        self._workers_started = 0
        self._spawner = Spawner()  # workers outlive the thread whose shard needed them

    # -- checkouts and environments --------------------------------------------------------

    def prepare(self, commits: list[str]) -> None:
        """Check out every commit and prepare its environment before any shard runs: all at
        once, a thread each (a build mostly waits on uv, the network and its subprocesses, so
        both revisions take about as long as the slower one). Each commit has its lock, and the
        cache one per entry across processes (`env_cache._locked`): two revisions whose
        environments share a key build it once. The first error is raised once all ended."""
        wanted = list(dict.fromkeys(commits))
        if len(wanted) < 2:
            for commit in wanted:
                self.environment_for(commit)
            return
        errors: list[BaseException] = []

        def build(commit: str) -> None:
            try:
                self.environment_for(commit)
            except BaseException as error:  # raised in the caller's thread below
                errors.append(error)

        # Daemon threads: Ctrl-C is not held up at exit by a build still running (a confined
        # build's steps die with the gate: bubblewrap's `--die-with-parent`).
        threads = [
            threading.Thread(target=build, args=(c,), name=f"env-{c[:12]}", daemon=True)
            for c in wanted
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _guard(self, commit: str) -> threading.Lock:
        with self._lock:
            return self._commit_locks.setdefault(commit, threading.Lock())

    def checkout_for(self, commit: str) -> Path:
        """The clean worktree of `commit`, checked out once per executor and then shared."""
        with self._lock:
            if commit in self._checkouts:
                return self._checkouts[commit]
        with self._guard(commit):
            with self._lock:
                if commit in self._checkouts:
                    return self._checkouts[commit]
            path = self.worktrees.checkout(commit)
            with self._lock:
                self._checkouts[commit] = path
            return path

    def environment_for(
        self, commit: str, skip: tuple[tuple[str, str], ...] = ()
    ) -> tuple[EnvironmentReport, dict[str, list[str]]]:
        """The commit's environment (prepared once per executor; a failure is kept too),
        from the first declared source not in `skip` (source, why it was rejected).

        Built in a throw-away clone of the commit, as attempts run in one: the build is the
        project's code, and git is never run by the gate in a tree it could write (the
        cached checkout included: a `.git` rewritten there would run its hooks with ours)."""
        self.checkout_for(commit)
        with self._guard(commit):
            with self._lock:
                if (commit, skip) in self._environments:
                    return self._environments[(commit, skip)]
            build_dir = Path(tempfile.mkdtemp(prefix=f"build-{commit[:12]}-", dir=self.work_dir))
            build_dir.chmod(0o711)  # `sandbox: uid`: the build's user reaches its checkout
            try:
                checkout = isolated_copy(self.repo, commit, build_dir / "w")
                prepared = self._prepare_in(commit, checkout, skip)
            finally:
                shutil.rmtree(build_dir, ignore_errors=True)
            found = (report_of(prepared, "local"), _runtime_of(prepared))
            with self._lock:
                self._environments[(commit, skip)] = found
            return found

    def _prepare_in(
        self, commit: str, checkout: Path, skip: tuple[tuple[str, str], ...]
    ) -> dict[str, object]:
        request = self.environment_request
        # The candidate's build (any commit not trusted) gets installers' caches of its own:
        # what it writes there never reaches what base's builds install (under `sandbox:
        # uid` every build does: its user cannot write the shared ones).
        trusted = commit in request.trusted_commits
        own = (
            build_sandbox.own_caches(self.envs_dir, commit)
            if build_sandbox.own_caches_needed(trusted) else None
        )  # fmt: skip
        confine, used = build_sandbox.confinement(
            python=self.python, repo=self.repo, checkout=checkout, envs_dir=self.envs_dir,
            hidden=[str(self.work_dir), str(self.worktrees.cache_dir), *request.hidden],
            caches=own, asking=request.mode == "none",
        )  # fmt: skip
        try:
            prepared = self._prepare_confined(commit, checkout, skip, confine, own)
        except sandbox.Unavailable as error:  # `uid` insisted on, and a step cannot have it
            raise BadInput(str(error)) from None
        if sandbox.NONE in used:
            warnings = prepared.setdefault("warnings", [])
            if isinstance(warnings, list):
                warnings.append(build_sandbox.UNCONFINED_WARNING)
        return prepared

    def _prepare_confined(
        self, commit: str, checkout: Path, skip: tuple[tuple[str, str], ...],
        confine: environment.Confine, own: dict[str, str] | None,
    ) -> dict[str, object]:  # fmt: skip
        request = self.environment_request
        return environment.prepare(
            str(checkout),
            mode=request.mode,
            python=self.python,
            cache=str(self.envs_dir),
            commit=commit,
            command=list(request.command),
            extras=list(request.extras),
            exclude_newer=request.exclude_newer,
            pinned=request.pinned,
            pass_env=list(request.pass_env),
            confine=confine,
            skip_sources=dict(skip),
            base_env={**os.environ, **(own or {})},
            own_caches=own is not None,
        )

    def collect(
        self, commit: str, timeout_s: float = 300.0, memory_limit_mb: int | None = None
    ) -> tuple[list[str] | None, str]:
        """The items the commit's declared invocation collects (`--collect-only -q`, in its
        environment, sandboxed and watched like a shard: a module that hangs or blows up at
        import ends it, and the file walk then finds the files), or None and why not."""
        report, runtime = self.environment_for(commit)
        if report.status != "ready" or report.invocation is None:
            return None, report.error or "no resolved test invocation"
        targets, why = collect_targets(report.invocation.model_dump(mode="json"))
        if targets is None:
            return None, why
        run = ShardRun(
            run_id="", shard_id="collect", attempt=1, revision="head", commit=commit,
            files=tuple(targets), timeout_s=timeout_s, memory_limit_mb=memory_limit_mb,
            command=("{python}", "-c", COLLECT_PROGRAM, "{files}"),
        )  # fmt: skip
        if self.resident:  # on the worker that then runs the revision's first shard
            return self._collect_resident(run, report, runtime)
        run_dir = Path(tempfile.mkdtemp(prefix="collect-", dir=self.work_dir))
        try:
            cwd = isolated_copy(self.repo, commit, run_dir / "w")
            seen = self._run_in(run, cwd, run_dir, report, runtime)
            output = (run_dir / "output.log").read_text("utf-8", "replace")
            items = collected_items(output, str(cwd))
        except OSError as error:
            return None, f"collection could not run: {error}"
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        failure = collection_failure(seen.exit_code, seen.signal, seen.timed_out, seen.oom, output)
        self._compile_collected(report, output)
        return (None, failure) if failure else (items, "")

    def _compile_collected(self, report: EnvironmentReport, output: str) -> None:
        """What the collection imported from the revision's environment without bytecode,
        compiled there once for all its shards, where the environment is one this gate's
        cache holds (never the gate's own interpreter, nor one it did not build)."""
        venv = os.path.dirname(os.path.dirname(report.python)) if report.python else ""
        cache = os.path.realpath(self.envs_dir) + os.sep
        if venv and os.path.realpath(venv).startswith(cache):
            bytecode.compile_collected(report.python, venv, output)

    def _collect_resident(
        self, run: ShardRun, report: EnvironmentReport, runtime: dict[str, list[str]]
    ) -> tuple[list[str] | None, str]:
        """`collect` on a resident worker of the revision: its start paid once for the
        collection and the shards after it."""
        output: list[str] = []
        try:
            seen = self._run_resident(run, report, runtime, output)
        except OSError as error:
            return None, f"collection could not run: {error}"
        text = output[0] if output else ""
        failure = collection_failure(seen.exit_code, seen.signal, seen.timed_out, seen.oom, text)
        self._compile_collected(report, text)
        return (None, failure) if failure else (collected_items(text, output[1]), "")

    def invocation_for(self, commit: str) -> TestInvocation | None:
        """The commit's resolved test invocation (its environment prepared if not yet)."""
        return self.environment_for(commit)[0].invocation

    # -- running ---------------------------------------------------------------------------

    def run(self, shard: ShardRun) -> Observation:
        """Run one shard and observe it; test failures and crashes are data, never exceptions.

        Each attempt runs in its own copy of the commit, so a test that rewrites files (its
        own suite's included) changes nothing any other attempt, or a later run, sees.
        """
        if not shard.files and any("{files}" in token for token in shard.command):
            # pytest given no file runs the whole checkout: never what an empty shard means.
            raise ValueError(f"shard {shard.shard_id} has no files to run")
        report, runtime = self.environment_for(shard.commit, shard.skip_sources)
        if report.status != "ready":
            return setup_failed(report)
        if self._cancelled:
            return Observation.failed("cancelled", "cancelled", "not started")
        if self.resident and resident_command(shard.command):
            return self._run_resident(shard, report, runtime)
        run_dir = Path(
            tempfile.mkdtemp(
                prefix=f"{shard.shard_id}-{shard.revision}-{shard.attempt}-", dir=self.work_dir
            )
        )
        try:
            cwd = isolated_copy(self.repo, shard.commit, run_dir / "w")
            before = checkout_guard.tracked_snapshot(str(cwd))
            observation = self._run_in(shard, cwd, run_dir, report, runtime)
            observation = observation.with_modified_checkout(
                checkout_guard.changed_tracked(str(cwd), before, self.environment_request.outputs)
            )
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        return observation

    def _run_in(
        self,
        shard: ShardRun,
        cwd: Path,
        run_dir: Path,
        report: EnvironmentReport,
        runtime: dict[str, list[str]],
    ) -> Observation:
        junit = run_dir / "junit.xml"
        log_path = run_dir / "output.log"
        python = report.python or self.python
        start, files = in_workdir(cwd, report, shard.files)
        argv = expand_command(shard.command, python=python, junit=str(junit), files=files)
        if not argv:
            raise BadInput("the test command is empty")
        # A home and temporary folder of the attempt's own (given to the shard's user with the
        # attempt folder); of the gate's environment only the allow-list and `pass-env`.
        home, scratch = run_dir / "home", run_dir / "tmp"
        home.mkdir(exist_ok=True)
        scratch.mkdir(exist_ok=True)
        env = with_plugin_path(
            environment.shard_env(
                dict(os.environ), runtime, pass_env=self.environment_request.pass_env,
                home=str(home), tmp=str(scratch), file_limits=dict(shard.file_limits),
            )
        )  # fmt: skip
        if shutil.which(argv[0], path=env.get("PATH")) is None:  # checked before any sandbox
            raise BadInput(f"cannot run the test command '{argv[0]}': not found")
        if start != cwd:  # the plugin names files from the checkout, not from `start`
            env[FILES_ROOT_VARIABLE] = str(cwd)
        # A tmpfs of the sandbox is RAM: capped at twice the attempt's limit, so the
        # supervisor (which counts it) kills a runaway writer as `oom` before the cap is met.
        tmpfs_mb = 2 * shard.memory_limit_mb if shard.memory_limit_mb else None
        argv, confined = self._sandboxed(argv, start, run_dir, python, env, tmpfs_mb)
        env = sandbox.shard_environment(env, confined)
        process = ShardProcess(
            argv,
            cwd=str(start),
            env=env,
            log_path=str(log_path),
            timeout_s=shard.timeout_s,
            memory_limit_mb=shard.memory_limit_mb,
            tag=self._next_tag(),
            harness_levels=sandbox.harness_levels(confined),
            user=sandbox.credentials(confined, str(run_dir)),
            uncounted=[str(cwd)],  # its checkout: not RAM the suite holds, as in bwrap
        )
        try:
            process.start()
        except (FileNotFoundError, PermissionError, NotADirectoryError) as error:
            raise BadInput(f"cannot run the test command '{argv[0]}': {error}") from error
        with self._lock:
            self._running.add(process)
            if self._cancelled:
                process.kill()
        try:
            seen = process.wait()
        finally:
            with self._lock:
                self._running.discard(process)
        exit_code, died_of = sandbox.exit_status(seen.exit_code, seen.signal, confined)
        observation = Observation(
            exit_code=exit_code,
            signal=died_of,
            report=junit.read_bytes() if junit.is_file() else None,
            log_tail=log_tail(str(log_path), LOG_TAIL_BYTES),
            rss_mb=round(seen.peak_kb / 1024, 1),
            seconds=seen.seconds,
            timed_out=seen.timed_out,
            oom=seen.oom,
            environment=report,
            sandbox=confined,
        )
        if seen.killed:
            return observation.model_copy(
                update={"failure_kind": "cancelled", "failure_reason": "cancelled"}
            )
        return observation

    # -- resident workers ------------------------------------------------------------------

    def _run_resident(
        self, shard: ShardRun, report: EnvironmentReport, runtime: dict[str, list[str]],
        output: list[str] | None = None,
    ) -> Observation:  # fmt: skip
        """Run the shard on an idle resident worker of its revision and environment (a new
        one when none is idle or fits): its own report, log and seconds; a worker the shard
        killed, grew, or whose checkout it changed is retired, the others kept. With
        `output`, the shard's whole log and its checkout are appended to it."""
        key = (shard.commit, shard.skip_sources)
        lane = self._take(key, shard, report, runtime)
        keep = False
        try:
            observation = self._shard_on(lane, shard, report, output)
            keep = (
                lane.worker.alive and not observation.modified_files
                and observation.failure_kind is None
                and lane.worker.session_kb() < RETIRE_KB
            )  # fmt: skip
        finally:
            if keep and not self._cancelled:
                with self._lock:
                    lane.idle_since = time.monotonic()
                    self._idle.setdefault(key, []).append(lane)
                self._trim_idle()
            else:
                self._retire(lane)
        return observation

    def _trim_idle(self) -> None:
        """Retire the longest idle workers beyond two per core (one per core for each of the
        two revisions whose shards run together): a revision, interpreter or command whose
        shards are done keeps no memory the running shards' budget needs. One per core in all
        retired a worker of one revision each time the other's finished a shard: a 32-shard
        gate on 2 cores started 11 workers (about 1.5 s of CPU each) where 4 would do."""
        cap = 2 * max(1, os.cpu_count() or 1)
        surplus: list[_Lane] = []
        with self._lock:
            idle = sorted(
                (lane for lanes in self._idle.values() for lane in lanes),
                key=lambda lane: lane.idle_since,
            )
            for lane in idle[: max(0, len(idle) - cap)]:
                for lanes in self._idle.values():
                    if lane in lanes:
                        lanes.remove(lane)
                surplus.append(lane)
        for lane in surplus:
            self._retire(lane)

    def _take(
        self, key: tuple[object, ...], shard: ShardRun, report: EnvironmentReport,
        runtime: dict[str, list[str]],
    ) -> _Lane:  # fmt: skip
        """An idle worker for `key` that fits the shard (its tmpfs cap at least the shard's,
        its memory under half the shard's limit), else a new one."""
        while True:
            with self._lock:
                idle = self._idle.get(key) or []
                lane = idle.pop() if idle else None
            if lane is None:
                return self._start_lane(shard, report, runtime)
            fits = lane.tmpfs_mb is None or (
                shard.memory_limit_mb is not None and 2 * shard.memory_limit_mb <= lane.tmpfs_mb
            )
            if fits and shard.memory_limit_mb is not None:
                fits = lane.worker.session_kb() * 2 < shard.memory_limit_mb * 1024
            if fits and lane.worker.alive:
                return lane
            self._retire(lane)

    def _start_lane(
        self, shard: ShardRun, report: EnvironmentReport, runtime: dict[str, list[str]]
    ) -> _Lane:
        """A new worker in a checkout and sandbox of its own, as a shard process gets them."""
        run_dir = Path(tempfile.mkdtemp(prefix=f"worker-{shard.commit[:12]}-", dir=self.work_dir))
        try:
            cwd = isolated_copy(self.repo, shard.commit, run_dir / "w")
            before = checkout_guard.tracked_snapshot(str(cwd))
            python = report.python or self.python
            start, _ = in_workdir(cwd, report, [])
            home, scratch = run_dir / "home", run_dir / "tmp"
            home.mkdir()
            scratch.mkdir()
            env = with_plugin_path(
                environment.shard_env(
                    dict(os.environ), runtime, pass_env=self.environment_request.pass_env,
                    home=str(home), tmp=str(scratch), file_limits={},
                )
            )  # fmt: skip
            env[ROOT_VARIABLE] = str(cwd)
            # Bytecode compiled once per worker, not once per shard (networkx: 0.6 s of CPU a
            # shard): its children write it next to the sources in the worker's own checkout,
            # as the project's CI does. A shard process's checkout is its own and removed
            # with it, so it writes none (`shard_env`).
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            if start != cwd:
                env[FILES_ROOT_VARIABLE] = str(cwd)
            if shutil.which(python, path=env.get("PATH")) is None:
                raise BadInput(f"cannot run the test command '{python}': not found")
            tmpfs_mb = 2 * shard.memory_limit_mb if shard.memory_limit_mb else None
            argv, confined = self._sandboxed(
                [python, "-m", WORKER_MODULE], start, run_dir, python, env, tmpfs_mb
            )
            env = sandbox.shard_environment(env, confined)
            with self._lock:
                self._workers_started += 1
                number = self._workers_started
            worker = ResidentWorker(
                argv, cwd=str(start), env=env, log_path=str(run_dir / "worker.log"),
                tag=self._next_tag(), harness_levels=sandbox.harness_levels(confined),
                user=sandbox.credentials(confined, str(run_dir)), uncounted=[str(cwd)],
            )  # fmt: skip
            try:
                self._spawner.run(worker.start)
            except (FileNotFoundError, PermissionError, NotADirectoryError) as error:
                raise BadInput(f"cannot run the test command '{python}': {error}") from error
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        lane = _Lane(
            worker=worker, number=number, run_dir=run_dir, checkout=cwd, before=before,
            python=python, confined=confined, tmpfs_mb=tmpfs_mb,
            scratch=(env.get("TMPDIR") or str(scratch), str(home)),
        )  # fmt: skip
        with self._lock:
            self._lanes.add(lane)
            if self._cancelled:
                worker.kill()
        return lane

    def _shard_on(
        self, lane: _Lane, shard: ShardRun, report: EnvironmentReport,
        output: list[str] | None = None,
    ) -> Observation:  # fmt: skip
        """One shard on `lane`'s worker, observed as `_run_in` observes a shard process: the
        gate's pytest command (`-m pytest ARGS`), or a program of the gate's (`-c PROGRAM
        ARGS`: collection)."""
        worker = lane.worker
        folder = lane.run_dir / "attempts" / f"{shard.shard_id}-{shard.revision}-{shard.attempt}"
        folder.mkdir(parents=True, exist_ok=True)
        if worker.user is not None:
            os.chown(folder, *worker.user)
        junit, log_path = folder / "junit.xml", folder / "output.log"
        _, files = in_workdir(lane.checkout, report, shard.files)
        argv = expand_command(shard.command, python=lane.python, junit=str(junit), files=files)
        limits = json.dumps(dict(shard.file_limits), sort_keys=True) if shard.file_limits else None
        request = {
            "args": argv[3:], "log": str(log_path), "env": {FILE_LIMITS_VARIABLE: limits},
            "scratch": list(lane.scratch), "program": argv[2] if argv[1] == "-c" else None,
        }  # fmt: skip
        try:
            seen = worker.run(
                request, timeout_s=shard.timeout_s, memory_limit_mb=shard.memory_limit_mb
            )
            exit_code, died_of = sandbox.exit_status(seen.exit_code, seen.signal, lane.confined)
            tail = log_tail(str(log_path), LOG_TAIL_BYTES)
            if not tail and not worker.alive:  # it died before the shard's log was opened
                tail = log_tail(str(lane.run_dir / "worker.log"), LOG_TAIL_BYTES)
            observation = Observation(
                exit_code=exit_code,
                signal=died_of,
                report=junit.read_bytes() if junit.is_file() else None,
                log_tail=tail,
                rss_mb=round(seen.peak_kb / 1024, 1),
                seconds=seen.seconds,
                timed_out=seen.timed_out,
                oom=seen.oom,
                environment=report,
                sandbox=lane.confined,
                worker=f"{lane.number}.{worker.shards}",
            )
            if output is not None:
                output += [log_path.read_text("utf-8", "replace"), str(lane.checkout)]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if seen.killed:
            return observation.model_copy(
                update={"failure_kind": "cancelled", "failure_reason": "cancelled"}
            )
        return observation.with_modified_checkout(
            checkout_guard.changed_tracked(
                str(lane.checkout), lane.before, self.environment_request.outputs
            )
        )

    def _retire(self, lane: _Lane) -> None:
        """End a worker and remove its folder."""
        lane.worker.close()
        with self._lock:
            self._lanes.discard(lane)
        shutil.rmtree(lane.run_dir, ignore_errors=True)

    def _sandboxed(
        self,
        argv: list[str],
        cwd: Path,
        run_dir: Path,
        python: str,
        env: dict[str, str],
        tmpfs_mb: float | None = None,
    ) -> tuple[list[str], str]:
        """The shard's command inside the sandbox (`adapters/executors/sandbox.py`): only its
        own attempt folder writable; the home directory, the user's repository, the ledger's
        folder and the other attempts' scratch out of sight; its interpreter, environment
        and the gate's plugin readable."""
        program = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
        readable = [
            *sandbox.prefixes(python),
            os.path.dirname(os.path.realpath(program)),
            *env.get("VIRTUAL_ENV", "").split(os.pathsep),
            *env.get("PYTHONPATH", "").split(os.pathsep),
        ]
        hidden = [str(self.repo), str(self.work_dir), str(self.worktrees.cache_dir),
                  *self.environment_request.hidden]  # fmt: skip
        needed = [
            *env.get("VIRTUAL_ENV", "").split(os.pathsep),
            *env.get("PYTHONPATH", "").split(os.pathsep),
        ]
        try:
            return sandbox.wrap(
                argv, cwd=str(cwd), writable=[str(run_dir)], readable=readable, hidden=hidden,
                path=env.get("PATH"), needed=needed, tmpfs_mb=tmpfs_mb,
            )  # fmt: skip
        except sandbox.Unavailable as error:
            raise BadInput(str(error)) from None

    def _next_tag(self) -> str:
        """A tag for one shard, after making sure the reaper watches this executor's tags."""
        with self._lock:
            if self._reaper is None:
                scratch = str(self.work_dir) if self._own_work_dir else ""
                self._reaper = subprocess.Popen(
                    [sys.executable, "-c", program("supervisor.py", "reaper.py"),
                     f"{self.tag}:", scratch],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
            self._shards_started += 1
            return f"{self.tag}:{self._shards_started}"

    def cancel_all(self) -> None:
        """Kill every running shard's process tree; later `run` calls start nothing."""
        with self._lock:
            self._cancelled = True
            running = list(self._running)
            lanes = list(self._lanes)
        for process in running:
            process.kill()
        for lane in lanes:
            lane.worker.kill()

    def close(self) -> None:
        """Remove temporary files and release the worktrees (they stay cached on disk)."""
        with self._lock:
            lanes = list(self._lanes)
            self._idle.clear()
        for lane in lanes:
            self._retire(lane)
        self._spawner.close()
        with self._lock:
            reaper, self._reaper = self._reaper, None
        if reaper is not None:
            if reaper.stdin is not None:
                reaper.stdin.close()  # end-of-file: it checks nothing of ours is left
            reaper.wait()
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        if self._own_worktrees:  # a Worktrees passed in is released by its owner
            self.worktrees.close()
        self._checkouts.clear()


def resident_command(command: Sequence[str]) -> bool:
    """Whether a shard's command can run on a resident worker: pytest run by the
    environment's interpreter with the gate's plugin and report (the gate's default command
    and what a declared invocation becomes), its files as separate arguments."""
    return (
        tuple(command[:3]) == ("{python}", "-m", "pytest")
        and PYTEST_PLUGIN in command
        and "{files}" in command
        and any("{junit}" in token for token in command)
    )


@dataclass(eq=False)
class _Lane:
    """A resident worker with its folder, checkout (and its tracked files as started), the
    sandbox it runs in, its tmpfs cap, and the folders emptied after each shard."""

    worker: ResidentWorker
    number: int
    run_dir: Path
    checkout: Path
    before: checkout_guard.TrackedSnapshot
    python: str
    confined: str
    tmpfs_mb: float | None
    scratch: tuple[str, str]
    idle_since: float = 0.0


def collected_items(output: str, checkout: str) -> list[str]:
    """Stable ids of the items `COLLECT_PROGRAM` printed in a run of `checkout`."""
    return named_items(item_paths(output, checkout))


def named_items(paths: Sequence[Sequence[str]]) -> list[str]:
    """Stable ids of the items a collect-only run read (`invocation_run.item_paths`, here or
    on a host): the file relative to the checkout, or `{site-packages}/...` for an installed
    module; files elsewhere are left out."""
    found: list[str] = []
    for file, name in paths:
        if os.path.isabs(file):
            file = stable_node_id(file).partition("::")[0]
            if not file.startswith(INSTALLED_PREFIX):
                continue
        found.append(f"{file}::{name}" if name else file)
    return found


def in_workdir(
    checkout: Path, report: EnvironmentReport, files: Sequence[str]
) -> tuple[Path, list[str]]:
    """Where a run starts and the files it names from there (`invocation_run.start_and_files`:
    the invocation's working directory, tox's `changedir`, the checkout as pytest's rootdir)."""
    workdir = report.invocation.workdir if report.invocation is not None else ""
    start, named = start_and_files(str(checkout), workdir, site_packages(report), files)
    return Path(start), named


def site_packages(report: EnvironmentReport) -> str:
    """The environment's site-packages, where `{site-packages}/...` targets are."""
    return site_packages_of(report.python, report.python_version)


def report_of(prepared: dict[str, object], where: str) -> EnvironmentReport:
    """The environment program's answer as the value the gate records."""
    fields = set(EnvironmentReport.model_fields)
    return EnvironmentReport.model_validate(
        {k: v for k, v in prepared.items() if k in fields} | {"where": where}
    )


def _runtime_of(prepared: dict[str, object]) -> dict[str, list[str]]:
    runtime = prepared.get("runtime")
    if not isinstance(runtime, dict):
        return {}
    return {str(k): [str(p) for p in v] for k, v in runtime.items() if isinstance(v, list)}


def setup_failed(report: EnvironmentReport) -> Observation:
    """A revision whose environment could not be made: unmeasured (`env-setup`), with the log."""
    return Observation.failed(
        "env-setup",
        "env-setup",
        report.error or "the environment could not be prepared",
        log_tail=report.log_tail.encode("utf-8", "replace")[-LOG_TAIL_BYTES:],
        environment=report,
    )


class LocalOptions(ExecutorOptions):
    """The local executor's one option: how its shard processes live (recorded in
    `RunStarted`, so a postmortem knows whether shards shared a process)."""

    shard_processes: Literal["resident", "fresh"] | None = option(
        "How the gate's pytest shards run here: resident (the default), each in a child "
        "forked from a worker per revision and core that loaded pytest and its plugins "
        "once; fresh, a process of its own started per shard.",
        metavar="resident|fresh",
    )


def _build(repo: Path, options: Any, request: EnvironmentRequest) -> Executor:
    # resident unless asked: a process's start paid once per worker, not once per shard
    resident = getattr(options, "shard_processes", None) != "fresh"
    return LocalExecutor(
        repo, python=request.python or sys.executable, environment_request=request,
        resident=resident,
    )  # fmt: skip


SPEC = ExecutorSpec(
    name="local",
    summary="this machine (the default)",
    options=LocalOptions,
    capabilities=Capabilities(runs_locally=True),
    build=_build,
)
