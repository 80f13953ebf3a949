"""The release's evidence: `ReleaseInspected`, read from head's tree at gate start, and the
release's files (`DistributionsBuilt`, `UpgradeChecked`), built while the tests run and
recorded once they are done.

Runs started before `ReleaseInspected` existed get it appended when first approved (read then
from the same commits), so every report of the current format is derived from recorded
evidence. Runs started before release builds existed are not built afterwards: their
`distributions` and `upgrade` metrics say so (unmeasured).
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release_ledger.adapters import distributions
from release_ledger.adapters.executors.local import environments_dir
from release_ledger.adapters.executors.supervisor import kill_tagged
from release_ledger.adapters.release_info import inspect_release
from release_ledger.domain import events as ev
from release_ledger.domain.run_state import HEAD, RunState
from release_ledger.ledger.background import Background
from release_ledger.ledger.hooks import HookContext
from release_ledger.ledger.service import Ledger
from release_ledger.projections.next_step import release_step
from release_ledger.projections.timeline import describe


def release_event(
    ledger: Ledger, started: ev.RunStarted
) -> tuple[ev.ReleaseInspected, dict[str, bytes]]:
    facts = inspect_release(Path(started.repo), started.head, started.base, started.head_ref)
    return ledger.make(ev.ReleaseInspected, started.run_id, **facts.fields), facts.artifacts


# --- the release's files and the upgrade, recorded once the tests are done -----------------------


def _python_for(state: RunState, revision: str) -> str:
    """The revision's own interpreter when its environment was made here, else the gate's."""
    prepared = state.environments.get((revision, "local"))
    ready = prepared is not None and prepared.status == "ready"
    if ready and prepared is not None and os.path.isfile(prepared.python):
        return prepared.python
    return sys.executable


@dataclass
class _Made:
    """What one release step made, ready to append: its events' kinds and fields, artifacts."""

    events: list[tuple[type[ev.Event], dict[str, Any]]]
    artifacts: dict[str, bytes]


def _distributions(started: ev.RunStarted, python: str, hidden: Sequence[str], tag: str) -> _Made:
    """Head's sdist and wheel (`DistributionsBuilt`)."""
    try:
        built = distributions.build(
            Path(started.repo), started.head, "head", str(environments_dir()), python=python,
            hidden=hidden, tag=tag,
        )  # fmt: skip
    except Exception as error:  # the gate's own fault: recorded, never a crashed run
        built = distributions.Built(
            {"revision": "head", "commit": started.head, "status": "error",
             "error": f"{type(error).__name__}: {error}"}
        )  # fmt: skip
    return _Made([(ev.DistributionsBuilt, built.fields)], built.artifacts)


def _base_build(
    started: ev.RunStarted, python: str, hidden: Sequence[str], tag: str
) -> distributions.Built:
    """Base's wheel for the upgrade: the one base's environment installs, built once for both
    (no sdist, no README check: head's are the release's)."""
    return distributions.build(
        Path(started.repo), started.base, "base", str(environments_dir()), python=python,
        check_readme=False, hidden=hidden, tag=tag, wheel_only=True,
    )  # fmt: skip


def _upgrade(
    started: ev.RunStarted, python: str, hidden: Sequence[str], tag: str,
    base_build: Background[distributions.Built] | None = None,
) -> _Made:  # fmt: skip
    """Base's distributions (`DistributionsBuilt`) and the upgrade from base's wheel to
    head's (`UpgradeChecked`); base's built by `base_build` where it was started already."""
    repo, cache = Path(started.repo), str(environments_dir())
    common = {"base_commit": started.base, "head_commit": started.head}
    made = _Made([], {})
    try:
        head_built = distributions.build(
            repo, started.head, "head", cache, python=python, hidden=hidden, tag=tag
        )
        if base_build is not None:
            base_built = base_build.result()
        else:
            base_built = _base_build(started, python, hidden, tag)
        made.events.append((ev.DistributionsBuilt, base_built.fields))
        made.artifacts |= base_built.artifacts
        if base_built.wheel is None:
            why = {"not-packaged": "base is not a packaged project: nothing to upgrade from"}
            skipped = why.get(base_built.fields["status"], "base's wheel could not be built")
            upgraded = distributions.Upgraded(dict(common, skipped=skipped))
        elif head_built.wheel is None:
            skipped = "head's wheel could not be built again for the upgrade"
            upgraded = distributions.Upgraded(dict(common, skipped=skipped))
        else:
            upgraded = distributions.upgrade(
                base_built.wheel, head_built.wheel, started.base, started.head, cache,
                python=python, hidden=hidden, tag=tag,
            )  # fmt: skip
    except Exception as error:  # the gate's own fault: recorded, never a crashed run
        skipped = f"the gate could not try it: {type(error).__name__}: {error}"
        upgraded = distributions.Upgraded(dict(common, skipped=skipped))
    made.artifacts |= upgraded.artifacts
    made.events.append((ev.UpgradeChecked, upgraded.fields))
    return made


_NOTICES = {
    "distributions": "building head's sdist and wheel",
    "upgrade": "checking the upgrade from base's wheel to head's",
}


def _append(process: HookContext, made: _Made) -> None:
    ledger, run_id = process.ledger, process.run_id
    events = [ledger.make(kind, run_id, **fields) for kind, fields in made.events]
    ledger.append(run_id, events, artifacts=made.artifacts)
    for recorded in events:
        process.observer.notice(describe(recorded, made.artifacts))


def release_builds(process: HookContext, state: RunState) -> bool:
    """A step hook (`ledger/hooks.py`), run before the owner's questions once every shard is done:
    build head's distributions, then try the upgrade from base's wheel, each recorded as an
    event (`DistributionsBuilt`, `UpgradeChecked`). What is recorded is never redone
    (`projections.next_step.release_step`); the verdict never reads these events, so the
    gate's exit code does not change — they feed the approval report. Returns True when it
    appended events. (`ReleaseWork` does the same work while the shards run.)"""
    step = release_step(state)
    if step is None:
        return False
    process.observer.notice(_NOTICES[step])
    work = _distributions if step == "distributions" else _upgrade
    hidden = process.ledger.private_folders()  # out of sight of head's build backend
    _append(process, work(process.started, _python_for(state, "head"), hidden, ""))
    return True


class ReleaseWork:
    """The release builds started while the shards run (issue 41): `begin` (an `EarlyWork`,
    called before each step) starts, in a background thread, what `release_builds` would do at
    the end, once head's interpreter is known; the step hook (this object, called like
    `release_builds`) then waits for it and appends its events, where `release_builds` would
    append them, with the same content. Where the work was not started, or head's interpreter
    the ledger names at the end is not the binary it used, the hook does it then, as
    `release_builds`. Base's wheel is taken once discovery is done: its environment's.
    `cancel` (Ctrl-C, the run taken over) kills what it runs (every step carries its tag)
    and drops it: nothing is recorded, resume redoes it. All of it runs `OFF_THE_PATH`
    nicer than the gate."""

    def __init__(self) -> None:
        self.tag = f"rl-release-{os.getpid()}-{secrets.token_hex(4)}"
        self._steps: tuple[str, ...] = ()
        self._python = ""
        self._work: Background[dict[str, _Made]] | None = None
        self._cancelled = threading.Event()
        # Set once discovery is done: every environment this gate builds here is built (or
        # failed), so base's wheel is its environment's, never built beside it (`_base_files`).
        self._discovered = threading.Event()

    def begin(self, process: HookContext, state: RunState) -> None:
        """Start the release work now, unless started, off (`--no-release-builds`), recorded
        (`release_step`), or head's interpreter cannot be known yet (asked again before the
        next step)."""
        if state.discovered:
            self._discovered.set()
        if self._work is not None:
            return
        step = release_step(state)
        if step is None:
            return
        head_python = self._head_python(process, state)
        if head_python is None:
            return
        self._steps = ("distributions", "upgrade") if step == "distributions" else ("upgrade",)
        started, hidden = process.started, process.ledger.private_folders()
        process.observer.notice(f"{_NOTICES[step]}, while the tests run")

        def work() -> dict[str, _Made]:
            self._python = python = head_python()
            made: dict[str, _Made] = {}
            if not python:
                return made
            # Base's files while head's are built: the upgrade needs both, and neither reads
            # the other (unused, unrecorded, where head's do not build).
            base = Background(lambda: self._base_files(started, python, hidden), "base",
                              OFF_THE_PATH)  # fmt: skip
            for name in self._steps:
                if self._cancelled.is_set():
                    break
                if name == "distributions":
                    made[name] = _distributions(started, python, hidden, self.tag)
                    if made[name].events[0][1].get("status") != "built":
                        break  # no upgrade to try (`release_step`)
                else:
                    made[name] = _upgrade(started, python, hidden, self.tag, base)
            return made

        self._work = Background(work, "release-builds", OFF_THE_PATH)

    def _base_files(
        self, started: ev.RunStarted, python: str, hidden: Sequence[str]
    ) -> distributions.Built:
        """Base's wheel once discovery is done: the one base's environment built, reused, not
        built beside it by a second backend run competing for its lock; built here only where
        no environment of this gate made it (another executor's host, `--env none`)."""
        self._discovered.wait()
        if self._cancelled.is_set():
            raise RuntimeError("the release work was cancelled")
        return _base_build(started, python, hidden, self.tag)

    @staticmethod
    def _head_python(process: HookContext, state: RunState) -> Callable[[], str] | None:
        """Head's interpreter for the builds: the one `_python_for` reads where head's
        environment is recorded; else the interpreter the lane's executor makes head's
        environment from here (None where it does not run here: not known yet). Head's
        environment itself is not needed — the build backend runs in an isolated build
        environment and the upgrade in a fresh one — only its interpreter, which a venv
        links to: the hook at the end takes the work where both are the same binary."""
        if (HEAD, "local") in state.environments:
            recorded = _python_for(state, HEAD)
            return lambda: recorded
        interpreter = process.interpreter
        return None if interpreter is None else lambda: interpreter

    def started(self) -> bool:
        return self._work is not None

    def wait(self, timeout_s: float) -> bool:
        """Whether the background work has ended, waiting at most `timeout_s` for it."""
        return self._work is not None and self._work.wait(timeout_s)

    def __call__(self, process: HookContext, state: RunState) -> bool:
        """The step hook at the end: the background work's events for the step still to record,
        or the work done now (`release_builds`)."""
        step = release_step(state)
        if step is None:
            return False
        made = self._made(step, _python_for(state, HEAD))
        if made is None:
            return release_builds(process, state)
        process.observer.notice(_NOTICES[step])
        _append(process, made)
        return True

    def _made(self, step: str, python: str) -> _Made | None:
        if self._work is None or step not in self._steps:
            return None
        self._discovered.set()  # a completed run was discovered (a `begin` may not have said)
        try:
            made = self._work.result().get(step)
        except Exception:  # the glue's own fault, not the build's: done again at the end
            return None
        return made if _same_binary(python, self._python) else None

    def cancel(self) -> None:
        """Stop the background work and every process it started; its results are dropped."""
        work = self._work
        if work is None or work.done():
            return
        self._work = None
        self._cancelled.set()
        self._discovered.set()  # base's thread, if waiting, ends
        deadline = time.monotonic() + CANCEL_WAIT_S
        while not work.wait(0.1) and time.monotonic() < deadline:
            kill_tagged(self.tag)  # each step as it starts, until the thread has seen the flag


def _same_binary(one: str, other: str) -> bool:
    """Two interpreter paths that run the same binary (a venv's `python` links to it)."""
    return bool(one and other) and os.path.realpath(one) == os.path.realpath(other)


# Nothing waits for the release work before the tests are done: it runs this much nicer than
# the gate (`Background`), so the steps the verdict waits for take the cores first.
OFF_THE_PATH = 10
CANCEL_WAIT_S = 30.0  # then the daemon thread is left to end with the gate
