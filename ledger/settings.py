"""The gate's settings: command-line flags over the repository's `[tool.release-ledger]`
table over the built-in defaults. The table is read at base for the gate's policy and at head
for what describes the code being tested (`adapters/setting.Setting.at_head`).

The effective settings are what `RunStarted` records, so a run says what it was asked to do
whichever source a value came from.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from release_ledger.adapters import git, interpreters
from release_ledger.adapters.executors import spec_for
from release_ledger.adapters.executors.env_installer import find_uv
from release_ledger.adapters.executors.env_variables import (
    PASS_ENV_PATTERN,
    SHARD_ENV_NEVER,
    env_name_matches,
)
from release_ledger.adapters.interpreters import Interpreter
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import DEFAULT_PYTEST_COMMAND
from release_ledger.ledger.options import DEFAULTS, EXECUTOR_SETTINGS, SETTINGS, GateOptions


def _table_model() -> type[BaseModel]:
    """`[tool.release-ledger]`, made from the settings' declared keys (the gate's and every
    executor's): every key optional; an unknown key is an error, not ignored."""
    fields: dict[str, Any] = {
        setting.name: (setting.table_type | None, Field(default=None, alias=setting.table))
        for setting in (*SETTINGS, *EXECUTOR_SETTINGS)
        if setting.table
    }
    # Read by other commands (approval): known here so they are not refused as unknown.
    fields["rollback"] = (Any, None)
    fields["required_checks"] = (Any, Field(default=None, alias="required-checks"))
    return create_model(
        "RepositorySettings",
        # Strict: a TOML value has its type already; `budget-gib = true` is refused, not 1.0.
        __config__=ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True),
        **fields,
    )


RepositorySettings = _table_model()


def parse_duration(text: str) -> float:
    """`45s`, `30m`, `2h` or plain seconds; positive and finite."""
    units = {"s": 1, "m": 60, "h": 3600}
    text = str(text).strip().lower()
    try:
        unit = units.get(text[-1:], 0)
        value = float(text[:-1]) * unit if unit else float(text)
    except ValueError:
        raise BadInput(f"bad duration {text!r}: use e.g. 45s, 30m or 2h") from None
    if not math.isfinite(value) or value <= 0:
        raise BadInput(f"bad duration {text!r}: must be a positive number of seconds")
    return value


def _pyproject_at(repo: Path, head: str) -> dict[str, Any]:
    """`pyproject.toml` at `head`, parsed (empty when absent or the revision is bad)."""
    try:
        root = git.repo_root(repo)
        commit = git.resolve_commit(root, head)
    except BadInput:
        return {}  # the gate itself reports the bad repository or revision
    data = git.read_file_at_commit(root, commit, "pyproject.toml")
    if data is None:
        return {}
    try:
        return tomllib.loads(data.decode("utf-8", "replace"))
    except tomllib.TOMLDecodeError as error:
        raise BadInput(f"pyproject.toml at {head} is not valid TOML: {error}") from None


def checked_pass_env(names: Any) -> tuple[str, ...]:
    """`pass-env` as given: variable names, or prefixes ending in `*` (`CI_*`); never a
    pattern that would pass everything, nor the gate's own `LEDGER_*` settings."""
    checked = []
    for name in names:
        if not isinstance(name, str) or not PASS_ENV_PATTERN.match(name):
            raise BadInput(f"pass-env {name!r}: not a variable name or a NAME_* prefix")
        prefix = name.rstrip("*")
        if env_name_matches(prefix, SHARD_ENV_NEVER) or (
            name.endswith("*") and "LEDGER_".startswith(prefix)
        ):
            raise BadInput(f"pass-env {name}: the gate's own settings never reach the tests")
        checked.append(name)
    return tuple(dict.fromkeys(checked))


def checked_outputs(patterns: list[str]) -> tuple[str, ...]:
    """`outputs`: tracked files the suite is declared to rewrite, as fnmatch patterns relative
    to the checkout (`*` crosses folders). A pattern with no literal part would declare every
    file an output and switch the check off: refused."""
    for pattern in patterns:
        if not pattern.strip("*?[]/!. ") or pattern.startswith("/"):
            raise BadInput(
                f"[tool.release-ledger] outputs {pattern!r}: name the files the tests rewrite "
                "(a path or pattern inside the checkout, such as tests/snapshots/*)"
            )
    return tuple(dict.fromkeys(patterns))


def checked_quarantine(node_ids: Any) -> tuple[str, ...]:
    """`quarantine`: pytest node ids (`tests/x.py::test_y`, parametrised ids included); a
    file alone, a glob or anything without `::` is refused: a quarantine names tests."""
    checked: list[str] = []
    for node in node_ids:
        file, sep, name = str(node).partition("::")
        if not sep or not file.strip() or not name.strip() or any(c in file for c in "*?["):
            raise BadInput(
                f"quarantine {node!r} is not a test node id (tests/test_x.py::test_y)"
            )
        checked.append(str(node))
    return tuple(dict.fromkeys(checked))


def declared_extras(repo: Path, head: str, extras: list[str]) -> tuple[str, ...]:
    """`extras` checked against the extras head's `[project]` declares (statically; a
    project whose extras are dynamic or built by setup.py is checked when it is built)."""
    project = _pyproject_at(repo, head).get("project")
    names = tuple(re.sub(r"[-_.]+", "-", e).lower() for e in extras)
    if not isinstance(project, dict) or "optional-dependencies" in project.get("dynamic", []):
        return names
    declared = project.get("optional-dependencies") or {}
    known = {re.sub(r"[-_.]+", "-", str(k)).lower() for k in declared}
    unknown = [e for e, n in zip(extras, names, strict=True) if n not in known]
    if unknown:
        listed = ", ".join(sorted(str(k) for k in declared)) or "none"
        raise BadInput(
            f"extras {', '.join(unknown)}: not declared by the project at {head} "
            f"(its extras: {listed})"
        )
    return names


def snapshot(repo: Path, head: str, base: str, as_of: str) -> str:
    """`--resolve-as-of head|base|now|DATE` as the UTC timestamp both revisions resolve
    their unpinned dependencies against (recorded in `RunStarted`, used again on resume)."""
    import datetime as dt

    word = as_of.strip()
    if word in ("head", "base"):
        try:
            root = git.repo_root(repo)
            commit = git.resolve_commit(root, head if word == "head" else base)
            return git.committer_date(root, commit)
        except BadInput:
            return ""  # the gate itself reports the bad repository or revision
    if word == "now":
        return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        when = dt.datetime.fromisoformat(word.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(
            f"--resolve-as-of {as_of!r}: use head, base, now or a date such as 2025-06-01"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def interpreters_for(
    repo: Path, head: str, given: str | list[str] | None, local: bool = True
) -> tuple[Interpreter, ...]:
    """`--python 3.11,3.12` (or a list, or `auto`) as the interpreters of the matrix, in
    order; empty without one (the gate's own interpreter). `auto` takes the versions head's
    classifiers and tox `env_list` name, within `requires-python`, that this machine has.
    With `local` (the shards or the measuring run here) each must be found on this machine;
    otherwise the executor finds it where it runs (`python3.12`, an image per version)."""
    if given is None:
        return ()
    words = given if isinstance(given, list) else str(given).split(",")
    words = [str(w).strip() for w in words if str(w).strip()]
    if not words:
        return ()
    if words == ["auto"]:
        return _declared_interpreters(repo, head, local)
    labels: list[str] = []
    given_paths: dict[str, Interpreter] = {}
    for word in words:
        if os.sep in word:  # a path: its version decides its label
            probed = interpreters.at(word)
            if probed is None:
                raise BadInput(f"--python {word}: not a working CPython interpreter")
            labels.append(probed.label)
            given_paths[probed.label] = probed
            continue
        label = interpreters.label_of(word)
        if label is None:
            raise BadInput(f"--python {word!r}: use versions such as 3.11,3.12, a path, or auto")
        labels.append(label)
    if len(set(labels)) != len(labels):
        raise BadInput(f"--python names an interpreter twice: {', '.join(labels)}")
    if not local:
        return tuple(given_paths.get(label) or Interpreter(label, "", "") for label in labels)
    found = interpreters.available(find_uv(), wanted=labels) | given_paths
    missing = [label for label in labels if label not in found]
    if missing:
        raise BadInput(
            f"--python {', '.join(missing)}: not on this machine (found: "
            f"{', '.join(interpreters.available(find_uv())) or 'none'})"
        )
    return tuple(found[label] for label in labels)


def _declared_interpreters(repo: Path, head: str, local: bool) -> tuple[Interpreter, ...]:
    """`--python auto`: the versions head declares, intersected with those found here."""
    labels = declared_versions(repo, head)
    if not labels:
        raise BadInput(
            f"--python auto: the project names no Python version at {head} (no "
            "'Programming Language :: Python :: 3.X' classifier, no tox pyXY environment); "
            "name them, e.g. --python 3.11,3.12"
        )
    if not local:
        return tuple(Interpreter(label, "", "") for label in labels)
    found = interpreters.available(find_uv(), wanted=labels)
    chosen = tuple(found[label] for label in labels if label in found)
    if not chosen:
        everything = interpreters.available(find_uv())
        raise BadInput(
            f"--python auto: the project supports {', '.join(labels)}; none is on this machine "
            f"(found: {', '.join(everything) or 'none'})"
        )
    return chosen


def declared_versions(repo: Path, head: str) -> list[str]:
    """The `3.X` versions head's classifiers and tox `env_list` name, within its
    `requires-python` (tox's own loader reads its configuration, from a copy of head's)."""
    import tempfile

    from release_ledger.adapters.executors.env_installer import find_tool
    from release_ledger.adapters.executors.env_sources import TOX_FILES, tox_declared

    document = _pyproject_at(repo, head)
    try:
        root = git.repo_root(repo)
        commit = git.resolve_commit(root, head)
    except BadInput:
        return interpreters.declared_labels(document)
    tox_envs: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ledger-tox-") as folder:
        for name in (*TOX_FILES, "setup.cfg", "pyproject.toml"):
            data = git.read_file_at_commit(root, commit, name)
            if data is not None:
                Path(folder, name).write_bytes(data)
        if tox_declared(folder):
            tox_envs = interpreters.tox_env_list(folder, find_tool("tox"))
    return interpreters.declared_labels(document, tox_envs)


def repository_settings(repo: Path, head: str) -> dict[str, Any]:
    """The `[tool.release-ledger]` table of `pyproject.toml` at `head` (empty when absent);
    a key that is unknown or of the wrong type is bad input."""
    table = _table_at(repo, head)
    try:
        return RepositorySettings.model_validate(table).model_dump()
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise BadInput(f"[tool.release-ledger] {key}: {first['msg']}") from None


def _table_at(repo: Path, rev: str) -> dict[str, Any]:
    tool = _pyproject_at(repo, rev).get("tool", {})
    table = tool.get("release-ledger", {}) if isinstance(tool, dict) else {}
    if not isinstance(table, dict):
        raise BadInput(f"[tool.release-ledger] in pyproject.toml at {rev} must be a table")
    return table


def base_settings(repo: Path, base: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Base's table, and the keys of it this version cannot read: skipped, not refused (a
    released commit cannot be corrected, and a key an older version knew must not stop every
    later gate)."""
    table = dict(_table_at(repo, base))
    unread: list[str] = []
    while True:
        try:
            return RepositorySettings.model_validate(table).model_dump(), tuple(unread)
        except ValidationError as error:
            key = str(error.errors()[0]["loc"][0])
            if key not in table:  # a name the model knows by its alias
                key = key.replace("_", "-")
            if key not in table:
                raise BadInput(
                    f"[tool.release-ledger] at {base}: {error.errors()[0]['msg']}"
                ) from None
            unread.append(key)
            del table[key]


# The table's keys of the gate's policy, read at base (`Setting.at_head` is false), by name,
# with where their values land (for the defaults).
_POLICY = {
    setting.name: (str(setting.table), setting.target)
    for setting in (*SETTINGS, *EXECUTOR_SETTINGS)
    if setting.table and not setting.at_head and setting.name != "base"
} | {"rollback": ("rollback", ""), "required_checks": ("required-checks", "")}


def _ignored_at_head(
    head_table: dict[str, Any], base_table: dict[str, Any], flags: dict[str, Any]
) -> dict[str, Any]:
    """Policy keys head's table sets otherwise than base's (or than the default, where base
    sets none), where no flag decides them."""
    ignored: dict[str, Any] = {}
    for name, (key, target) in _POLICY.items():
        given = flags.get(name)
        if given is not None and given != ():
            continue
        at_head, at_base = head_table.get(name), base_table.get(name)
        if at_base is None:
            at_base = DEFAULTS.get(target)
        if name == "required_checks":  # head may add required checks, not take them away
            kept = isinstance(at_head, list) and set(at_base or ()) <= set(map(str, at_head))
            if at_head is not None and not kept:
                ignored[key] = at_head
        elif at_head is not None and at_head != at_base:
            ignored[key] = at_head
    return dict(sorted(ignored.items()))


def _base_named(repo: Path, flags: dict[str, Any], head_table: dict[str, Any]) -> str:
    """`--base`, else head's table's `base`, which must name a tag: the candidate may say
    which release it follows, not pick any commit (one that already has its failures)."""
    if flags.get("base"):
        return str(flags["base"])
    named = head_table.get("base")
    if not named:
        raise BadInput("--base is required (or `base` in [tool.release-ledger])")
    if not git.is_tag(repo, str(named)):
        raise BadInput(
            f"[tool.release-ledger] base {named!r} is not a tag: the candidate's table may only "
            "name the release it follows (a tag); give --base to compare with any other revision"
        )
    return str(named)


def gate_options(flags: dict[str, Any]) -> GateOptions:
    """GateOptions from the flags given (None = not given), the repository's tables, defaults.
    What describes the code being tested (its environment, extras, interpreters) is read from
    head's table; the gate's policy (rule, thresholds, budgets, executor, command, pass-env,
    outputs, quarantine) from base's, the release already approved: a candidate cannot loosen
    the gate that judges it, nor name the variables it will see."""
    try:
        repo = Path(flags.get("repo") or ".").resolve()
        is_dir = repo.is_dir()
    except (OSError, RuntimeError) as error:  # a symlink loop, a name too long
        raise BadInput(f"--repo {flags.get('repo')}: {error}") from None
    if not is_dir:
        raise BadInput(f"--repo {flags.get('repo')} is not a directory")
    head = flags.get("head") or "HEAD"
    head_table = repository_settings(repo, head)
    checked_quarantine(head_table.get("quarantine") or ())  # a malformed head is bad input
    base = _base_named(repo, flags, head_table)
    table, unread = base_settings(repo, base)
    at_head = {s.name for s in SETTINGS if s.at_head}

    def pick(name: str) -> Any:
        given = flags.get(name)
        if given is not None and given != ():
            return given
        return (head_table if name in at_head else table).get(name)

    command = pick("command")
    if isinstance(command, str):
        try:
            template = tuple(shlex.split(command))
        except ValueError as error:  # an unclosed quote
            raise BadInput(f"--command {command!r}: {error}") from None
    elif isinstance(command, list):
        template = tuple(str(token) for token in command)
    else:
        template = DEFAULT_PYTEST_COMMAND
    executor = pick("executor") or DEFAULTS["executor"]
    executor_options = _executor_options(executor, flags, table)
    deadline = pick("deadline") or "30m"
    jobs = pick("jobs")
    discover = pick("discover")
    return GateOptions(
        repo=repo,
        base=str(base),
        head=head,
        shards=pick("shards"),
        budget_gib=_number(pick("budget_gib"), DEFAULTS["budget_gib"]),
        isolation_budget_gib=_optional_number(pick("isolation_budget_gib")),
        rounds=int(_number(pick("rounds"), DEFAULTS["rounds"])),
        jobs=int(jobs) if jobs is not None else (os.cpu_count() or 1),
        timeout_s=_number(pick("timeout_s"), DEFAULTS["timeout_s"]),
        rule=pick("rule") or DEFAULTS["rule"],
        command=template,
        measure=pick("measure") or DEFAULTS["measure"],
        discover=tuple(discover or ()),
        executor=executor,
        executor_options=executor_options,
        deadline_s=parse_duration(deadline),
        wait=bool(flags.get("wait")),
        question_budget=int(_number(pick("question_budget"), DEFAULTS["question_budget"])),
        environment=pick("env") or DEFAULTS["environment"],
        extras=declared_extras(repo, head, list(pick("extras") or [])),
        pass_env=checked_pass_env(pick("pass_env") or ()),
        outputs=checked_outputs(pick("outputs") or []),
        exclude_newer=snapshot(repo, head, str(base), pick("resolve_as_of") or "head"),
        interpreters=tuple(
            i.recorded()
            for i in interpreters_for(repo, head, pick("python"), local=runs_locally(executor))
        ),
        max_report_mb=_number(pick("max_report_mb"), DEFAULTS["max_report_mb"]),
        release_builds=_switch(pick("release_builds"), DEFAULTS["release_builds"]),
        attribution=_switch(pick("attribution"), DEFAULTS["attribution"]),
        **{name: _number(pick(name), DEFAULTS[name]) for name in _PLAIN_NUMBERS},
        quarantine=checked_quarantine(pick("quarantine") or ()),
        head_settings_ignored=_ignored_at_head(head_table, table, flags),
        base_settings_unread=unread,
    )


# Settings read as they are given (a number, its default otherwise).
_PLAIN_NUMBERS = (
    "heavier_factor", "heavier_floor_mb", "slower_factor", "slower_floor_s", "time_factor",
    "time_floor_s",
)  # fmt: skip


def _executor_options(
    executor: str, flags: dict[str, Any], table: dict[str, Any]
) -> dict[str, Any]:
    """The chosen executor's options from its flags, else the table. A flag given for
    another executor is refused; the table's values serve only the executor that takes them
    (a table written for `ssh` does not break `--executor local`)."""
    accepts = spec_for(executor).options.model_fields
    chosen: dict[str, Any] = {}
    for setting in EXECUTOR_SETTINGS:
        value = flags.get(setting.name)
        if value is None or value == ():
            value = table.get(setting.name) if setting.target in accepts else None
        elif setting.target not in accepts:
            raise BadInput(f"{setting.flag} does not apply to --executor {executor}")
        if value is None or value == ():
            continue
        if setting.kind == "path":
            value = str(Path(value).resolve())
        chosen[setting.target] = list(value) if isinstance(value, tuple) else value
    return chosen


def runs_locally(executor: str) -> bool:
    """Whether shards or their measuring run on this machine (its interpreters matter)."""
    try:
        spec = spec_for(executor)
    except BadInput:
        return True  # the gate names the unknown executor itself
    return spec.capabilities.runs_locally or spec.capabilities.measures_locally


def _number(value: Any, default: float) -> float:
    return float(value) if value is not None else default


def _switch(value: Any, default: bool) -> bool:
    return bool(value) if value is not None else default


def _optional_number(value: Any) -> float | None:
    return float(value) if value is not None else None
