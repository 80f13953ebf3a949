"""The SSH executor against a real OpenSSH server on 127.0.0.1 (this machine is the host).

The host's python is this venv's interpreter, so the remote pytest is the one running here.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from defusedxml import ElementTree

from release_ledger.adapters.executors.local import LocalExecutor
from release_ledger.adapters.executors.ssh.executor import SshExecutor, build_ssh_executor
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import Observation, ShardRun
from tests.gitrepo import commit, git, make_repo
from tests.sshd import SshServer, free_port, start_sshd

pytestmark = pytest.mark.ssh

SUITE = {
    "tests/test_ok.py": "def test_one():\n    assert 1 + 1 == 2\n\n\ndef test_two():\n    pass\n",
    "tests/test_bad.py": "def test_fine():\n    pass\n\n\ndef test_broken():\n    assert 0\n",
    "tests/test_slow.py": "import time\n\n\ndef test_slow():\n    time.sleep(120)\n",
}

Factory = Callable[..., SshExecutor]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    running = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield running
    running.stop()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, SUITE)


@pytest.fixture
def executor_for(tmp_path: Path, repo: Path) -> Iterator[Callable[..., SshExecutor]]:
    """Build executors for a server (mirror in tmp_path) and close them after the test."""
    built: list[SshExecutor] = []

    def build(server: SshServer, **overrides: Any) -> SshExecutor:
        settings: dict[str, Any] = {
            "host": server.host,
            "repo": repo,
            "remote_mirror": str(tmp_path / "mirror.git"),
            "port": server.port,
            "identity": server.identity,
            "ssh_options": server.client_options,
            "remote_python": sys.executable,
            "connect_timeout": 5,
        }
        executor = build_ssh_executor(**(settings | overrides))
        built.append(executor)
        return executor

    yield build
    for executor in built:
        executor.close()


def shard(commit_sha: str, *files: str, **fields: Any) -> ShardRun:
    return ShardRun(
        run_id="run-1",
        shard_id="s1",
        attempt=1,
        revision="head",
        commit=commit_sha,
        files=files,
        **fields,
    )


def outcomes(report: bytes | None) -> list[tuple[str, str, str]]:
    """(classname, name, outcome) of every test case: what must agree, without timings."""
    assert report is not None
    root = ElementTree.fromstring(report)
    cases = []
    for case in root.iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        cases.append((case.get("classname", ""), case.get("name", ""), ",".join(kinds) or "pass"))
    return sorted(cases)


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# --- validation (no server needed) -----------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "",
        "-oProxyCommand=touch${IFS}x",
        "host;rm -rf ~",
        "user@@host",
        "a b",
        "host:22",
        "us$er@host",
        "user@",
        "@host",
        "host\n",
        "$(id)",
        "user@-host",
    ],
)
def test_a_host_that_is_not_user_at_host_of_safe_characters_is_bad_input(
    host: str, repo: Path
) -> None:
    with pytest.raises(BadInput, match="bad ssh host") as raised:
        build_ssh_executor(host=host, repo=repo)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "mirror",
    [
        "relative/mirror.git",
        "~user/mirror.git",
        "/srv/../etc/mirror.git",
        "~/../mirror.git",
        "~/cache/..",
        "/",
        "~",
        "~/",
        "/tmp/a mirror.git",
        "$HOME/mirror.git",
        "/tmp/$(id).git",
        "",
    ],
)
def test_a_mirror_that_is_not_an_absolute_or_home_path_without_dotdot_is_bad_input(
    mirror: str, repo: Path
) -> None:
    with pytest.raises(BadInput, match="bad remote mirror"):
        build_ssh_executor(host="builder@build-1.example.com", repo=repo, remote_mirror=mirror)


def test_good_settings_are_accepted_without_touching_the_network(repo: Path) -> None:
    executor = build_ssh_executor(
        host="ci_user@build-1.example.com",
        repo=repo,
        remote_mirror="~/.cache/release-ledger/mirror.git",
        port=2222,
        ssh_options=["StrictHostKeyChecking=accept-new"],
    )
    assert executor.name == "ssh"
    assert build_ssh_executor(host="10.0.0.7", repo=repo, remote_mirror="/srv/mirror.git")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"port": 0}, "bad ssh port"),
        ({"ssh_options": ["-oProxyCommand=x"]}, "bad ssh option"),
        ({"identity": Path("/nonexistent/key")}, "identity file"),
        ({"remote_path": "bin:/usr/bin"}, "bad remote PATH"),
        ({"connect_timeout": 0}, "connect timeout"),
    ],
)
def test_other_bad_settings_are_bad_input(
    overrides: dict[str, Any], message: str, repo: Path
) -> None:
    with pytest.raises(BadInput, match=message):
        build_ssh_executor(host="build-1", repo=repo, **overrides)


# --- running shards --------------------------------------------------------------------------


def test_a_shard_over_ssh_gives_the_same_exit_code_and_report_as_locally(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    head = commit(repo, {"tests/test_ok.py": SUITE["tests/test_ok.py"] + "\ndef test_3(): pass\n"})
    remote = executor_for(server)
    local = LocalExecutor(repo, python=sys.executable)
    codes = []
    try:
        for files in [("tests/test_ok.py",), ("tests/test_ok.py", "tests/test_bad.py")]:
            over_ssh = remote.run(shard(head, *files))
            here = local.run(shard(head, *files))
            assert over_ssh.failure_reason is None, over_ssh.failure_detail
            assert over_ssh.exit_code == here.exit_code
            assert over_ssh.signal is None
            assert outcomes(over_ssh.report) == outcomes(here.report)
            assert over_ssh.rss_mb > 5
            assert over_ssh.seconds > 0
            assert b"passed" in over_ssh.log_tail
            codes.append(over_ssh.exit_code)
    finally:
        local.close()
    assert codes == [0, 1]


def test_the_shard_runs_at_the_exact_commit_not_the_branch_tip(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    old = git(repo, "rev-parse", "HEAD")
    commit(repo, {"tests/test_ok.py": "def test_one():\n    assert 0\n"})
    observation = executor_for(server).run(shard(old, "tests/test_ok.py"))
    assert observation.exit_code == 0
    assert outcomes(observation.report) == [
        ("tests.test_ok", "test_one", "pass"),
        ("tests.test_ok", "test_two", "pass"),
    ]


def test_arguments_reach_the_command_literally_through_both_shells(
    server: SshServer, repo: Path, executor_for: Factory, tmp_path: Path
) -> None:
    marker = tmp_path / "injected"
    name = f"suite 'quoted' \"double\" $(touch {marker}) `touch {marker}`; touch {marker} &"
    command = (
        "{python}", "-m", "pytest", "-p", "no:cacheprovider",
        "-o", f"junit_suite_name={name}", "--junitxml={junit}", "{files}",
    )  # fmt: skip
    head = git(repo, "rev-parse", "HEAD")
    observation = executor_for(server).run(shard(head, "tests/test_ok.py", command=command))
    assert observation.exit_code == 0, observation.log_tail[-2000:]
    assert observation.report is not None
    suite = ElementTree.fromstring(observation.report).find("testsuite")
    assert suite is not None and suite.get("name") == name
    assert not marker.exists()


def test_parallel_runs_from_several_threads_each_get_their_own_checkout(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    executor = executor_for(server)
    executor.prepare([head])
    shards = [
        shard(head, "tests/test_ok.py").model_copy(update={"shard_id": f"s{i}"})
        if i % 2
        else shard(head, "tests/test_bad.py").model_copy(update={"shard_id": f"s{i}"})
        for i in range(4)
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        observations = list(pool.map(executor.run, shards))
    assert [o.exit_code for o in observations] == [1, 0, 1, 0]
    assert len({o.extra["remote_tmp"] for o in observations}) == 4


# --- the mirror ------------------------------------------------------------------------------


def gate_refs(mirror: Path) -> list[str]:
    return git(mirror, "for-each-ref", "--format=%(refname)", "refs/release-ledger/gate").split()


def object_count(mirror: Path) -> str:
    return git(mirror, "count-objects", "-v")


def test_the_mirror_is_created_bare_and_a_second_prepare_pushes_nothing_new(
    server: SshServer, repo: Path, executor_for: Factory, tmp_path: Path
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {"tests/test_new.py": "def test_new(): pass\n"})
    mirror = tmp_path / "mirror.git"
    first = executor_for(server)
    first.prepare([head, base])
    assert first.pushed == [head, base]
    assert git(mirror, "rev-parse", "--is-bare-repository") == "true"
    assert gate_refs(mirror) == sorted(f"refs/release-ledger/gate/{sha}" for sha in (head, base))
    objects = object_count(mirror)

    first.prepare([head, base])
    later_run = executor_for(server)  # a new gate run: knows nothing, asks the host
    later_run.prepare([base, head])
    assert first.pushed == [head, base]
    assert later_run.pushed == []
    assert len(gate_refs(mirror)) == 2
    assert object_count(mirror) == objects
    assert later_run.run(shard(head, "tests/test_new.py")).exit_code == 0


def test_a_commit_already_in_the_mirror_is_pinned_without_a_push(
    server: SshServer, repo: Path, executor_for: Factory, tmp_path: Path
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {"tests/test_new.py": "def test_new(): pass\n"})
    mirror = tmp_path / "mirror.git"
    executor_for(server).prepare([head])  # base's objects arrive as head's parent
    second = executor_for(server)
    second.prepare([base])
    assert second.pushed == []
    assert f"refs/release-ledger/gate/{base}" in gate_refs(mirror)


def test_run_pins_its_commit_itself_when_prepare_was_not_called(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    executor = executor_for(server)
    assert executor.run(shard(head, "tests/test_bad.py")).exit_code == 1
    assert executor.pushed == [head]


def test_a_mirror_path_that_is_not_a_bare_repository_is_bad_input(
    server: SshServer, repo: Path, executor_for: Factory, tmp_path: Path
) -> None:
    (tmp_path / "not-a-mirror").mkdir()
    executor = executor_for(server, remote_mirror=str(tmp_path / "not-a-mirror"))
    with pytest.raises(BadInput, match="not a bare git repository"):
        executor.prepare([git(repo, "rev-parse", "HEAD")])


def test_a_home_relative_mirror_is_created_under_the_users_home(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    relative = f".cache/release-ledger-tests/{time.monotonic_ns()}/mirror.git"
    executor = executor_for(server, remote_mirror=f"~/{relative}")
    head = git(repo, "rev-parse", "HEAD")
    try:
        assert executor.run(shard(head, "tests/test_ok.py")).exit_code == 0
        assert executor.mirror_path == str((Path.home() / relative).resolve())
    finally:
        shutil.rmtree(Path.home() / relative.rsplit("/", 2)[0], ignore_errors=True)


# --- cleanup ---------------------------------------------------------------------------------


def test_nothing_is_left_in_the_hosts_tmp_after_passing_failing_and_broken_shards(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    before = server.temporaries()
    head = git(repo, "rev-parse", "HEAD")
    executor = executor_for(server)
    seen = [
        executor.run(shard(head, "tests/test_ok.py")),
        executor.run(shard(head, "tests/test_bad.py")),
        executor.run(shard(head, "tests/test_missing.py")),
        executor.run(shard(head, "tests/test_ok.py", command=("/nonexistent/python",))),
    ]
    assert [o.exit_code for o in seen] == [0, 1, 4, 127]
    assert {Path(o.extra["remote_tmp"]).parent for o in seen} == {server.tmp}  # its TMPDIR
    assert all(not Path(o.extra["remote_tmp"]).exists() for o in seen)
    assert server.temporaries() - before == set()


# --- faults ----------------------------------------------------------------------------------


def test_connection_refused_is_an_unmeasured_ssh_connect(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    executor = executor_for(server, port=free_port())
    head = git(repo, "rev-parse", "HEAD")
    executor.prepare([head])  # faults are not raised: each run records them
    observation = executor.run(shard(head, "tests/test_ok.py"))
    assert observation.failure_reason == "ssh-connect"
    assert "refused" in observation.failure_detail.lower()
    assert observation.exit_code is None and observation.report is None


def test_a_key_the_server_does_not_know_is_an_unmeasured_ssh_auth(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    executor = executor_for(server, identity=server.wrong_identity)
    observation = executor.run(shard(git(repo, "rev-parse", "HEAD"), "tests/test_ok.py"))
    assert observation.failure_reason == "ssh-auth"
    assert "permission denied" in observation.failure_detail.lower()


def test_an_unknown_host_key_is_an_unmeasured_ssh_auth(
    server: SshServer, repo: Path, executor_for: Factory, tmp_path: Path
) -> None:
    (tmp_path / "empty_known_hosts").write_text("")
    options = (
        f"UserKnownHostsFile={tmp_path / 'empty_known_hosts'}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=yes",
    )
    executor = executor_for(server, ssh_options=options)
    observation = executor.run(shard(git(repo, "rev-parse", "HEAD"), "tests/test_ok.py"))
    assert observation.failure_reason == "ssh-auth"
    assert "host key" in observation.failure_detail.lower()


def test_a_remote_timeout_kills_the_shard_and_is_unmeasured_timeout(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    before = server.temporaries()
    head = git(repo, "rev-parse", "HEAD")
    started = time.monotonic()
    observation = executor_for(server).run(shard(head, "tests/test_slow.py", timeout_s=2.0))
    assert time.monotonic() - started < 60
    # The shard's own timeout on the host is its outcome (as locally), not a failure of ssh.
    assert observation.failure_kind is None and observation.timed_out is True
    assert observation.exit_code is None and observation.signal is not None
    assert 2.0 <= observation.seconds < 30
    assert server.temporaries() - before == set()


def run_slow_shard_in_background(
    server: SshServer, executor: SshExecutor, head: str
) -> tuple[threading.Thread, list[Observation], Path]:
    """Start the slow shard; return once its pytest is running on the host."""
    before = server.temporaries()
    result: list[Observation] = []
    thread = threading.Thread(
        target=lambda: result.append(executor.run(shard(head, "tests/test_slow.py"))), daemon=True
    )
    thread.start()

    def started() -> bool:  # pytest's command line names its report in the new directory
        return any(processes_mentioning(f"{d}/junit.xml") for d in server.temporaries() - before)

    assert wait_for(started, 60), "the slow shard never started on the host"
    (tmp,) = server.temporaries() - before
    return thread, result, tmp


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_the_server_stopped_mid_shard_is_ssh_dropped_and_the_host_cleans_up(
    tmp_path: Path, repo: Path, executor_for: Factory
) -> None:
    own = start_sshd(tmp_path / "own-sshd")
    try:
        executor = executor_for(own)
        thread, result, tmp = run_slow_shard_in_background(
            own, executor, git(repo, "rev-parse", "HEAD")
        )
        own.stop()  # the listener and every per-connection sshd: the connection is gone
        thread.join(timeout=60)
        assert result, "run() did not return after the connection dropped"
        (observation,) = result
        assert observation.failure_reason == "ssh-dropped"
        assert observation.exit_code is None and observation.report is None
        assert observation.extra["remote_tmp"] == str(tmp)
        # The host noticed the end of its stdin: tests killed, temporary directory removed.
        assert wait_for(lambda: not tmp.exists(), 30)
        assert wait_for(lambda: not processes_mentioning(str(tmp)), 30)
    finally:
        own.stop()


@pytest.mark.slow
def test_a_host_that_went_down_with_its_sessions_is_cleaned_on_close(
    tmp_path: Path, repo: Path, executor_for: Factory
) -> None:
    own = start_sshd(tmp_path / "own-sshd")
    try:
        executor = executor_for(own)
        thread, result, tmp = run_slow_shard_in_background(
            own, executor, git(repo, "rev-parse", "HEAD")
        )
        own.kill(sessions=True)  # nothing on the host survives to clean up
        thread.join(timeout=60)
        assert [o.failure_reason for o in result] == ["ssh-dropped"]
        assert tmp.exists()
        own.start()  # the host is back
        executor.close()
        assert not tmp.exists()
    finally:
        own.stop()


def test_cancel_all_stops_running_shards_and_the_host_cleans_up(
    server: SshServer, repo: Path, executor_for: Factory
) -> None:
    executor = executor_for(server)
    thread, result, tmp = run_slow_shard_in_background(
        server, executor, git(repo, "rev-parse", "HEAD")
    )
    executor.cancel_all()
    thread.join(timeout=60)
    assert [o.failure_reason for o in result] == ["cancelled"]
    assert wait_for(lambda: not tmp.exists(), 30)
    assert executor.run(shard(git(repo, "rev-parse", "HEAD"), "tests/test_ok.py")).failure_reason
