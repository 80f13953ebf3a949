"""The release's built files: `distributions` (head's sdist and wheel, their metadata and
version) and `upgrade` (base's wheel installed, then head's over it)."""

from __future__ import annotations

import re

from release_ledger.domain import events as ev
from release_ledger.domain.text import some
from release_ledger.projections.check_dependencies import normal_name
from release_ledger.projections.check_model import Evidence, Metric

DISTRIBUTIONS = "distributions"
UPGRADE = "upgrade"

# --- distributions: head's sdist and wheel ------------------------------------------------------


def normal_version(text: str) -> str:
    """A version in a comparable form: `v1.2` = `1.2.0`, `1.2.0-RC1` = `1.2.0rc1`,
    `1.0-1` = `1.0.post1` (PEP 440 normalisation of the common spellings)."""
    v = text.strip().lower()
    v = v[1:] if v.startswith("v") else v
    v = re.sub(r"[-_.]?(alpha|a)[-_.]?(?=\d|$)", "a", v)
    v = re.sub(r"[-_.]?(beta|b)[-_.]?(?=\d|$)", "b", v)
    v = re.sub(r"[-_.]?(rc|c|pre|preview)[-_.]?(?=\d|$)", "rc", v)
    v = re.sub(r"[-_.]?(post|rev|r)[-_.]?(?=\d|$)", ".post", v)
    v = re.sub(r"-(\d+)$", r".post\1", v)
    v = re.sub(r"[-_.]?dev[-_.]?(?=\d|$)", ".dev", v)
    match = re.match(r"^(\d+(?:\.\d+)*)(.*)$", v)
    if match is None:
        return v
    release = [int(x) for x in match.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return ".".join(map(str, release)) + match.group(2)


def _not_built_why(evidence: Evidence) -> str:
    started = evidence.state.started
    assert started is not None
    builds = started.options.get("release_builds")
    if builds is None:
        return ("the run was recorded before the gate built release files (no "
                "DistributionsBuilt event)")  # fmt: skip
    if builds is False:
        return "the gate ran with --no-release-builds"
    if not evidence.state.completed:
        return "not built yet: they are built once the tests are done"
    return "no DistributionsBuilt event at head: the run completed without release builds"


def _head_build(evidence: Evidence) -> tuple[int, ev.DistributionsBuilt] | None:
    builds = [(p, e) for p, e in evidence.of_kind(ev.DistributionsBuilt) if e.revision == "head"]
    return builds[-1] if builds else None


def _build_problems(
    built: ev.DistributionsBuilt, release: ev.ReleaseInspected | None
) -> tuple[list[str], list[str], list[str]]:
    """(what fails, what is unmeasured, notes) about head's built files."""
    fails: list[str] = []
    unknown: list[str] = []
    notes: list[str] = []
    sdists = [f for f in built.files if f.type == "sdist"]
    wheels = [f for f in built.files if f.type == "wheel"]
    if len(sdists) != 1 or len(wheels) != 1:
        fails.append(f"{len(sdists)} sdists and {len(wheels)} wheels, not one of each")
    for f in built.files:
        if not f.name or not f.version:
            fails.append(f"{f.filename} has no name or version in its metadata")
    names = sorted({normal_name(f.name) for f in built.files if f.name})
    versions = sorted({f.version for f in built.files if f.version})
    if len(names) > 1:
        fails.append(f"the files name different projects ({', '.join(names)})")
    if len({normal_version(v) for v in versions}) > 1:
        fails.append(f"the files carry different versions ({', '.join(versions)})")
    project = release.project if release is not None else None
    if project and names and any(n != normal_name(project) for n in names):
        fails.append(f"the files are named {names[0]}, the project {project}")
    wanted = release.version if release is not None else None
    if not wanted:
        unknown.append("the version being released is unknown (no [project] version, no "
                       "version tag), so the files' version could not be compared")  # fmt: skip
    elif versions and any(normal_version(v) != normal_version(wanted) for v in versions):
        fails.append(f"version mismatch: the files say {', '.join(versions)}, the release is "
                     f"{wanted}")  # fmt: skip
    for f in built.files:
        if f.name and not f.description:
            fails.append(f"{f.filename} has no README (long description) in its metadata")
        elif f.readme == "failed":
            fails.append(f"{f.filename}: the README does not render ({built.readme_check})")
        elif f.readme == "warned":
            notes.append(f"{f.filename}: {built.readme_check} warned")
        elif not f.readme and f.description:
            why = built.readme_error or "not checked"
            unknown.append(f"{f.filename}: the README was not checked ({why})")
    return fails, unknown, notes


def distributions_check(evidence: Evidence) -> Metric:
    """Head's sdist and wheel built from a clean checkout, with one name, the version being
    released, and a README that renders (`twine check`); both files' sha256 in the why."""
    found = _head_build(evidence)
    if found is None:
        return Metric(DISTRIBUTIONS, "not built", "unmeasured", (), _not_built_why(evidence))
    position, built = found
    if built.status == "not-packaged":
        why = f"head is not a packaged Python project ({built.error}): there is nothing to build"
        return Metric(DISTRIBUTIONS, "not packaged", "unmeasured",
                      tuple(evidence.index.at(position)), why)  # fmt: skip
    if built.status == "error":
        why = f"the gate could not build head's distributions (its own failure): {built.error}"
        return Metric(DISTRIBUTIONS, "not built (gate error)", "unmeasured",
                      tuple(evidence.index.at(position, built.error)), why)  # fmt: skip
    if built.status == "failed":
        log = (
            f"; the build log's end is artifact {built.log_tail_hash}"
            if built.log_tail_hash
            else ""
        )
        return Metric(
            DISTRIBUTIONS,
            f"build failed: {built.error}",
            "fail",
            tuple(evidence.index.at(position, built.error)),
            f"head's sdist and wheel did not build ({built.how or 'PEP 517'}){log}",
        )
    fails, unknown, notes = _build_problems(built, evidence.release)
    names = ", ".join(f.filename for f in built.files)
    hashes = "; ".join(f"{f.filename} sha256 {f.sha256}" for f in built.files)
    made = "reused from the build cache" if built.reused else f"built in {built.seconds:.1f}s"
    how = f"{built.how}, Python {built.python_version}, {made}"
    decided = tuple(evidence.index.at(position, names))
    if fails:
        value = "; ".join(fails[:2]) + (f" (+{len(fails) - 2} more)" if len(fails) > 2 else "")
        why = "; ".join(fails + unknown) + f" — {names} ({how}); {hashes}"
        if built.check_output_hash:
            why += f"; {built.readme_check} output is artifact {built.check_output_hash}"
        return Metric(DISTRIBUTIONS, value, "fail", decided, why)
    version = next((f.version for f in built.files if f.version), "")
    project = next((f.name for f in built.files if f.name), "")
    readme = f"README renders ({built.readme_check})" if built.readme_check else "README"
    if unknown:
        return Metric(
            DISTRIBUTIONS,
            f"{project} {version}: {names}; {'; '.join(unknown)}",
            "unmeasured",
            decided,
            "; ".join(unknown) + f" — {how}; {hashes}",
        )
    value = f"{project} {version}: {names}; {readme}" + "".join(f"; {n}" for n in notes)
    why = (f"one sdist and one wheel of {project} {version}, the version being released, "
           f"whose {readme} ({how}); {hashes}")  # fmt: skip
    if built.check_output_hash:
        why += f"; {built.readme_check} output is artifact {built.check_output_hash}"
    return Metric(DISTRIBUTIONS, value, "pass", decided, why)


# --- upgrade: base's wheel, then head's ---------------------------------------------------------


def upgrade_check(evidence: Evidence) -> Metric:
    """Base's wheel installed, then head's over it, in a fresh environment: head's packages
    import and the installed version is head's."""
    head = _head_build(evidence)
    upgrades = evidence.of_kind(ev.UpgradeChecked)
    if not upgrades:
        if head is None:
            return Metric(UPGRADE, "not tried", "unmeasured", (), _not_built_why(evidence))
        position, built = head
        decided = tuple(evidence.index.at(position))
        if built.status == "not-packaged":
            why = "head is not a packaged Python project: there is no wheel to upgrade to"
            return Metric(UPGRADE, "not packaged", "unmeasured", decided, why)
        if built.status in ("failed", "error"):
            why = "head's distributions did not build: there is no wheel to upgrade to"
            return Metric(UPGRADE, "no head wheel", "unmeasured", decided, why)
        return Metric(UPGRADE, "not tried", "unmeasured", decided, _not_built_why(evidence))
    position, u = upgrades[-1]
    base_builds = [(p, e) for p, e in evidence.of_kind(ev.DistributionsBuilt)
                   if e.revision == "base"]  # fmt: skip
    positions = [position] + ([base_builds[-1][0]] if base_builds else [])
    positions += [head[0]] if head is not None else []
    decided = tuple(d for p in sorted(positions) for d in evidence.index.at(p))
    if u.skipped:
        return Metric(UPGRADE, "not tried", "unmeasured", decided, u.skipped)
    steps = {s.step: s for s in u.steps}
    log = f"; the log's end is artifact {u.log_tail_hash}" if u.log_tail_hash else ""
    base_step = steps.get("install base")
    if base_step is None or base_step.exit_code != 0:
        error = base_step.error if base_step else "not run"
        why = f"base's wheel {u.base_wheel} did not install ({error}): nothing to upgrade{log}"
        return Metric(UPGRADE, "base did not install", "unmeasured", decided, why)
    wanted = ""
    if head is not None:
        wanted = next((f.version for f in head[1].files if f.type == "wheel"), "")
    before = u.version_before or "?"
    after = u.version_after or "?"
    project = u.project or "the project"
    fails: list[str] = []
    up = steps.get("upgrade to head")
    if up is None or up.exit_code != 0:
        fails.append(
            f"installing head's wheel over base's failed ({up.error if up else 'not run'})"
        )
    else:
        if u.version_after is None:
            fails.append(f"{project} is not installed after the upgrade")
        elif wanted and normal_version(u.version_after) != normal_version(wanted):
            fails.append(f"{project} {u.version_after} installed, not head's {wanted}")
        broken = sorted(f"{m}: {r}" for m, r in u.imports.items() if r != "ok")
        if broken:
            fails.append("import failed: " + some(broken, 3))
        check = steps.get("pip check")
        if check is not None and check.exit_code != 0:
            fails.append(f"pip check reports broken requirements ({check.error})")
    how = f"{u.how}, Python {u.python_version}" + (", reused" if u.reused else "")
    if head is not None:
        recorded = next((f.sha256 for f in head[1].files if f.type == "wheel"), "")
        if recorded and u.head_wheel_sha256 and recorded != u.head_wheel_sha256:
            how += "; head's wheel was rebuilt for it (its sha256 differs from the one recorded)"
    if fails:
        value = f"{project} {before} -> {after}: " + "; ".join(fails)
        return Metric(
            UPGRADE,
            value,
            "fail",
            decided,
            "; ".join(fails) + f" ({u.base_wheel} then {u.head_wheel}; {how}){log}",
        )
    imported = ", ".join(sorted(u.imports)) or "no top-level package"
    value = f"{project} {before} -> {after}; imports {imported}"
    why = (
        f"{u.base_wheel} installed, then {u.head_wheel} over it, in a fresh environment "
        f"({how}): {project} {after} installed, {imported} imported, pip check clean"
    )
    return Metric(UPGRADE, value, "pass", decided, why)
