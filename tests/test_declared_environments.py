"""Each revision is installed the way its own CI installs it: one declared source, chosen by a
documented precedence, with every source tried recorded.

A corpus of small projects, one per layout (Pallets requirements folder with per-interpreter
variants, tox ini and toml, PEP 735 with include-group, extras, uv.lock, a first source that
fails and a second that works). Real installs with uv from PyPI (its cache keeps repeats fast).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from release_ledger.adapters.executors import environment
from tests import gatekit
from tests.gatekit import events, run_ledger
from tests.gitrepo import commit, make_repo, tag

pytestmark = pytest.mark.slow

VERSION = "{}.{}".format(*sys.version_info[:2])
VARIANT = "{}{}".format(*sys.version_info[:2])
SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
)


def pyproject(name: str = "layout", extra: str = "", tail: str = "") -> str:
    extras = f"[project.optional-dependencies]\n{extra}\n" if extra else ""
    return SETUPTOOLS + f'[project]\nname = "{name}"\nversion = "1.0"\n' + extras + tail


def checkout(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "checkout"
    files = {"layout/__init__.py": "", **files}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def prepared(tmp_path: Path, root: Path, **kwargs: object) -> dict[str, object]:
    found = environment.prepare(
        str(root), mode="auto", python=sys.executable, cache=str(tmp_path / "cache"),
        commit="c" * 40, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    return found


def packages(found: dict[str, object]) -> set[str]:
    lines = str(found["packages"]).splitlines()
    return {line.split("==")[0].split(" @ ")[0].strip().lower() for line in lines if line.strip()}


def tried(found: dict[str, object]) -> list[tuple[str, str]]:
    return [(str(t["source"]), str(t["outcome"])) for t in found["tried"]]  # type: ignore[attr-defined]


def test_a_pallets_requirements_folder_installs_the_variant_for_this_interpreter_only(
    tmp_path: Path,
) -> None:
    # tests.txt and tests37.txt pin pytest differently: their union cannot be installed.
    root = checkout(tmp_path, {
        "pyproject.toml": pyproject(),
        "requirements/tests.txt": "pytest==8.3.4\n",
        "requirements/tests37.txt": "pytest==7.4.4\n",
        f"requirements/tests{VARIANT}.txt": "pytest==8.3.4\niniconfig==2.0.0\n",
        "requirements/dev.txt": "-r tests.txt\nblack==19.3b0\n",
        "requirements/docs.txt": "sphinx==1.0\n",
    })  # fmt: skip

    found = prepared(tmp_path, root)

    assert found["status"] == "ready", found.get("log_tail")
    assert found["source"] == "requirements-file"
    assert found["tried"][0]["detail"] == f"requirements/tests{VARIANT}.txt"  # type: ignore[index]
    assert {"pytest", "iniconfig"} <= packages(found)
    assert "black" not in packages(found) and "sphinx" not in packages(found)
    # the project itself is installed from its wheel (and left out of the dependency list)
    venv = Path(str(found["python"])).parent.parent
    assert list(venv.glob("lib/python*/site-packages/layout/__init__.py"))
    assert "layout" not in packages(found)


def test_the_plain_test_file_is_used_when_no_variant_names_this_interpreter(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path, {
        "pyproject.toml": pyproject(),
        "requirements/tests.txt": "pytest\niniconfig\n",
        "requirements/tests37.txt": "pytest==7.4.4\n",
    })  # fmt: skip

    assert environment.requirements_file_for(str(root), VERSION) == "requirements/tests.txt"
    assert environment.requirements_file_for(str(root), "3.7") == "requirements/tests37.txt"


@pytest.mark.parametrize(
    "files",
    [
        {
            "tox.ini": (
                "[tox]\nenv_list = py3{9,10,11,12,13}\n"
                "[testenv]\ndeps =\n    pytest\n    iniconfig==2.0.0\n"
                "set_env = LAYOUT_MODE=tox\n"
                "commands = pytest -p no:randomly -x --basetemp={envtmpdir} tests {posargs}\n"
            )
        },
        {
            "tox.toml": (
                'env_list = ["3.11", "3.12"]\n[env_run_base]\n'
                'deps = ["pytest", "iniconfig==2.0.0"]\nset_env = { LAYOUT_MODE = "tox" }\n'
                'commands = [["pytest", "-p", "no:randomly", "-x", "tests", "{posargs}"]]\n'
            )
        },
    ],
    ids=["tox.ini", "tox.toml"],
)
def test_tox_only_dependencies_are_read_by_tox_and_win_over_requirements_files(
    tmp_path: Path, files: dict[str, str]
) -> None:
    root = checkout(tmp_path, {
        "pyproject.toml": pyproject(extra='test = ["attrs"]'),
        "requirements-test.txt": "six\n",
        "tests/test_a.py": "def test_a():\n    pass\n",
        **files,
    })  # fmt: skip

    found = prepared(tmp_path, root)

    assert found["status"] == "ready", found.get("log_tail")
    assert found["source"] == "tox"
    assert tried(found) == [("tox", "used")]
    assert {"pytest", "iniconfig"} <= packages(found)
    assert "six" not in packages(found) and "attrs" not in packages(found)
    # set_env and the pytest options of `commands` (not its paths, not -x) reach the shard
    env = environment.shard_env({"PATH": "/usr/bin"}, found["runtime"])  # type: ignore[arg-type]
    assert env["LAYOUT_MODE"] == "tox"
    assert env["PYTEST_ADDOPTS"] == "-p no:randomly"


def test_a_pep735_group_with_include_group_is_installed(tmp_path: Path) -> None:
    root = checkout(tmp_path, {
        "pyproject.toml": pyproject(
            extra='test = ["six"]',
            tail='[dependency-groups]\nbase = ["iniconfig"]\n'
            'test = ["pytest", {include-group = "base"}]\n',
        ),
    })  # fmt: skip

    found = prepared(tmp_path, root)

    assert found["status"] == "ready", found.get("log_tail")
    assert (found["source"], found["group"]) == ("dependency-group", "test")
    assert {"pytest", "iniconfig"} <= packages(found)
    assert "six" not in packages(found)  # the group wins over the extra


def test_pytest_is_compiled_into_the_environment_at_its_build(tmp_path: Path) -> None:
    """Every collection, worker and shard imports pytest, and none can write its bytecode
    into the environment: the build's check that pytest imports writes it, once."""
    root = checkout(tmp_path, {"pyproject.toml": pyproject(extra='test = ["pytest"]')})

    found = prepared(tmp_path, root)

    assert found["status"] == "ready", found.get("log_tail")
    python = str(found["python"])
    probe = (
        "import importlib.util, os, pytest, _pytest.main, pluggy\n"
        "print(all(os.path.exists(importlib.util.cache_from_source(m.__file__))\n"
        "          for m in (pytest, _pytest.main, pluggy)))\n"
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # this probe writes none itself
    done = subprocess.run([python, "-c", probe], env=env, capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert done.stdout.strip() == "True"


def test_the_test_extra_is_installed_with_the_project_and_the_extras_setting_adds_its_own(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path, {
        "pyproject.toml": pyproject(extra='test = ["pytest"]\nfast = ["six"]'),
    })  # fmt: skip

    plain = prepared(tmp_path, root)
    with_fast = prepared(tmp_path, root, extras=["fast"])

    assert plain["source"] == with_fast["source"] == "extras"
    assert "six" not in packages(plain)
    assert {"six", "pytest"} <= packages(with_fast)
    assert with_fast["extra"] == "fast,test"


def test_an_extra_the_project_does_not_declare_fails_naming_what_it_declares(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path, {"pyproject.toml": pyproject(extra='test = ["pytest"]')})

    found = prepared(tmp_path, root, extras=["nope"])

    assert found["status"] == "failed"
    assert found["error"] == "extras nope are not declared by the project (it declares: test)"


def test_a_uv_lock_pins_what_uv_sync_installs_in_a_project_uv_manages(tmp_path: Path) -> None:
    import subprocess

    root = checkout(tmp_path, {
        "pyproject.toml": pyproject(
            extra='test = ["pytest", "iniconfig==1.1.1"]', tail="[tool.uv]\nmanaged = true\n"
        ),
    })  # fmt: skip
    uv = environment.find_uv()
    assert uv is not None
    subprocess.run(
        [uv, "lock", "-q", "--python", sys.executable], cwd=root, check=True,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )  # fmt: skip
    # The declaration no longer pins iniconfig: only the lock says 1.1.1 (the newest is 2.x).
    unpinned = (root / "pyproject.toml").read_text().replace("iniconfig==1.1.1", "iniconfig")
    (root / "pyproject.toml").write_text(unpinned)

    found = prepared(tmp_path, root)

    assert found["status"] == "ready", found.get("log_tail")
    assert "iniconfig==1.1.1" in str(found["packages"])
    assert "uv.lock" in found["files_read"]  # type: ignore[operator]
    assert str(found["lock"]).startswith("uv.lock sha256:")
    assert found["lock_note"] == (
        "uv.lock applied: uv sync installs extra [test] of a project uv manages ([tool.uv])"
    )


def test_a_first_source_that_fails_is_recorded_and_the_next_one_is_used(tmp_path: Path) -> None:
    root = checkout(tmp_path, {
        "pyproject.toml": pyproject(
            extra='test = ["pytest"]',
            tail='[dependency-groups]\ntest = ["release-ledger-no-such-package-anywhere==1.0"]\n',
        ),
    })  # fmt: skip

    found = prepared(tmp_path, root)

    assert found["status"] == "ready", found.get("log_tail")
    assert tried(found) == [("dependency-group", "failed"), ("extras", "used")]
    first = found["tried"][0]  # type: ignore[index]
    assert first["error"] == "installing group test failed (exit 1)"
    assert "release-ledger-no-such-package-anywhere" in first["log_tail"]

    again = prepared(tmp_path, root)  # the ready environment is reused, not tried again

    assert again["reused"] is True
    assert tried(again) == [("dependency-group", "failed"), ("extras", "used")]
    assert again["tried"][0]["error"] == first["error"]  # type: ignore[index]

    # An entry a gate built before it kept its failures: they are tried again once, then kept.
    stamp = tmp_path / "cache" / "envs" / str(again["key"]) / "ready.json"
    meta = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({k: v for k, v in meta.items() if k != "failed_before"}))
    retried = prepared(tmp_path, root)
    assert retried["reused"] is True
    assert tried(retried) == [("dependency-group", "failed"), ("extras", "used")]
    kept = json.loads(stamp.read_text())["failed_before"]
    assert [(t["source"], t["detail"], t["error"]) for t in kept] == [
        (t["source"], t["detail"], t["error"]) for t in meta["failed_before"]
    ]


def test_a_ready_later_source_is_not_reused_over_an_earlier_one_not_tried_when_it_was_built(
    tmp_path: Path,
) -> None:
    """A source rejected (or unreadable) when a later source's environment was built, and
    usable now, is tried first: the ready environment of the later one does not hide it."""
    root = checkout(tmp_path, {
        "pyproject.toml": pyproject(
            extra='test = ["pytest"]', tail='[dependency-groups]\ntest = ["pytest", "iniconfig"]\n'
        ),
    })  # fmt: skip

    rejected = prepared(tmp_path, root, skip_sources={"dependency-group": "its shards all stopped"})
    assert tried(rejected) == [("dependency-group", "failed"), ("extras", "used")]

    found = prepared(tmp_path, root)  # the group is not rejected now

    assert found["status"] == "ready", found.get("log_tail")
    assert tried(found) == [("dependency-group", "used")]
    assert "iniconfig" in packages(found)


def test_a_suite_whose_fixture_starts_the_package_in_a_bare_subprocess_imports_the_revision(
    tmp_path: Path,
) -> None:
    """The revision is installed, not overlaid on PYTHONPATH: a child with an environment of
    its own (a live server, a CLI test) imports the revision's code too."""

    def files(value: int) -> dict[str, str | bytes | None]:
        return {
            "pyproject.toml": pyproject("bare", extra='test = ["pytest"]'),
            "bare/__init__.py": f"VALUE = {value}\n",
            "tests/test_child.py": (
                "import os, subprocess, sys\n\n"
                "def test_a_child_with_its_own_environment_imports_the_revision():\n"
                "    code = 'import bare; print(bare.VALUE)'\n"
                "    done = subprocess.run([sys.executable, '-c', code],\n"
                "                          env={'PATH': os.environ['PATH']}, cwd='/',\n"
                "                          capture_output=True, text=True)\n"
                f"    assert done.stdout.strip() == '{value}', done.stderr\n"
            ),
        }

    repo = make_repo(tmp_path, files(1))
    tag(repo, "v1")
    commit(repo, files(2), "value 2")

    result = gatekit.gate(tmp_path, repo, "--no-release-builds")

    assert result.code == 0, (result.stdout, result.stderr)
    assert result.document["status"] == "passed"
    run_id = result.document["run_id"]
    prepared_events = [e for e in events(tmp_path, run_id) if e["kind"] == "EnvironmentPrepared"]
    assert sorted((e["revision"], e["source"]) for e in prepared_events) == [
        ("base", "extras"),
        ("head", "extras"),
    ]
    shown = run_ledger(tmp_path, "show", run_id, "--all").stdout
    assert "extras (extra [test]): used" in shown
    # both revisions resolved against one snapshot: the head commit's date, recorded
    started = next(e for e in events(tmp_path, run_id) if e["kind"] == "RunStarted")
    snapshot = started["options"]["exclude_newer"]
    assert snapshot.endswith("Z")
    assert {e["exclude_newer"] for e in prepared_events} == {snapshot}
    assert f"resolved as of {snapshot}" in shown


def test_an_extras_setting_the_project_does_not_declare_is_exit_2_and_writes_nothing(
    tmp_path: Path,
) -> None:
    table = '[tool.release-ledger]\nextras = ["default"]\n'
    files = {
        "pyproject.toml": pyproject(extra='test = ["pytest"]', tail=table),
        "layout/__init__.py": "",
        "tests/test_a.py": "def test_a():\n    pass\n",
    }
    repo = make_repo(tmp_path, files)
    tag(repo, "v1")
    commit(repo, {"tests/test_b.py": "def test_b():\n    pass\n"})

    result = gatekit.gate(tmp_path, repo, "--no-release-builds")

    assert result.code == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        "ledger: error: extras default: not declared by the project at HEAD (its extras: test)"
    ]
    listed = run_ledger(tmp_path, "runs", "--json")
    assert listed.code != 0 or json.loads(listed.stdout) == []


def test_unpinned_dependencies_resolve_as_the_index_stood_at_the_snapshot(tmp_path: Path) -> None:
    root = checkout(tmp_path, {"pyproject.toml": pyproject(extra='test = ["pytest", "iniconfig"]')})

    found = prepared(tmp_path, root, exclude_newer="2022-06-01T00:00:00Z")

    assert found["status"] == "ready", found.get("log_tail")
    assert "iniconfig==1.1.1" in str(found["packages"])  # 2.0.0 came out in 2023
    assert found["exclude_newer"] == "2022-06-01T00:00:00Z"


def test_the_snapshot_defaults_to_the_head_commits_date_and_a_bad_date_is_bad_input(
    tmp_path: Path,
) -> None:
    from release_ledger.domain.errors import BadInput
    from release_ledger.ledger.settings import snapshot

    repo = make_repo(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    tag(repo, "v1")

    assert snapshot(repo, "HEAD", "v1", "head").endswith("Z")
    assert snapshot(repo, "HEAD", "v1", "2025-06-01") == "2025-06-01T00:00:00Z"
    assert snapshot(repo, "HEAD", "v1", "2025-06-01T02:00:00+02:00") == "2025-06-01T00:00:00Z"
    with pytest.raises(BadInput, match="--resolve-as-of 'last tuesday'"):
        snapshot(repo, "HEAD", "v1", "last tuesday")


def test_shards_run_coverage_off_where_the_environment_has_pytest_cov(tmp_path: Path) -> None:
    """A project whose pytest configuration turns coverage on with a fail-under (`addopts`)
    fails every shard (a share of the run) with no test failed: where pytest-cov is installed
    the shards' options end with `--no-cov`, and a shard of one test then passes."""
    import subprocess

    addopts = '[tool.pytest.ini_options]\naddopts = "--cov=layout --cov-fail-under=100"\n'
    root = checkout(tmp_path, {
        "pyproject.toml": pyproject(extra='test = ["pytest", "pytest-cov"]', tail=addopts),
        "layout/__init__.py": "def used():\n    return 1\n\ndef unused():\n    return 2\n",
        "tests/test_one.py": "from layout import used\n\n\ndef test_used():\n    assert used()\n",
    })  # fmt: skip

    found = prepared(tmp_path, root)

    assert found["status"] == "ready", found.get("log_tail")
    assert "pytest-cov" in packages(found)
    assigned = dict(s.split("=", 1) for s in found["runtime"]["SET"])  # type: ignore[index]
    assert assigned["PYTEST_ADDOPTS"].split()[-1] == "--no-cov"
    env = {**os.environ, "PYTEST_ADDOPTS": assigned["PYTEST_ADDOPTS"]}
    shard = [str(found["python"]), "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/test_one.py"]  # fmt: skip
    assert subprocess.run(shard, cwd=root, env=env, capture_output=True).returncode == 0
    del env["PYTEST_ADDOPTS"]  # as the project's own partial run: under its fail-under
    assert subprocess.run(shard, cwd=root, env=env, capture_output=True).returncode == 1
