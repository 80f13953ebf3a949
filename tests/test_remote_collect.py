"""Discovery from the declared invocation, and its working directory, on a build host over SSH:
the same collect-only run as the local executor's (`adapters/executors/invocation_run.py`, one
definition sent to the host), so a tox `changedir` with the installed package's doctests or a
unittest `*tests.py` suite inside the package gets the same files, verdict and introduced set
over SSH as here. A real sshd on 127.0.0.1, real git repositories, real environments.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from release_ledger.adapters.executors import invocation_run
from release_ledger.adapters.executors.local import named_items
from release_ledger.adapters.pytest_plugin import release_ledger_pytest as plugin
from release_ledger.domain.invocation import INSTALLED_PREFIX
from tests import gatekit
from tests.gatekit import events
from tests.gitrepo import commit, make_repo, tag
from tests.sshd import SshServer, start_sshd


def test_the_shared_rules_name_what_the_domain_and_the_plugin_name() -> None:
    """The module sent to hosts imports nothing of ours: its names are held equal here."""
    assert invocation_run.INSTALLED == INSTALLED_PREFIX
    assert invocation_run.SITE_LINK == plugin.SITE_LINK
    assert invocation_run.FILES_ROOT_VARIABLE == plugin.ROOT_VARIABLE


def test_a_run_starts_in_the_invocations_working_directory_with_the_checkout_as_rootdir(
    tmp_path: Path,
) -> None:
    checkout, site = tmp_path / "w", tmp_path / "venv" / "site-packages"
    checkout.mkdir()
    site.mkdir(parents=True)
    files = ["tests/test_a.py", "{site-packages}/pkg/mod.py"]

    start, named = invocation_run.start_and_files(str(checkout), ".tox", str(site), files)

    assert start == str((checkout / ".tox").resolve()) and Path(start).is_dir()
    assert named == [f"--rootdir={checkout}", "../tests/test_a.py",
                     f"../{invocation_run.SITE_LINK}/pkg/mod.py"]  # fmt: skip
    assert (checkout / invocation_run.SITE_LINK).resolve() == site.resolve()
    # a working directory outside the checkout is not followed
    assert invocation_run.start_and_files(str(checkout), "../x", str(site), files[:1]) == (
        str(checkout), files[:1],
    )  # fmt: skip


def test_collected_items_are_read_where_they_ran_and_named_by_the_gate(tmp_path: Path) -> None:
    site = "/envs/k/venv/lib/python3.11/site-packages"
    output = (
        f"{invocation_run.ITEM_MARK}\t{tmp_path}/tests/test_b.py\ttests/test_b.py::test_b\n"
        f"{invocation_run.ITEM_MARK}\t{site}/pkg/mod.py\tmod.py::pkg.mod.f\n"
        f"{invocation_run.ITEM_MARK}\t/elsewhere/x.py\tx.py::t\n"
    )
    read = invocation_run.item_paths(output, str(tmp_path))
    assert read[0] == ("tests/test_b.py", "test_b")
    assert named_items(read) == ["tests/test_b.py::test_b", "{site-packages}/pkg/mod.py::pkg.mod.f"]


def test_each_collected_item_is_named_by_its_files_real_path_in_the_order_printed(
    tmp_path: Path,
) -> None:
    """A file of many parametrized items is resolved once for all of them (64,000 items
    cost 1.5 s resolved one by one), and a file reached through a link is the file."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_v.py").write_text("")
    (tmp_path / "linked").symlink_to(tmp_path / "tests")
    lines = [
        f"{invocation_run.ITEM_MARK}\t{tmp_path}/{folder}/test_v.py\ttests/test_v.py::test[{n}]"
        for n in range(3) for folder in ("tests", "linked")
    ]  # fmt: skip
    read = invocation_run.item_paths("\n".join(lines) + "\n", str(tmp_path))
    assert read == [("tests/test_v.py", f"test[{n}]") for n in range(3) for _ in range(2)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SshServer]:
    running = start_sshd(tmp_path / "sshd")
    yield running
    running.stop()


def ssh_args(server: SshServer, monkeypatch: pytest.MonkeyPatch, mirror: Path) -> list[str]:
    """The gate's flags for the test host; what ~/.ssh/config would say is filled in."""
    import release_ledger.adapters.executors.ssh.executor as ssh_executor

    original = ssh_executor.build_ssh_executor
    settings: dict[str, Any] = {
        "port": server.port, "identity": server.identity, "ssh_options": server.client_options,
        "remote_python": sys.executable, "connect_timeout": 5,
    }  # fmt: skip
    monkeypatch.setattr(
        ssh_executor, "build_ssh_executor", lambda **given: original(**(settings | given))
    )
    return ["--executor", "ssh", "--host", server.host, "--remote-mirror", str(mirror)]


def discovered(workdir: Path, run_id: str) -> dict[str, Any]:
    return next(e for e in events(workdir, run_id) if e["kind"] == "TestFilesDiscovered")


@pytest.mark.slow
@pytest.mark.ssh
def test_a_changedir_doctest_regression_gets_the_same_verdict_over_ssh_as_here(
    server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_declared_invocation import VERSION, project

    repo = make_repo(tmp_path, project(1))
    tag(repo, "v1")
    commit(repo, project(2), "value 2")
    flags = ssh_args(server, monkeypatch, tmp_path / "host" / "mirror.git")

    here = gatekit.gate(tmp_path / "local", repo, "--no-release-builds")
    there = gatekit.gate(tmp_path / "ssh", repo, "--no-release-builds", *flags)

    assert (there.code, there.document["status"]) == (here.code, here.document["status"]) == (
        1, "failed",
    ), there.document  # fmt: skip
    assert there.document["introduced"] == here.document["introduced"] == [
        "tests/test_value.py::test_value_is_one", "{site-packages}/facts/__init__.py::facts.double",
    ]  # fmt: skip
    assert there.document["preexisting"] == [] and there.document["unmeasured"] == []
    found = discovered(tmp_path / "ssh", there.document["run_id"])
    assert found["files"] == discovered(tmp_path / "local", here.document["run_id"])["files"]
    assert found["collected_by"].startswith(f"collected by tox:py{VERSION}-tests"), found
    assert "{site-packages}/facts/__init__.py" in found["files"]


def unittest_in_package(tmp_path: Path) -> Path:
    """A hatch script's unittest suite inside the package (`*tests.py`), broken at head."""
    from tests.test_runner_gates import ADD, BROKEN_ADD, pyproject, unittest_module

    hatch = (
        "[tool.hatch.envs.test.scripts]\n"
        "test = \"python -m unittest discover -s calc -p '*tests.py'\"\n"
    )
    repo = make_repo(tmp_path, {
        "pyproject.toml": pyproject("calc", hatch), "calc/__init__.py": "",
        "calc/core.py": ADD, "calc/core_tests.py": unittest_module("calc.core", "Add"),
    })  # fmt: skip
    tag(repo, "v1")
    commit(repo, {"calc/core.py": BROKEN_ADD}, "regression")
    return repo


@pytest.mark.slow
@pytest.mark.ssh
def test_a_unittest_suite_inside_the_package_is_discovered_on_the_host(
    server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = unittest_in_package(tmp_path)
    flags = ssh_args(server, monkeypatch, tmp_path / "host" / "mirror.git")

    there = gatekit.gate(tmp_path / "ssh", repo, "--no-release-builds", *flags)

    assert (there.code, there.document["status"]) == (1, "failed"), there.document
    assert there.document["introduced"] == ["calc/core_tests.py::Add::test_add"]
    found = discovered(tmp_path / "ssh", there.document["run_id"])
    assert found["files"] == ["calc/core_tests.py"]
    assert found["collected_by"].startswith("collected by hatch:test:test"), found


@pytest.mark.slow
@pytest.mark.kubernetes
def test_a_changedir_doctest_regression_gets_the_same_verdict_in_pods_as_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same in a pod of the loopback API stand-in (the official client against it)."""
    from tests.test_declared_invocation import VERSION, project

    repo = make_repo(tmp_path, project(1))
    tag(repo, "v1")
    commit(repo, project(2), "value 2")
    here = gatekit.gate(tmp_path / "local", repo, "--no-release-builds")

    there = _gate_in_pod(tmp_path, monkeypatch, repo)

    assert (there.code, there.document["status"]) == (here.code, here.document["status"]) == (
        1, "failed",
    ), there.document  # fmt: skip
    assert there.document["introduced"] == here.document["introduced"]
    assert there.document["preexisting"] == [] and there.document["unmeasured"] == []
    found = discovered(tmp_path / "k8s", there.document["run_id"])
    assert found["files"] == discovered(tmp_path / "local", here.document["run_id"])["files"]
    assert found["collected_by"].startswith(f"collected by tox:py{VERSION}-tests"), found


@pytest.mark.slow
@pytest.mark.kubernetes
def test_a_unittest_suite_inside_the_package_is_discovered_in_a_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = unittest_in_package(tmp_path)
    there = _gate_in_pod(tmp_path, monkeypatch, repo)

    assert (there.code, there.document["status"]) == (1, "failed"), there.document
    assert there.document["introduced"] == ["calc/core_tests.py::Add::test_add"]
    found = discovered(tmp_path / "k8s", there.document["run_id"])
    assert found["files"] == ["calc/core_tests.py"]
    assert found["collected_by"].startswith("collected by hatch:test:test"), found


def _gate_in_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo: Path) -> Any:
    """A gate of `repo` on a one-member pool of the loopback API stand-in."""
    from tests.k8s_standin import standin_pool

    with standin_pool(tmp_path / "pool", ["east"]) as (_, kubeconfig):
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        return gatekit.gate(
            tmp_path / "k8s", repo, "--no-release-builds", "--executor", "kubernetes",
            "--pool", "east", "--source", f"file://{repo}", "--timeout", "120",
        )  # fmt: skip
