"""The release's own checks: `dependencies` (the package sets the tests ran in),
`distributions` (head's sdist and wheel, built for real) and `upgrade` (base's wheel, then
head's, installed for real), each a pure function of recorded events; the gate records those
events after the tests, once, without changing its verdict."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from release_ledger.adapters import distributions, git
from release_ledger.adapters.executors import environment
from release_ledger.adapters.executors.local import LocalExecutor, environments_dir
from release_ledger.adapters.release_info import inspect_release
from release_ledger.domain import events as ev
from release_ledger.domain.rules import get_rule
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.gate import GateProcess, start
from release_ledger.ledger.hooks import GateSuspended, HookContext
from release_ledger.ledger.options import GateOptions
from release_ledger.ledger.projection import project
from release_ledger.ledger.release import release_builds
from release_ledger.projections.approval import approval_report
from release_ledger.projections.checks import (
    Metric,
    dependency_changes,
    normal_version,
    packages_of,
)
from release_ledger.projections.next_step import release_step
from release_ledger.projections.timeline import describe
from tests.gatekit import events, gate, run_ledger
from tests.gitrepo import commit, make_repo, tag
from tests.runbuilder import RunBuilder

A = "tests/test_a.py"


def report(run: RunBuilder, required: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    positioned = list(enumerate(run.events, start=1))
    return approval_report(positioned, run.artifacts, get_rule("default").decide, required=required)


def metric(run: RunBuilder, name: str) -> Metric:
    (found,) = [m for m in report(run).metrics if m.name == name]
    return found


def gated(**release: Any) -> RunBuilder:
    """A run whose tests passed at head and base, with `ReleaseInspected`."""
    run = RunBuilder().release(**release).discover([A]).plan({"s01": [A]})
    run.attempt("s01", "head", [A], {f"{A}::t": "passed"})
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    return run


def with_builds(run: RunBuilder, on: bool | None = True) -> RunBuilder:
    started = run.events[0]
    assert isinstance(started, ev.RunStarted)
    options = dict(started.options)
    if on is None:
        options.pop("release_builds", None)
    else:
        options["release_builds"] = on
    run.events[0] = started.model_copy(update={"options": options})
    return run


# --- dependencies (pure) --------------------------------------------------------------------------


def test_packages_of_reads_frozen_lists() -> None:
    frozen = "# comment\nPyYAML==6.0.1\nzope.interface===7.0\n-e git+https://x/y#egg=y\n"
    frozen += (
        "demo @ file:///tmp/demo-1.0-py3-none-any.whl\nsix[extra]==1.16.0 ; python_version>'3'\n"
    )
    assert packages_of(frozen) == {
        "pyyaml": "6.0.1",
        "zope-interface": "7.0",
        "demo": "@ file:///tmp/demo-1.0-py3-none-any.whl",
        "six": "1.16.0",
    }


def test_dependency_changes_added_removed_changed_and_downgrades() -> None:
    changes = dependency_changes(
        {"a": "1.0", "b": "2.1", "d": "3"}, {"a": "1.0", "b": "2.0", "c": "1.1"}
    )
    assert changes.added == ("c 1.1",) and changes.removed == ("d 3",)
    assert changes.changed == ("b 2.1 -> 2.0 (downgrade)",) and changes.downgraded == 1


def test_dependencies_pass_with_the_changes_against_base_in_the_value() -> None:
    run = gated().environment("head", "a==1.0\nb==2.0\nc==1.1\n")
    run.environment("base", "a==1.0\nb==2.1\nd==3\n")
    m = metric(run, "dependencies")
    assert m.verdict == "pass"
    assert m.value == (
        "3 packages at head; against base: 1 added (c 1.1), 1 removed (d 3), "
        "1 changed (b 2.1 -> 2.0 (downgrade)); 1 downgraded"
    )
    assert "removed: d 3" in m.why and "never fails by itself" in m.why
    assert [d.kind for d in m.events] == ["EnvironmentPrepared", "EnvironmentPrepared"]


def test_dependencies_same_as_base_and_base_not_recorded() -> None:
    same = gated().environment("head").environment("base")
    assert metric(same, "dependencies").value == "2 packages at head; same as base"
    alone = metric(gated().environment("head"), "dependencies")
    assert (alone.value, alone.verdict) == ("2 packages at head; base not recorded", "pass")


@pytest.mark.parametrize(
    "fields,words",
    [
        ({"how": "none"}, "--env none"),
        ({"how": "gate-interpreter"}, "not an installable Python project"),
        ({"status": "failed", "error": "installing failed (exit 1)"}, "installing failed"),
    ],
    ids=["env-none", "not-installable", "setup-failed"],
)
def test_dependencies_unmeasured_without_a_package_list(fields: dict[str, Any], words: str) -> None:
    m = metric(gated().environment("head", None, **fields), "dependencies")
    assert m.verdict == "unmeasured" and words in m.why
    nothing = metric(gated(), "dependencies")
    assert (nothing.value, nothing.verdict) == ("not recorded", "unmeasured")


# --- distributions (pure) -------------------------------------------------------------------------


def test_normal_version() -> None:
    assert normal_version("v1.2") == normal_version("1.2.0") == "1.2"
    assert normal_version("1.2.0-RC1") == normal_version("1.2.0rc1")
    assert normal_version("1.0-1") == "1.post1"
    assert normal_version("1.2.0") != normal_version("1.2.1")


def test_distributions_pass_names_both_files_and_hashes() -> None:
    m = metric(gated().built("head"), "distributions")
    assert m.verdict == "pass"
    assert m.value == (
        "demo 1.2.0: demo-1.2.0.tar.gz, demo-1.2.0-py3-none-any.whl; README renders (twine check)"
    )
    assert f"demo-1.2.0.tar.gz sha256 {'5' * 64}" in m.why
    assert [d.kind for d in m.events] == ["DistributionsBuilt"]


@pytest.mark.parametrize(
    "built,verdict,words",
    [
        ({"version": "1.1.9"}, "fail",
         "version mismatch: the files say 1.1.9, the release is 1.2.0"),
        ({"project": "other"}, "fail", "the files are named other, the project demo"),
        ({"readme": "failed"}, "fail", "the README does not render (twine check)"),
        ({"readme": "", "readme_error": "no network"}, "unmeasured", "README was not checked"),
        ({"status": "not-packaged", "error": "no pyproject"}, "unmeasured", "not a packaged"),
        ({"status": "failed", "error": "uv build failed (exit 1)", "log_tail_hash": "f" * 64},
         "fail", "the build log's end is artifact " + "f" * 64),
        ({"status": "error", "error": "OSError: disk full"}, "unmeasured",
         "the gate could not build head's distributions (its own failure): OSError: disk full"),
    ],
    ids=["version-mismatch", "name-mismatch", "readme-broken", "readme-unchecked",
         "not-packaged", "build-failed", "gate-error"],
)  # fmt: skip
def test_distributions_problems(built: dict[str, Any], verdict: str, words: str) -> None:
    m = metric(gated().built("head", **built), "distributions")
    assert m.verdict == verdict and words in f"{m.value} {m.why}", m


def test_distributions_without_an_event_say_why() -> None:
    assert "--no-release-builds" in metric(with_builds(gated(), False), "distributions").why
    assert "recorded before" in metric(with_builds(gated(), None), "distributions").why
    pending = metric(with_builds(gated(), True), "distributions")
    assert pending.verdict == "unmeasured" and "once the tests are done" in pending.why


def test_a_version_the_tree_does_not_name_is_the_built_files_own_from_format_6() -> None:
    run = gated(version=None).built("head")
    positioned = list(enumerate(run.events, start=1))
    old = approval_report(positioned, run.artifacts, get_rule("default").decide, report_format=5)
    (m,) = [m for m in old.metrics if m.name == "distributions"]
    assert m.verdict == "unmeasured" and "version being released is unknown" in m.why
    now = metric(run, "distributions")
    assert now.verdict == "pass" and "demo 1.2.0, the version being released" in now.why


# --- upgrade (pure) -------------------------------------------------------------------------------


def test_upgrade_pass() -> None:
    run = gated().built("head").built("base", "1.1.0", readme="").upgraded()
    m = metric(run, "upgrade")
    assert (m.value, m.verdict) == ("demo 1.1.0 -> 1.2.0; imports demo", "pass")
    assert [d.kind for d in m.events] == ["DistributionsBuilt"] * 2 + ["UpgradeChecked"]


@pytest.mark.parametrize(
    "fields,verdict,words",
    [
        ({"steps": [ev.UpgradeStep(step="install base", exit_code=0),
                    ev.UpgradeStep(step="upgrade to head", exit_code=1, error="exit 1")],
          "version_after": None},
         "fail", "installing head's wheel over base's failed (exit 1)"),
        ({"imports": {"demo": "ImportError: no"}}, "fail", "import failed: demo: ImportError: no"),
        ({"version_after": "1.1.0"}, "fail", "demo 1.1.0 installed, not head's 1.2.0"),
        ({"steps": [ev.UpgradeStep(step="install base", exit_code=0),
                    ev.UpgradeStep(step="upgrade to head", exit_code=0),
                    ev.UpgradeStep(step="pip check", exit_code=1, error="exit 1")]},
         "fail", "pip check reports broken requirements"),
        ({"steps": [ev.UpgradeStep(step="install base", exit_code=1, error="exit 1")],
          "version_before": None, "version_after": None},
         "unmeasured", "did not install"),
        ({"skipped": "base is not a packaged project: nothing to upgrade from", "steps": []},
         "unmeasured", "nothing to upgrade from"),
    ],
    ids=["upgrade-failed", "import-failed", "old-version", "pip-check", "base-broken", "skipped"],
)  # fmt: skip
def test_upgrade_problems(fields: dict[str, Any], verdict: str, words: str) -> None:
    run = gated().built("head").built("base", "1.1.0", readme="").upgraded(**fields)
    m = metric(run, "upgrade")
    assert m.verdict == verdict and words in f"{m.value} {m.why}", m


def test_upgrade_without_an_event_follows_head_build() -> None:
    assert "not a packaged" in metric(gated().built("head", status="not-packaged"), "upgrade").why
    assert metric(gated().built("head", status="failed"), "upgrade").value == "no head wheel"


def test_release_step_is_a_function_of_the_recorded_events() -> None:
    from release_ledger.domain.run_state import fold

    run = with_builds(gated())
    assert release_step(fold(run.events, run.artifacts)) == "distributions"
    run.built("head")
    assert release_step(fold(run.events, run.artifacts)) == "upgrade"
    run.built("base", "1.1.0").upgraded()
    assert release_step(fold(run.events, run.artifacts)) is None
    off = with_builds(gated(), False)
    assert release_step(fold(off.events, off.artifacts)) is None
    unpackaged = with_builds(gated()).built("head", status="not-packaged")
    assert release_step(fold(unpackaged.events, unpackaged.artifacts)) is None


def test_expire_leaves_a_run_with_release_builds_to_do_to_resume(sqlite_url: str) -> None:
    """`ledger expire` completes runs that can conclude; one whose builds are still to be
    recorded is the gate's to finish (`ledger resume`), like shards still to run."""
    from release_ledger.ledger.expire import expire

    run = with_builds(gated())
    ledger = open_ledger(sqlite_url)
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    result = expire(ledger)
    assert result["concluded"] == []
    (only,) = result["runs"]
    assert only["note"].startswith("release builds still to do: continue with `ledger resume")
    assert len(ledger.read(run.run_id)) == len(run.events)
    run.built("head", status="not-packaged")
    ledger.append(run.run_id, run.events[-1:], artifacts={})
    assert expire(ledger)["concluded"] == [run.run_id]
    ledger.close()


# --- real builds ----------------------------------------------------------------------------------

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "demo-pkg"
{version}
readme = "README.md"
requires-python = ">=3.9"
{dynamic}
[tool.setuptools]
packages = ["demo"]
"""


def project_files(
    version: str = "1.0.0",
    readme: str = "# Demo\n\nA *demo* package.\n",
    readme_name: str = "README.md",
    init: str | None = None,
    dynamic: bool = False,
) -> dict[str, str | None]:
    text = PYPROJECT.format(
        version="" if dynamic else f'version = "{version}"',
        dynamic='dynamic = ["version"]\n\n[tool.setuptools.dynamic]\n'
        'version = {attr = "demo.__version__"}\n'
        if dynamic
        else "",
    ).replace('readme = "README.md"', f'readme = "{readme_name}"')
    return {
        "pyproject.toml": text,
        readme_name: readme,
        "demo/__init__.py": init if init is not None else f'__version__ = "{version}"\n',
        "CHANGES.md": f"# Changes\n\n## {version}\n\n- things\n",
        A: "def test_a():\n    assert True\n",
    }


def cache() -> str:
    return str(environments_dir())


def built_run(repo: Path, head: str, base: str, built: distributions.Built) -> RunBuilder:
    """A run holding what the gate records: head's release inspected and its build."""
    run = gated()
    facts = inspect_release(repo, head, base)
    run.events = [e for e in run.events if not isinstance(e, ev.ReleaseInspected)]
    run.add(ev.ReleaseInspected, **facts.fields)
    run.artifacts |= facts.artifacts | built.artifacts
    run.add(ev.DistributionsBuilt, **built.fields)
    return run


@pytest.mark.slow
def test_a_readme_that_does_not_render_and_a_version_not_bumped_fail(tmp_path: Path) -> None:
    """One real build, two faults: an reST README with an unclosed inline literal (docutils
    warns, so readme-renderer — PyPI's renderer, through `twine check` — refuses it), and a
    version read from `demo.__version__`, left at 1.0.0 while head is tagged v1.1.0."""
    broken = "Demo\n====\n\nInstall with ``pip install demo\n"
    files = project_files("1.0.0", readme=broken, readme_name="README.rst", dynamic=True)
    repo = make_repo(tmp_path, files)
    base = tag(repo, "v1.0.0")
    head = commit(repo, {"CHANGES.md": "## 1.1.0\n"}, "release 1.1.0")
    tag(repo, "v1.1.0")
    built = distributions.build(repo, head, "head", cache())
    assert built.fields["status"] == "built", built.fields
    assert [f["version"] for f in built.fields["files"]] == ["1.0.0", "1.0.0"]
    assert {f["readme"] for f in built.fields["files"]} == {"failed"}
    output = built.artifacts[built.fields["check_output_hash"]].decode()
    assert "FAILED" in output and "demo_pkg-1.0.0.tar.gz" in output
    m = metric(built_run(repo, head, base, built), "distributions")
    assert m.verdict == "fail"
    assert m.value.startswith("version mismatch: the files say 1.0.0, the release is 1.1.0")
    assert "the README does not render (twine check)" in m.value + m.why
    assert built.fields["check_output_hash"] in m.why


@pytest.mark.slow
def test_a_bad_build_fails_with_the_log_tail(tmp_path: Path) -> None:
    files = project_files("1.0.0")
    files["pyproject.toml"] = str(files["pyproject.toml"]).replace('name = "demo-pkg"', "name = 42")
    repo = make_repo(tmp_path, files)
    head = commit(repo, {}, "again")
    built = distributions.build(repo, head, "head", cache())
    assert built.fields["status"] == "failed"
    assert built.fields["log_tail_hash"] in built.artifacts
    m = metric(built_run(repo, head, head, built), "distributions")
    assert m.verdict == "fail" and m.value.startswith("build failed: uv build failed")


def test_an_unpackaged_repository_is_not_built(tmp_path: Path) -> None:
    """Nothing is built (read from git, no checkout): both checks say why, nothing crashes.
    (Every end-to-end gate test of an unpackaged repository records this event too.)"""
    repo = make_repo(tmp_path, {A: "def test_a(): pass\n"})
    built = distributions.build(repo, commit(repo, {}, "again"), "head", cache())
    assert built.fields["status"] == "not-packaged" and built.wheel is None
    run = gated()
    run.add(ev.DistributionsBuilt, **built.fields)
    assert metric(run, "distributions").value == "not packaged"
    upgrade = metric(run, "upgrade")
    assert (upgrade.value, upgrade.verdict) == ("not packaged", "unmeasured")


@pytest.mark.slow
def test_an_upgrade_whose_package_no_longer_imports_fails(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, project_files("1.0.0"))
    base = tag(repo, "v1.0.0")
    broken = '__version__ = "1.1.0"\nimport not_a_module_anywhere\n'
    head = commit(repo, project_files("1.1.0", init=broken), "break the import")
    head_built = distributions.build(repo, head, "head", cache(), check_readme=False)
    base_built = distributions.build(repo, base, "base", cache(), check_readme=False)
    assert head_built.wheel and base_built.wheel
    upgraded = distributions.upgrade(base_built.wheel, head_built.wheel, base, head, cache())
    fields = upgraded.fields
    assert (fields["version_before"], fields["version_after"]) == ("1.0.0", "1.1.0")
    assert fields["imports"]["demo"].startswith("ModuleNotFoundError")
    run = built_run(repo, head, base, head_built)
    run.artifacts |= upgraded.artifacts
    run.add(ev.UpgradeChecked, **fields)
    m = metric(run, "upgrade")
    assert m.verdict == "fail" and "import failed: demo: ModuleNotFoundError" in m.value


@pytest.mark.slow
def test_base_s_wheel_for_the_upgrade_is_the_one_its_environment_installs_built_once(
    tmp_path: Path,
) -> None:
    """Base's release build is its wheel alone, from the environments' cache entry: after
    base's environment it is reused, not built again; before it, the environment reuses it."""
    repo = make_repo(tmp_path, project_files("1.0.0"))
    first = tag(repo, "v1.0.0")
    second = commit(repo, project_files("1.0.1"), "release 1.0.1")
    envs = str(tmp_path / "envs")

    def environment_of(at: str) -> dict[str, object]:
        checkout = git.isolated_copy(repo, at, tmp_path / f"checkout-{at[:8]}")
        return environment.prepare(
            str(checkout), mode="auto", python=sys.executable, cache=envs, commit=at
        )

    assert environment_of(first)["project_reused"] is False
    after = distributions.build(repo, first, "base", envs, check_readme=False, wheel_only=True)
    before = distributions.build(repo, second, "base", envs, check_readme=False, wheel_only=True)
    assert environment_of(second)["project_reused"] is True

    for built, version in ((after, "1.0.0"), (before, "1.0.1")):
        assert built.fields["status"] == "built", built.fields
        assert [(f["type"], f["version"]) for f in built.fields["files"]] == [("wheel", version)]
        assert built.wheel and Path(built.wheel).is_relative_to(Path(envs) / "projects")
        assert built.fields["how"].startswith("uv build --wheel, from the tree")
        assert built.fields["top_level"] == ["demo"]
    assert (after.fields["reused"], before.fields["reused"]) == (True, False)
    line = describe(RunBuilder().add(ev.DistributionsBuilt, **after.fields), {})
    assert "reused from the build cache (uv build --wheel, from the tree" in line


@pytest.mark.slow
def test_base_s_wheel_is_built_from_its_tree_when_its_entry_is_pruned_as_it_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree is cloned where the wheel is built, under the entry's lock, never decided
    before it: an entry another gate prunes just after this one saw it built is built again
    from a real checkout, not from an empty folder."""
    import shutil

    repo = make_repo(tmp_path, project_files("1.0.0"))
    at = tag(repo, "v1.0.0")
    envs = str(tmp_path / "envs")
    first = distributions.build(repo, at, "base", envs, check_readme=False, wheel_only=True)
    assert (first.fields["status"], first.fields["reused"]) == ("built", False)
    assert first.wheel and Path(first.wheel).is_file()
    entry = Path(first.wheel).parent.parent
    ready = environment._ready

    def pruned_as_found(path: str) -> dict[str, object] | None:
        if Path(path) == entry and entry.exists():
            shutil.rmtree(entry)  # another gate's prune, between the look and the build
        return ready(path)

    monkeypatch.setattr(environment, "_ready", pruned_as_found)
    again = distributions.build(repo, at, "base", envs, check_readme=False, wheel_only=True)
    assert (again.fields["status"], again.fields["reused"]) == ("built", False), again.fields
    assert again.wheel and Path(again.wheel).is_file()


# --- the gate records them ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def release_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    root = tmp_path_factory.mktemp("release")
    repo = make_repo(root, project_files("1.0.0"))
    base = tag(repo, "v1")
    head = commit(repo, project_files("1.1.0"), "release 1.1.0")
    return repo, base, head


@pytest.mark.slow
def test_the_gate_builds_after_the_tests_and_the_release_is_approved(
    tmp_path: Path, release_repo: tuple[Path, str, str]
) -> None:
    repo, _, _ = release_repo
    result = gate(tmp_path, repo)
    assert result.code == 0, result.stderr
    run_id = result.document["run_id"]
    kinds = [e["kind"] for e in events(tmp_path, run_id)]
    tail = kinds[kinds.index("DistributionsBuilt") :]
    assert tail == ["DistributionsBuilt", "DistributionsBuilt", "UpgradeChecked", "RunCompleted"]
    approved = run_ledger(tmp_path, "approve", run_id, "--json")
    assert approved.code == 0, approved.stdout
    document = approved.document
    assert document["summary"] == "approved: 6/6", document["markdown"]
    by_name = {m["name"]: m for m in document["metrics"]}
    assert by_name["dependencies"]["value"].endswith("packages at head; same as base")
    assert by_name["distributions"]["value"].startswith(
        "demo-pkg 1.1.0: demo_pkg-1.1.0.tar.gz, demo_pkg-1.1.0-py3-none-any.whl"
    )
    assert by_name["upgrade"]["value"] == "demo-pkg 1.0.0 -> 1.1.0; imports demo"
    assert run_ledger(tmp_path, "audit", run_id).code == 0
    story = run_ledger(tmp_path, "show", run_id).stdout
    assert "head distributions: built with uv build" in story or "reused" in story
    assert "upgrade demo-pkg 1.0.0 -> 1.1.0" in story


@pytest.mark.slow
def test_a_resumed_run_builds_only_what_is_missing(
    tmp_path: Path, sqlite_url: str, release_repo: tuple[Path, str, str]
) -> None:
    """Stopped after head's distributions were recorded: resuming records the upgrade only."""
    repo, _, _ = release_repo
    ledger = open_ledger(sqlite_url)
    options = GateOptions(repo=repo, base="v1", jobs=2, environment="none", question_budget=0)
    run_id = start(ledger, options)

    def distributions_only(process: HookContext, state: Any) -> bool:
        if release_step(state) == "upgrade":
            raise GateSuspended
        return release_builds(process, state)

    executor = LocalExecutor(repo, environment_request=options.environment_request)
    try:
        GateProcess(ledger, run_id, executor, hooks=[distributions_only]).drive()
        state = project(ledger, run_id)
        assert set(state.distributions) == {"head"} and not state.completed
        GateProcess(ledger, run_id, executor, hooks=[release_builds]).drive()
    finally:
        executor.close()
    kinds = [r.event.kind for r in ledger.read(run_id)]
    assert kinds.count("DistributionsBuilt") == 2 and kinds.count("UpgradeChecked") == 1
    assert kinds[-1] == "RunCompleted"
    state = project(ledger, run_id)
    assert state.distributions["head"][0] < state.distributions["base"][0]
    again = LocalExecutor(repo, environment_request=options.environment_request)
    assert release_builds(GateProcess(ledger, run_id, again).context, state) is False
    again.close()
    ledger.close()
