"""The release's evidence: `ReleaseInspected`, read from head's tree at gate start, and the
release's files (`DistributionsBuilt`, `UpgradeChecked`), built once the tests are done.

Runs started before `ReleaseInspected` existed get it appended when first approved (read then
from the same commits), so every report of the current format is derived from recorded
evidence. Runs started before release builds existed are not built afterwards: their
`distributions` and `upgrade` metrics say so (unmeasured).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from release_ledger.adapters import distributions
from release_ledger.adapters.executors.local import environments_dir
from release_ledger.adapters.release_info import inspect_release
from release_ledger.domain import events as ev
from release_ledger.domain.run_state import RunState
from release_ledger.ledger.hooks import HookContext
from release_ledger.ledger.service import Ledger
from release_ledger.projections.next_step import release_step
from release_ledger.projections.timeline import describe


def release_event(
    ledger: Ledger, started: ev.RunStarted
) -> tuple[ev.ReleaseInspected, dict[str, bytes]]:
    facts = inspect_release(Path(started.repo), started.head, started.base, started.head_ref)
    return ledger.make(ev.ReleaseInspected, started.run_id, **facts.fields), facts.artifacts


# --- the release's files and the upgrade, built once the tests are done ---------------------------


def _python_for(state: RunState, revision: str) -> str:
    """The revision's own interpreter when its environment was made here, else the gate's."""
    prepared = state.environments.get((revision, "local"))
    ready = prepared is not None and prepared.status == "ready"
    if ready and prepared is not None and os.path.isfile(prepared.python):
        return prepared.python
    return sys.executable


def release_builds(process: HookContext, state: RunState) -> bool:
    """A step hook (`ledger/hooks.py`), run before the owner's questions once every shard is done:
    build head's distributions, then try the upgrade from base's wheel, each recorded as an
    event (`DistributionsBuilt`, `UpgradeChecked`). What is recorded is never redone
    (`projections.next_step.release_step`); the verdict never reads these events, so the
    gate's exit code does not change — they feed the approval report. Returns True when it
    appended events."""
    step = release_step(state)
    if step is None:
        return False
    ledger, run_id, started = process.ledger, process.run_id, process.started
    repo = Path(started.repo)
    cache = str(environments_dir())
    hidden = ledger.private_folders()  # out of sight of head's build backend
    if step == "distributions":
        process.observer.notice("building head's sdist and wheel")
        try:
            built = distributions.build(
                repo, started.head, "head", cache, python=_python_for(state, "head"),
                hidden=hidden,
            )  # fmt: skip
        except Exception as error:  # the gate's own fault: recorded, never a crashed run
            built = distributions.Built(
                {"revision": "head", "commit": started.head, "status": "error",
                 "error": f"{type(error).__name__}: {error}"}
            )  # fmt: skip
        event = ledger.make(ev.DistributionsBuilt, run_id, **built.fields)
        ledger.append(run_id, [event], artifacts=built.artifacts)
        process.observer.notice(describe(event, built.artifacts))
        return True
    process.observer.notice("checking the upgrade from base's wheel to head's")
    python = _python_for(state, "head")
    common = {"base_commit": started.base, "head_commit": started.head}
    events: list[ev.Event] = []
    artifacts: dict[str, bytes] = {}
    try:
        head_built = distributions.build(
            repo, started.head, "head", cache, python=python, hidden=hidden
        )
        base_built = distributions.build(
            repo, started.base, "base", cache, python=python, check_readme=False, hidden=hidden
        )
        events.append(ledger.make(ev.DistributionsBuilt, run_id, **base_built.fields))
        artifacts |= base_built.artifacts
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
                python=python, hidden=hidden,
            )  # fmt: skip
    except Exception as error:  # the gate's own fault: recorded, never a crashed run
        skipped = f"the gate could not try it: {type(error).__name__}: {error}"
        upgraded = distributions.Upgraded(dict(common, skipped=skipped))
    artifacts |= upgraded.artifacts
    events.append(ledger.make(ev.UpgradeChecked, run_id, **upgraded.fields))
    ledger.append(run_id, events, artifacts=artifacts)
    for recorded in events:
        process.observer.notice(describe(recorded, artifacts))
    return True
