"""Skips that come from the environment: tests skipped at head *and* at base because a module
is missing, counted per module, with the setting that would bring them in.

A suite run in an environment without numpy skips every numpy test at both revisions: the gate
passes and nobody is told (issue 25 part 4). Pure: read from the reports the fold already
holds (pytest's `could not import 'numpy': No module named 'numpy'`, a `SkipTest` made from an
`ImportError`) and the `EnvironmentPrepared` facts (the project's declared extras and their
requirements, the source its tests were installed from). Information only: no rule reads it,
so it never changes a verdict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from release_ledger.domain import events as ev
from release_ledger.domain.junit import TestCase, test_id
from release_ledger.domain.run_state import BASE, HEAD, RunState
from release_ledger.domain.verdict import shard_unmeasured

# ModuleNotFoundError's own words (pytest.importorskip quotes them after `could not import`).
_MISSING = re.compile(r"No module named '?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)'?")
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA_MARKER = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")
# Import names whose distribution is named otherwise (the common ones; anything else is
# matched by its normalised name only).
_DISTRIBUTION_OF = {
    "yaml": "pyyaml",
    "pil": "pillow",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "cv2": "opencv-python",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "attr": "attrs",
    "openssl": "pyopenssl",
    "crypto": "pycryptodome",
    "serial": "pyserial",
    "magic": "python-magic",
    "docx": "python-docx",
    "jwt": "pyjwt",
    "git": "gitpython",
    "zmq": "pyzmq",
    "usb": "pyusb",
}


def normal(name: str) -> str:
    """A distribution or extra name as PEP 503 / 685 compare them."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class EnvironmentSkip:
    """One missing module: the tests it kept out at both revisions and what would bring them
    in (`setting`); `extras` are the project's declared extras that require `distribution`."""

    module: str
    tests: tuple[str, ...]
    distribution: str | None = None
    extras: tuple[str, ...] = ()
    setting: str = ""
    interpreters: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(sorted({t.split("::", 1)[0] for t in self.tests}))

    @property
    def whole_files(self) -> tuple[str, ...]:
        """Files that skipped themselves at import (one case each: their tests were never
        collected, so how many there are is not known)."""
        return tuple(t.split("::", 1)[0] for t in self.tests if skipped_whole(t))

    def as_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "count": len(self.tests),
            "files": len(self.files),
            "whole_files": len(self.whole_files),
            "tests": list(self.tests),
            "distribution": self.distribution,
            "extras": list(self.extras),
            "setting": self.setting,
            "interpreters": list(self.interpreters),
            "text": self.line(),
        }

    def line(self) -> str:
        """`numpy missing: 40 tests in 3 files and 2 files skipped whole at import, at head and
        base — [tool.release-ledger] extras = ["default"] would bring them in`."""
        whole = len(self.whole_files)
        tests = len(self.tests) - whole
        files = len({t.split("::", 1)[0] for t in self.tests if not skipped_whole(t)})
        parts = [f"{_many(tests, 'test')} in {_many(files, 'file')}"] if tests else []
        parts += [f"{_many(whole, 'file')} skipped whole at import"] if whole else []
        where = f" on Python {', '.join(self.interpreters)}" if self.interpreters else ""
        return (
            f"{self.module} missing: {' and '.join(parts)}, at head and base{where}"
            f" — {self.setting}"
        )


def _many(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def skipped_whole(test: str) -> bool:
    """A test file's own case (`FILE::dotted.module`, as pytest names a module that skipped
    itself at import), not a test's."""
    file, _, name = test.partition("::")
    return file.endswith(".py") and name == file[:-3].replace("/", ".")


# --- the counting core ----------------------------------------------------------------------


def missing_module(case: TestCase) -> str | None:
    """The top-level module a skipped case says is missing (`No module named 'scipy.sparse'`:
    `scipy`); None for a case not skipped, or skipped for any other reason."""
    if case.outcome != "skipped":
        return None
    for text in (case.message, case.text):
        found = _MISSING.search(text or "")
        if found:
            return found.group(1).split(".", 1)[0]
    return None


def skipped_for_missing(cases: Iterable[TestCase]) -> dict[str, str]:
    """test id -> the module its skip says is missing, for the cases skipped for one."""
    return {test_id(c): module for c in cases if (module := missing_module(c)) is not None}


def skipped_at_both(head: Mapping[str, str], base: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """module -> the tests skipped for that same missing module at head and at base, sorted."""
    found: dict[str, list[str]] = {}
    for test, module in head.items():
        if base.get(test) == module:
            found.setdefault(module, []).append(test)
    return {module: tuple(sorted(tests)) for module, tests in sorted(found.items())}


def _lane_skips(state: RunState) -> dict[str, tuple[str, ...]]:
    """One interpreter's count, over the leaf shards measured at both revisions."""
    head: dict[str, str] = {}
    base: dict[str, str] = {}
    for shard in state.leaves():
        if shard_unmeasured(state, shard) is not None:
            continue
        for revision, into in ((HEAD, head), (BASE, base)):
            latest = shard.latest(revision)
            report = latest.assessment.report if latest is not None else None
            if report is not None and report.skipped:
                into.update(skipped_for_missing(report.cases))
    return skipped_at_both(head, base)


# --- what would bring them in ----------------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """What the project declares and how its tests were installed, from `EnvironmentPrepared`."""

    project: str = ""
    extras: tuple[str, ...] = ()  # Provides-Extra, in declaration order
    requires: tuple[str, ...] = ()  # Requires-Dist lines
    how: str = ""
    source: str = ""
    detail: str = ""  # the used source's own word: `tox env py311`, `requirements/tests.txt`
    installed_extras: tuple[str, ...] = ()
    setting_extras: tuple[str, ...] = ()  # `[tool.release-ledger] extras`, as recorded


def declared(state: RunState) -> Declared:
    """Head's environment facts (base's when head recorded none), every lane's considered."""
    prepared = [
        e for lane in (state.matrix.values() or [state]) for e in lane.environments.values()
    ]
    ready = [e for e in prepared if e.status == "ready"]
    chosen = _first(ready, HEAD) or _first(ready, BASE) or _first(prepared, HEAD)
    recorded = state.option("extras", ())
    setting = tuple(str(x) for x in recorded) if isinstance(recorded, list | tuple) else ()
    if chosen is None:
        return Declared(setting_extras=setting)
    used = next((t.detail for t in chosen.tried if t.outcome == "used"), "")
    return Declared(
        project=chosen.project or "",
        extras=tuple(chosen.provides_extra),
        requires=tuple(chosen.requires_dist),
        how=chosen.how,
        source=chosen.source,
        detail=used,
        installed_extras=tuple(x for x in (chosen.extra or "").split(",") if x),
        setting_extras=setting,
    )


def _first(
    prepared: Sequence[ev.EnvironmentPrepared], revision: str
) -> ev.EnvironmentPrepared | None:
    """The revision's environment that says the most about the project's declarations."""
    own = [e for e in prepared if e.revision == revision]
    return max(own, key=lambda e: (bool(e.requires_dist or e.provides_extra), e.at), default=None)


def extras_requiring(project: str, requires: Sequence[str]) -> dict[str, set[str]]:
    """extra (normalised) -> the distributions (normalised) it brings in, following an extra
    that names the project's own extras (`networkx[default]; extra == "all"`)."""
    direct: dict[str, set[str]] = {}
    includes: dict[str, set[str]] = {}
    own = normal(project)
    for line in requires:
        requirement, _, marker = line.partition(";")
        parsed = _REQUIREMENT.match(requirement)
        if parsed is None:
            continue
        name, wanted = normal(parsed.group(1)), parsed.group(2) or ""
        for extra in map(normal, _EXTRA_MARKER.findall(marker)):
            if own and name == own:
                includes.setdefault(extra, set()).update(
                    normal(w) for w in wanted.split(",") if w.strip()
                )
            else:
                direct.setdefault(extra, set()).add(name)
    return {extra: _closure(extra, direct, includes) for extra in set(direct) | set(includes)}


def _closure(
    extra: str, direct: Mapping[str, set[str]], includes: Mapping[str, set[str]]
) -> set[str]:
    """Every distribution `extra` brings in, through the project's own extras it names."""
    seen: set[str] = set()
    todo, names = [extra], set()
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            names |= direct.get(current, set())
            todo.extend(includes.get(current, ()))
    return names


def distribution_for(module: str) -> str:
    """The distribution most likely to provide `module` (its own name, or a known alias)."""
    return _DISTRIBUTION_OF.get(module.lower(), normal(module))


def suggestion(module: str, facts: Declared) -> tuple[str | None, tuple[str, ...], str]:
    """(the declared requirement that provides `module`, the extras that require it, the
    setting that would bring its tests in)."""
    wanted = distribution_for(module)
    requiring = extras_requiring(facts.project, facts.requires)
    installed = {normal(x) for x in facts.installed_extras}
    named = {normal(x): x for x in facts.extras}
    order = [normal(x) for x in facts.extras] + sorted(set(requiring) - set(named))
    extras = tuple(named.get(x, x) for x in order if wanted in requiring.get(x, set()))
    usable = [x for x in extras if normal(x) not in installed]
    if usable:
        chosen = [*facts.setting_extras, *[x for x in usable[:1] if x not in facts.setting_extras]]
        setting = f"[tool.release-ledger] extras = {json.dumps(chosen)} would bring them in"
        return wanted, extras, setting
    return (wanted if extras else None), extras, _install_instead(module, wanted, facts)


def _install_instead(module: str, wanted: str, facts: Declared) -> str:
    """No declared extra brings the module in: install its distribution through the project's
    declared test environment, or the gate's own setup command."""
    what = wanted if wanted == normal(module) else f"{wanted} (for {module})"
    if facts.how == "command":
        return f"install {what} in the [tool.release-ledger] env setup command"
    if facts.how in ("none", "gate-interpreter"):
        return f"install {what} in the gate's interpreter, or run with --env auto"
    place = {
        "tox": f"the deps of {facts.detail or 'its tox test environment'}",
        "dependency-group": f"dependency {facts.detail or 'group'}",
        "requirements-file": facts.detail or "its test requirements file",
        "extras": f"its {facts.detail or 'test extra'}",
    }.get(facts.source, "a declared test environment (tox deps, a dependency group)")
    extras = ",".join(facts.installed_extras)
    project = f".[{extras}]" if extras else "."
    command = f"{{python}} -m pip install {project} {wanted} pytest"
    return f"add {what} to {place}, or [tool.release-ledger] env = {json.dumps(command)}"


# --- the projection ----------------------------------------------------------------------------


def environment_skips(state: RunState) -> tuple[EnvironmentSkip, ...]:
    """Per missing module, the tests skipped for it at head and base, with the setting that
    would bring them in; a matrix's interpreters joined (a test counted once), each module
    naming the interpreters it was missing on. Memoised on the state."""
    cached = state.cache.get("environment_skips")
    if isinstance(cached, tuple):
        return cached
    lanes = list(state.matrix.items()) or [("", state)]
    tests: dict[str, set[str]] = {}
    where: dict[str, list[str]] = {}
    for label, lane in lanes:
        for module, found in _lane_skips(lane).items():
            tests.setdefault(module, set()).update(found)
            if label:
                where.setdefault(module, []).append(label)
    facts = declared(state)
    result = []
    for module in sorted(tests):
        distribution, extras, setting = suggestion(module, facts)
        everywhere = len(where.get(module, ())) == len(lanes)
        result.append(
            EnvironmentSkip(
                module, tuple(sorted(tests[module])), distribution, extras, setting,
                () if everywhere else tuple(where.get(module, ())),
            )
        )  # fmt: skip
    state.cache["environment_skips"] = found_all = tuple(result)
    return found_all


def summary(skips: Sequence[EnvironmentSkip]) -> str:
    """`57 tests skipped at head and base for a missing module: numpy 40, scipy 17` (a file
    skipped whole at import counted as one)."""
    total = sum(len(s.tests) for s in skips)
    each = ", ".join(f"{s.module} {len(s.tests)}" for s in skips)
    return f"{_many(total, 'test')} skipped at head and base for a missing module: {each}"
