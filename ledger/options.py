"""The gate's settings as one model: each field of `GateOptions` is a setting declared once
(`setting(default, help, flag=..., table=..., ...)`: its type, default, flag, table key,
range, help group, the revision its table key is read at, its key in `RunStarted`), in the
order `ledger gate --help` lists them; `SETTINGS` is read from those fields. From them come
the checks made before anything is appended (`validate`), what `RunStarted` records
(`GateOptions.recorded`) and how a resumed run reads it back (`options_from`). The command
line and `[tool.release-ledger]` are read into it by `ledger/settings.py`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from release_ledger.adapters.executors import REGISTRY
from release_ledger.adapters.setting import HELP_GROUPS as HELP_GROUPS
from release_ledger.adapters.setting import SAME, Setting, declare, declared_in, setting, unique
from release_ledger.domain import events as ev
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import DEFAULT_PYTEST_COMMAND, EnvironmentRequest
from release_ledger.domain.resources import DEFAULT_THRESHOLDS
from release_ledger.domain.rules import get_rule
from release_ledger.domain.timing import DEFAULT_FILE_FLOOR_S, DEFAULT_TIME_FACTOR

YEAR_S = 366 * 24 * 3600.0
MEASURE_MODES = ("inplace", "solo", "always", "never", "missing")  # missing: solo (before 0.2)
_TB = 1024 * 1024  # GiB and MB are bounded by an exabyte-ish figure: finite, no more


def _cpus() -> int:
    return os.cpu_count() or 1


# Each field is a setting the user gives, in the order `--help` lists them within their help
# groups (`group`), then what the gate works out itself. A table key is read at base (the
# gate's policy) unless it is `at_head` (how the code is installed). `{default}` in a help
# reads as the field's default.
@dataclass(frozen=True, kw_only=True)
class GateOptions:
    # fmt: off
    base: str = field(metadata=declare(
        "The previous release (tag, branch, SHA); or base in [tool.release-ledger] (a tag "
        "there).", flag="--base", table="base", metavar="REV", group="What to test"))
    head: str = setting("HEAD", "The candidate.", flag="--head", flag_default="HEAD",
                        metavar="REV", group="What to test")
    repo: Path = field(metadata=declare(
        "Repository.", kind="path", flag="--repo", flag_default=".", group="What to test"))
    environment: str = setting(
        "auto", "Each revision's environment: auto (build it from the revision's own "
        "dependency declarations; default), none (the gate's interpreter), or a setup "
        "command run in the checkout with {python} and {venv}.",
        name="env", flag="--env", table="env", metavar="auto|none|COMMAND", at_head=True,
        recorded="env", before="none", group="Environments")
    # The interpreter matrix (`--python`): {"label", "path", "version"} each, in order; empty
    # runs on the gate's own interpreter.
    interpreters: tuple[dict[str, str], ...] = setting(
        (), "Run the gate on each of these interpreters (an interpreter matrix): "
        "versions, interpreter paths, or auto (the versions the project's classifiers and "
        "tox env_list name within requires-python, that this machine has). Each gets its "
        "own environments and shard runs; the verdict is per interpreter and overall. "
        "Default: the gate's own interpreter.",
        name="python", flag="--python", table="python", table_type=str | list[str],
        metavar="3.X[,3.Y...]|auto", at_head=True, group="Environments")
    shards: int | None = setting(
        None, "Shard count (default: twice --jobs, fewer for a small suite: at least 2.5 "
        "planned seconds a shard).", kind="int", flag="--shards",
        table="shards", low=1, high=100_000, low_open=False, group="Resources")
    budget_gib: float = setting(
        8.0, "Memory per shard [default: {default}].", kind="float", flag="--budget-gib",
        table="budget-gib", low=0, high=_TB, recorded="budget_gib", group="Resources")
    rounds: int = setting(
        2, "Retry rounds [default: {default}].", kind="int", flag="--rounds", table="rounds",
        low=0, high=100, low_open=False, recorded="rounds", group="Policy")
    jobs: int = field(default_factory=_cpus, metadata=declare(
        "Parallel processes (default: CPU count).", kind="int", flag="--jobs", table="jobs",
        low=1, high=4096, low_open=False, recorded="jobs", group="Resources"))
    timeout_s: float = setting(
        1200.0, "Seconds per shard before its group is killed [default: {default}].",
        kind="float", flag="--timeout", table="timeout", low=0, high=YEAR_S,
        recorded="timeout_s", group="Resources")
    # Each file's time limit: `time_factor` x what it is known to take, at least
    # `time_floor_s`, at most `timeout_s` (`domain/timing.py`, which holds the defaults).
    time_factor: float = setting(
        DEFAULT_TIME_FACTOR, "A file runs at most this many times what it is known to take "
        "(its measurement, or base's run in this gate) before the run is ended, naming "
        "the test [default: {default}].", kind="float", flag="--time-factor",
        table="time-factor", low=1, high=1000, low_open=False, recorded="time_factor",
        group="Resources")
    time_floor_s: float = setting(
        DEFAULT_FILE_FLOOR_S, "A file's time limit is never under this many seconds "
        "[default: {default}].", kind="float", flag="--time-floor-s", table="time-floor-s",
        low=0, high=YEAR_S, recorded="time_floor_s", group="Resources")
    rule: str = setting(
        "default", "Aggregation rule [default: {default}].", flag="--rule", table="rule",
        group="Policy")
    command: tuple[str, ...] = setting(
        DEFAULT_PYTEST_COMMAND, "Test command with {python}, {junit}, {files} (default: "
        "pytest).", flag="--command", table="command", table_type=str | list[str],
        metavar="TEMPLATE", group="What to test")
    # Glob patterns for non-pytest runners.
    discover: tuple[str, ...] = setting(
        (), "Test file globs for non-pytest commands (repeatable).", flag="--discover",
        table="discover", table_type=list[str], metavar="GLOB", multiple=True,
        recorded="discover", group="What to test")
    measure: str = setting(
        "inplace", "How files are measured: inplace (inside the shard runs, by the gate's "
        "pytest plugin; default), solo (each new file alone first, the reference "
        "behaviour), always (every file alone), never (nominal costs only). missing = solo.",
        kind="choice", flag="--measure", table="measure", choices=MEASURE_MODES,
        recorded="measure", before="solo", group="Resources")
    isolation_budget_gib: float | None = setting(  # None: min(4x budget, 32 GiB)
        None, "Memory for a file run alone (isolation, last bisection level) [default: 4x "
        "--budget-gib, at most 32].", kind="float", flag="--isolation-budget-gib",
        table="isolation-budget-gib", low=0, high=_TB, group="Resources")
    executor: str = setting(
        "local", "Where shards run.", kind="choice", flag="--executor", table="executor",
        group="Executor")
    deadline_s: float = setting(
        1800.0, "Question deadline (45s, 30m, 2h) [default: 30m].", name="deadline",
        flag="--deadline", table="deadline", table_type=str, low=0, high=YEAR_S,
        recorded="deadline_s", group="Policy")
    wait: bool = setting(
        False, "Wait for the owner's answers until each deadline.", kind="flag",
        flag="--wait", recorded="wait", group="Policy")
    question_budget: int = setting(
        3, "Questions the gate may put to the owner per run [default: {default}].",
        kind="int", flag="--questions", table="questions", low=0, high=1000, low_open=False,
        recorded="question_budget", group="Policy")
    max_report_mb: float = setting(
        64.0, "A larger JUnit report makes its attempt unmeasured [default: {default}].",
        kind="float", flag="--max-report-mb", table="max-report-mb", low=0, high=_TB,
        recorded="max_report_mb", group="Resources")
    # Build head's sdist and wheel and try the upgrade from base's, recorded once the tests
    # are done, started while they run (`ledger.release.ReleaseWork`); they feed the approval
    # report, never the verdict.
    release_builds: bool = setting(
        True, "Once the tests are done, build head's sdist and wheel and try the upgrade "
        "from base's wheel, for the approval report [default: on].", kind="switch",
        flag="--release-builds", table="release-builds", recorded="release_builds",
        before=False, group="Policy")
    # Run head's introduced failures again with base's package set when the package sets
    # differ, to name the change that introduced each (`ledger/steps/attribute.py`).
    attribution: bool = setting(
        True, "When head's package set differs from base's, run head's introduced failures "
        "again with base's packages and name which change introduced each [default: on].",
        kind="switch", flag="--attribution", table="attribution", recorded="attribution",
        before=False, group="Policy")
    # Both revisions resolve unpinned dependencies as the index stood then.
    exclude_newer: str = setting(
        "", "Resolve both revisions' unpinned dependencies as PyPI stood then (uv's "
        "--exclude-newer) [default: head, the head commit's committer date].",
        name="resolve_as_of", flag="--resolve-as-of", table="resolve-as-of",
        metavar="head|base|now|DATE", at_head=True, recorded="exclude_newer",
        group="Environments")
    # Variables of the gate's environment the tests may see besides the allow-list.
    pass_env: tuple[str, ...] = setting(
        (), "A variable of this environment the tests may see besides PATH, the locale and "
        "the like (repeatable; NAME_* for a prefix). Nothing else reaches them.",
        flag="--pass-env", table="pass-env", table_type=list[str], metavar="NAME",
        multiple=True, recorded="pass_env", group="Environments")
    # A file is `heavier` (`slower`) at head when over `factor` times base's figure and more
    # than the floor above it (`domain/resources.py`, which holds the defaults).
    heavier_factor: float = setting(
        DEFAULT_THRESHOLDS["memory_factor"], "A file whose peak memory at head is over this "
        "many times base's, and more than --heavier-floor-mb above it, is heavier "
        "[default: {default}].", kind="float", flag="--heavier-factor",
        table="heavier-factor", low=1, high=1000, low_open=False, group="Policy")
    heavier_floor_mb: float = setting(
        DEFAULT_THRESHOLDS["memory_floor_mb"], "See --heavier-factor [default: {default}].",
        kind="float", flag="--heavier-floor-mb", table="heavier-floor-mb", low=0, high=_TB,
        low_open=False, group="Policy")
    slower_factor: float = setting(
        DEFAULT_THRESHOLDS["time_factor"], "A file whose wall time at head is over this many "
        "times base's, and more than --slower-floor-s above it, is slower "
        "[default: {default}].", kind="float", flag="--slower-factor", table="slower-factor",
        low=1, high=1000, low_open=False, group="Policy")
    slower_floor_s: float = setting(
        DEFAULT_THRESHOLDS["time_floor_s"], "See --slower-factor [default: {default}].",
        kind="float", flag="--slower-floor-s", table="slower-floor-s", low=0, high=YEAR_S,
        low_open=False, group="Policy")
    extras: tuple[str, ...] = setting(
        (), "The project's extras its own tests need.", table="extras",
        table_type=list[str], at_head=True, recorded="extras", group="Environments")
    # Tracked files the suite rewrites; any other change makes an attempt unmeasured.
    outputs: tuple[str, ...] = setting(
        (), "Tracked files the suite rewrites (fnmatch patterns).", table="outputs",
        table_type=list[str], recorded="outputs", group="Policy")
    # Tests (node ids) whose failures are never blamed on head: each is exonerated as
    # `quarantined` (`ledger/steps/exonerate.py`); the rule says what that means.
    quarantine: tuple[str, ...] = setting(
        (), "A test (node id, tests/x.py::test_y) whose failure is never blamed on head: "
        "exonerated as quarantined, reported, and failing only under strict (repeatable).",
        flag="--quarantine", table="quarantine", table_type=list[str], metavar="NODEID",
        multiple=True, recorded="quarantine", group="Policy")
    # fmt: on

    # --- what the gate works out itself (no flag, no table key) ---
    # The chosen executor's options, as its own model (`adapters/executors/port.py`) checked
    # them: its settings are declared there.
    executor_options: dict[str, Any] = field(default_factory=dict)
    # The memory this machine had for the shards at the gate's start (`adapters/machine.py`;
    # None: not read, as for a pool): no budget, and no sum of running reservations, exceeds it.
    machine_mb: float | None = None
    # Policy keys head's `[tool.release-ledger]` sets otherwise than base's (key -> head's
    # value): not applied, since policy is read at base; recorded and told so that nobody
    # mistakes the candidate's table for the one that judged it.
    head_settings_ignored: dict[str, Any] = field(default_factory=dict)
    # Keys of base's table this version cannot read (unknown, or of the wrong type): skipped,
    # never fatal, since a released commit cannot be corrected.
    base_settings_unread: tuple[str, ...] = ()

    @property
    def environment_request(self) -> EnvironmentRequest:
        request = EnvironmentRequest.parse(self.environment)
        return request.model_copy(
            update={
                "extras": self.extras,
                "exclude_newer": self.exclude_newer,
                "pass_env": self.pass_env,
                "outputs": self.outputs,
            }
        )

    @property
    def environment_setting(self) -> str:
        """What the result cache keys on: the setting, its extras, and for `auto` the way
        environments are made (format 3: the first declared source, the wheel installed)."""
        keyed = self.environment + (" sources-3" if self.environment == "auto" else "")
        keyed += f" extras={','.join(self.extras)}" if self.extras else ""
        keyed += f" pass-env={','.join(self.pass_env)}" if self.pass_env else ""
        return keyed + (f" outputs={','.join(self.outputs)}" if self.outputs else "")

    @property
    def resource_thresholds(self) -> dict[str, float]:
        return {
            "memory_factor": self.heavier_factor,
            "memory_floor_mb": self.heavier_floor_mb,
            "time_factor": self.slower_factor,
            "time_floor_s": self.slower_floor_s,
        }

    @property
    def shard_count(self) -> int:
        return self.shards if self.shards else 2 * max(1, self.jobs)

    @property
    def budget_mb(self) -> float:
        """Memory per shard: `--budget-gib`, never more than the machine has (`machine_mb`)."""
        return self._on_machine(self.budget_gib * 1024)

    @property
    def isolation_budget_mb(self) -> float:
        """A file run alone gets more room than a shard, so a heavy file is measured rather
        than killed again: 4x the shard budget or 32 GiB, whichever is smaller (never less
        than the shard budget), and never more than the machine has."""
        if self.isolation_budget_gib is not None:
            wanted = max(self.isolation_budget_gib, self.budget_gib) * 1024
        else:
            wanted = max(min(4 * self.budget_gib, 32.0), self.budget_gib) * 1024
        return self._on_machine(wanted)

    def _on_machine(self, wanted_mb: float) -> float:
        return min(wanted_mb, self.machine_mb) if self.machine_mb else wanted_mb

    def lowered(self) -> list[str]:
        """What the machine's memory lowered, in words (the gate says so at its start)."""
        said = []
        for name, flag, asked, got in (
            ("shard budget", "--budget-gib", self.budget_gib * 1024, self.budget_mb),
            ("isolation budget", "--isolation-budget-gib",
             self._with_machine(None).isolation_budget_mb, self.isolation_budget_mb),
        ):  # fmt: skip
            if got < asked:
                said.append(f"the {name} ({flag}) is lowered from {asked:.0f} MB to {got:.0f} MB: "
                            "what this machine has available")  # fmt: skip
        return said

    def _with_machine(self, machine_mb: float | None) -> GateOptions:
        return dataclasses.replace(self, machine_mb=machine_mb)

    def recorded(self) -> dict[str, Any]:
        """The options as recorded in `RunStarted`, enough to resume the run elsewhere."""
        recorded: dict[str, Any] = {
            s.recorded: _as_recorded(getattr(self, s.target)) for s in SETTINGS if s.recorded
        }
        # What is recorded otherwise than as given: the effective shard count and isolation
        # budget, the executor's options as its model checked them, the thresholds together.
        recorded |= {
            "shards": self.shard_count,
            "shards_fitted": self.shards is None,  # the default: fewer for a small suite
            "isolation_budget_gib": self.isolation_budget_mb / 1024,
            "executor_options": self.executor_options,
            "resources": self.resource_thresholds,
            "machine_mb": self.machine_mb,
        }
        if self.interpreters:
            recorded["interpreters"] = [dict(i) for i in self.interpreters]
        if self.head_settings_ignored:
            recorded["head_settings_ignored"] = self.head_settings_ignored
        if self.base_settings_unread:
            recorded["base_settings_unread"] = list(self.base_settings_unread)
        return recorded

    def told_settings(self) -> list[str]:
        """What the gate says at its start of the tables it did not follow."""
        said = []
        if self.head_settings_ignored:
            said.append(
                "head's [tool.release-ledger] sets "
                + ", ".join(sorted(self.head_settings_ignored))
                + " otherwise than base's: not applied (the gate's policy is read at base, the "
                "release already approved; give a flag to apply a value to this gate)"
            )
        if self.base_settings_unread:
            said.append(
                "base's [tool.release-ledger] has keys this version cannot read, skipped: "
                + ", ".join(self.base_settings_unread)
            )
        return said

    def lane_request(self, interpreter: dict[str, str]) -> EnvironmentRequest:
        """The environment request of one interpreter's lane of the matrix."""
        return self.environment_request.model_copy(
            update={"interpreter": interpreter["label"], "python": interpreter.get("path", "")}
        )


# Every gate setting's default, read from `GateOptions` itself: the command line's help, the
# repository table's reading (`ledger/settings.py`) and `options_from` take them from here.
DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for f in dataclasses.fields(GateOptions)
    if f.default is not dataclasses.MISSING
}

# The gate's settings as the user gives them, read from `GateOptions`'s fields in their order
# (the order `--help` lists them within their groups): the command line's flags, the
# `[tool.release-ledger]` reader, what `RunStarted` records and `validate`'s ranges are made
# from this list and the executors' own (`EXECUTOR_SETTINGS`).
SETTINGS: tuple[Setting, ...] = declared_in(GateOptions)

# The executors by name, as the command line offers them (`--executor`); cli/ names no adapter.
EXECUTORS = REGISTRY
# Each executor's own settings (its flags and table keys), from its options model: shared
# flags declared once.
EXECUTOR_SETTINGS: tuple[Setting, ...] = tuple(
    unique([setting for spec in REGISTRY.values() for setting in spec.settings])
)


def validate(options: GateOptions) -> None:
    """Reject bad options before anything is appended: every number finite and in range
    (the ranges declared with the settings, the gate's and each executor's)."""
    get_rule(options.rule)
    for declared in SETTINGS:
        problem = declared.out_of_range(getattr(options, declared.target))
        if problem:
            raise BadInput(problem)
    for declared in EXECUTOR_SETTINGS:
        problem = declared.out_of_range(options.executor_options.get(declared.target))
        if problem:
            raise BadInput(problem)
    if options.measure not in MEASURE_MODES:
        raise BadInput(
            f"--measure must be one of {', '.join(MEASURE_MODES)}, got {options.measure!r}"
        )
    if not options.command:
        raise BadInput("--command must not be empty")
    if not any("{files}" in token for token in options.command):
        raise BadInput("--command must contain the {files} placeholder")
    if not any("{junit}" in token for token in options.command):
        raise BadInput("--command must contain the {junit} placeholder")
    try:
        options.environment_request  # noqa: B018  (parsed for its error)
    except ValueError as error:
        raise BadInput(str(error)) from None


def options_from(started: ev.RunStarted) -> GateOptions:
    """The options a run was started with, as `RunStarted` recorded them (`recorded`): each
    declared setting read back by its `recorded` key, or as it was before it existed."""
    recorded = started.options
    return GateOptions(
        repo=Path(started.repo),
        base=started.base,
        head=started.head,
        rule=started.rule,
        command=tuple(started.command),
        executor=started.executor,
        **{s.target: _read_back(s, recorded) for s in SETTINGS if s.recorded},
        shards=None if recorded.get("shards_fitted") else int(recorded.get("shards", 2)),
        isolation_budget_gib=_recorded_number(recorded.get("isolation_budget_gib")),
        executor_options=dict(recorded.get("executor_options", {})),
        interpreters=tuple(
            {str(k): str(v) for k, v in i.items()}
            for i in recorded.get("interpreters", ())
            if isinstance(i, dict)
        ),
        **_recorded_thresholds(recorded.get("resources")),
        machine_mb=_recorded_number(recorded.get("machine_mb")),
        head_settings_ignored=dict(recorded.get("head_settings_ignored", {})),
        base_settings_unread=tuple(str(k) for k in recorded.get("base_settings_unread", ())),
    )


def _as_recorded(value: Any) -> Any:
    """A setting's value as `RunStarted` records it (JSON: a list for a tuple)."""
    return list(value) if isinstance(value, tuple) else value


def _read_back(setting: Setting, recorded: dict[str, Any]) -> Any:
    """A recorded setting's value, of its default's type; `before` when the run predates it."""
    assert setting.recorded is not None
    default = _default_of(setting.target)
    if setting.recorded not in recorded:
        return default if setting.before is SAME else setting.before
    value = recorded[setting.recorded]
    if isinstance(default, tuple):
        return tuple(str(item) for item in value)
    return type(default)(value)


def _default_of(target: str) -> Any:
    """A field's default; a factory's made here (`jobs`: this machine's CPU count)."""
    if target in DEFAULTS:
        return DEFAULTS[target]
    factory = _FIELDS[target].default_factory
    assert factory is not dataclasses.MISSING, target
    return factory()


_FIELDS = {f.name: f for f in dataclasses.fields(GateOptions)}


def _recorded_thresholds(recorded: Any) -> dict[str, Any]:
    """The resource thresholds `RunStarted` recorded (the defaults for runs before them)."""
    given = recorded if isinstance(recorded, dict) else {}
    names = {"heavier_factor": "memory_factor", "heavier_floor_mb": "memory_floor_mb",
             "slower_factor": "time_factor", "slower_floor_s": "time_floor_s"}  # fmt: skip
    return {field: float(given.get(key, DEFAULT_THRESHOLDS[key])) for field, key in names.items()}


def _recorded_number(value: Any) -> float | None:
    return float(value) if value is not None else None


# --- the process manager ----------------------------------------------------------------------
