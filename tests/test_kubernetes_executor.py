"""The Kubernetes pool executor over real HTTP: the official client, the real adapter, and a
loopback API stand-in that runs each Job's containers as local subprocesses."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from defusedxml import ElementTree

from release_ledger.adapters.executors.kubernetes.executor import (
    K8sTimings,
    KubernetesExecutor,
    build_kubernetes_executor,
)
from release_ledger.adapters.executors.kubernetes.jobs import MemberSettings, job_manifest, job_name
from release_ledger.domain.errors import BadInput
from release_ledger.domain.execution import EnvironmentRequest, ShardRun
from tests.gitrepo import git, make_repo
from tests.k8s_standin import StandinMember, standin_pool, write_kubeconfig

pytestmark = pytest.mark.kubernetes

FAST = K8sTimings(
    connect_s=2.0,
    read_s=10.0,
    attempts=3,
    backoff_s=0.1,
    measure_attempts=2,
    watch_window_s=5,
    image_pull_grace_s=1.5,
    unschedulable_grace_s=1.5,
    settle_s=30.0,
)

FILES = {
    "tests/test_pass.py": "def test_one():\n    assert True\n\ndef test_two():\n    pass\n",
    "tests/test_fail.py": "def test_broken():\n    assert 1 == 2\n",
    "tests/test_big.py": (
        "import pytest\n\n"
        "@pytest.mark.parametrize('n', range(3000))\n"
        "def test_many(n):\n    assert n >= 0, 'x' * 200\n"
    ),
    "tests/test_slow.py": "import time\n\ndef test_sleeps():\n    time.sleep(60)\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, FILES)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[tuple[dict[str, StandinMember], Path]]:
    with standin_pool(tmp_path / "pool", ["east", "west"]) as (members, kubeconfig):
        yield members, kubeconfig


@pytest.fixture
def executor(
    pool: tuple[dict[str, StandinMember], Path], repo: Path
) -> Iterator[KubernetesExecutor]:
    _members, kubeconfig = pool
    built = build_kubernetes_executor(
        pool=["east", "west"],
        source=f"file://{repo}",
        repo=repo,
        kubeconfig=str(kubeconfig),
        timings=FAST,
    )
    yield built
    built.close()


def shard(repo: Path, files: tuple[str, ...], member: str = "east", **kw: object) -> ShardRun:
    values: dict[str, object] = {
        "run_id": "run-7f3a9c",
        "shard_id": "s1",
        "attempt": 1,
        "revision": "head",
        "commit": git(repo, "rev-parse", "HEAD"),
        "files": files,
        "member": member,
        "timeout_s": 60.0,
    }
    values.update(kw)
    return ShardRun(**values)  # type: ignore[arg-type]


def test_lease_measures_ready_members_and_free_memory_per_node(
    pool: tuple[dict[str, StandinMember], Path], executor: KubernetesExecutor
) -> None:
    members, _ = pool
    members["east"].add_node("node-2", "8Gi")
    members["east"].add_pod("other-team", "db", node="node-1", memory="6Gi")
    members["east"].add_pod("other-team", "done", node="node-1", memory="6Gi", phase="Succeeded")
    members["west"].set_node_ready("node-1", False)

    leases = {lease.member: lease for lease in executor.measure_pool()}

    assert leases["east"].ready and leases["east"].capacity == 4
    assert leases["east"].free_mb_per_node == {"node-1": 10240.0, "node-2": 8192.0}
    assert not leases["west"].ready and leases["west"].reason == "no ready node"


def test_lease_counts_running_and_pending_gate_jobs(
    pool: tuple[dict[str, StandinMember], Path], repo: Path, executor: KubernetesExecutor
) -> None:
    members, _ = pool
    members["east"].fault = "Unschedulable"  # stays pending
    slow = shard(repo, ("tests/test_slow.py",), member="west", timeout_s=30.0)
    pending = shard(repo, ("tests/test_pass.py",), member="east", timeout_s=30.0)
    threads = [threading.Thread(target=executor.run, args=(s,)) for s in (slow, pending)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 15
        leases = {}
        while time.monotonic() < deadline:
            leases = {lease.member: lease for lease in executor.measure_pool()}
            if leases["west"].running == 1 and leases["east"].pending == 1:
                break
            time.sleep(0.2)
        assert (leases["west"].running, leases["west"].pending) == (1, 0)
        assert (leases["east"].running, leases["east"].pending) == (0, 1)
        # The running gate pod's reservation is taken from its node's free memory.
        assert leases["west"].free_mb_per_node["node-1"] < 16384.0 - 4096.0
    finally:
        executor.cancel_all()
        for thread in threads:
            thread.join(timeout=30)


def test_unreachable_and_failing_members_are_named_with_reasons_within_seconds(
    pool: tuple[dict[str, StandinMember], Path], executor: KubernetesExecutor
) -> None:
    members, _ = pool
    members["east"].stop()
    members["west"].http_500 = -1

    started = time.monotonic()
    leases = {lease.member: lease for lease in executor.measure_pool()}

    assert time.monotonic() - started < 10
    assert not leases["east"].ready and leases["east"].reason == "connection refused"
    assert not leases["west"].ready and leases["west"].reason.startswith("HTTP 500")


def test_passing_shard_returns_exit_code_and_the_exact_report_bytes(
    pool: tuple[dict[str, StandinMember], Path], repo: Path, executor: KubernetesExecutor
) -> None:
    members, _ = pool
    observation = executor.run(shard(repo, ("tests/test_pass.py",)))

    assert observation.failure_reason is None, observation.failure_detail
    assert observation.exit_code == 0 and observation.signal is None
    assert observation.member == "east"
    root = ElementTree.fromstring(observation.report)
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("failures") == "0"
    assert b"2 passed" in observation.log_tail
    assert members["east"].live_jobs() == []  # deleted once the results were in


def test_failing_shard_returns_exit_code_one_and_its_failures(
    repo: Path, executor: KubernetesExecutor
) -> None:
    observation = executor.run(shard(repo, ("tests/test_fail.py", "tests/test_pass.py")))

    assert observation.failure_reason is None
    assert observation.exit_code == 1
    assert observation.report is not None and b"test_broken" in observation.report
    assert b"1 failed, 2 passed" in observation.log_tail


def test_large_report_arrives_whole_and_sha256_checked(
    pool: tuple[dict[str, StandinMember], Path], repo: Path, executor: KubernetesExecutor
) -> None:
    members, _ = pool
    observation = executor.run(shard(repo, ("tests/test_big.py",)))

    assert observation.exit_code == 0
    assert observation.report is not None and len(observation.report) > 300_000
    assert observation.report.count(b"<testcase") == 3000
    # The same bytes the pod wrote: the stand-in kept the pod's volume until deletion.
    pod_files = list((members["east"].root).glob("pod-*/volumes/work/out/report.xml"))
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in pod_files}
    assert hashlib.sha256(observation.report).hexdigest() in digests


@pytest.mark.parametrize(
    ("fault", "reason", "kind"),
    [
        ("OOMKilled", "OOMKilled", "oom"),
        ("Evicted", "Evicted", "infrastructure"),
        ("DeadlineExceeded", "DeadlineExceeded", "timeout"),
        ("ImagePullBackOff", {"ImagePullBackOff", "ErrImagePull"}, "infrastructure"),
        ("Unschedulable", "Unschedulable", "infrastructure"),
    ],
)
def test_every_pod_fault_becomes_its_failure_reason_and_kind(
    pool: tuple[dict[str, StandinMember], Path],
    repo: Path,
    executor: KubernetesExecutor,
    fault: str,
    reason: str | set[str],
    kind: str,
) -> None:
    members, _ = pool
    members["west"].fault = fault

    observation = executor.run(shard(repo, ("tests/test_pass.py",), member="west"))

    expected = reason if isinstance(reason, set) else {reason}
    assert observation.failure_reason in expected, observation
    assert observation.failure_kind == kind
    assert observation.member == "west" and observation.failure_detail
    assert observation.report is None and observation.exit_code is None
    assert members["west"].live_jobs() == []
    assert members["west"].live_processes() == 0


def test_real_active_deadline_stops_a_slow_shard(repo: Path, executor: KubernetesExecutor) -> None:
    observation = executor.run(shard(repo, ("tests/test_slow.py",), timeout_s=3.0))

    assert observation.failure_reason == "DeadlineExceeded"
    assert observation.timed_out
    assert observation.seconds < 30


def test_checkout_of_a_missing_commit_fails_the_job_with_the_git_error(
    repo: Path, executor: KubernetesExecutor
) -> None:
    missing = "0123456789abcdef0123456789abcdef01234567"
    observation = executor.run(shard(repo, ("tests/test_pass.py",), commit=missing))

    assert observation.failure_reason == "BackoffLimitExceeded"
    assert "init container source exited" in observation.failure_detail


def test_api_errors_after_bounded_retries_are_api_error(
    pool: tuple[dict[str, StandinMember], Path], repo: Path, executor: KubernetesExecutor
) -> None:
    members, _ = pool
    members["west"].http_500 = -1
    started = time.monotonic()
    failing = executor.run(shard(repo, ("tests/test_pass.py",), member="west"))
    assert failing.failure_reason == "ApiError"
    assert failing.failure_detail.startswith("HTTP 500")
    assert time.monotonic() - started < 15

    members["east"].stop()
    started = time.monotonic()
    refused = executor.run(shard(repo, ("tests/test_pass.py",), member="east"))
    assert (refused.failure_reason, refused.failure_detail) == ("ApiError", "connection refused")
    assert time.monotonic() - started < 15


def test_transient_500s_are_retried_and_the_shard_still_runs(
    pool: tuple[dict[str, StandinMember], Path], repo: Path, executor: KubernetesExecutor
) -> None:
    members, _ = pool
    members["east"].http_500 = 2

    observation = executor.run(shard(repo, ("tests/test_pass.py",)))

    assert observation.failure_reason is None and observation.exit_code == 0


def test_watches_that_drop_mid_stream_are_resumed(
    pool: tuple[dict[str, StandinMember], Path], repo: Path, executor: KubernetesExecutor
) -> None:
    members, _ = pool
    members["east"].drop_watches = 1  # the first watch closes mid-line

    observation = executor.run(shard(repo, ("tests/test_pass.py",)))

    assert observation.failure_reason is None and observation.exit_code == 0
    # How many watches a shard needs depends on how fast the pod runs; at least one dropped
    # and the adapter went on to read the result.
    assert members["east"].drop_watches == 0
    assert members["east"].watches >= 1


def test_cancel_all_deletes_every_job_and_returns_promptly(
    pool: tuple[dict[str, StandinMember], Path], repo: Path, executor: KubernetesExecutor
) -> None:
    members, _ = pool
    results: list[object] = []
    runs = [
        shard(repo, ("tests/test_slow.py",), member=m, shard_id=f"s-{m}", timeout_s=120.0)
        for m in ("east", "west")
    ]
    threads = [threading.Thread(target=lambda s=s: results.append(executor.run(s))) for s in runs]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not all(m.live_processes() for m in members.values()):
        time.sleep(0.1)

    executor.cancel_all()
    for thread in threads:
        thread.join(timeout=20)

    assert not any(thread.is_alive() for thread in threads)
    assert {getattr(r, "failure_reason", None) for r in results} == {"cancelled"}
    assert members["east"].live_jobs() == [] and members["west"].live_jobs() == []


def test_job_manifest_pins_the_commit_and_reserves_memory() -> None:
    run = ShardRun(
        run_id="01JABCDEFGHJKMNPQRSTVWXYZ0123456789",
        shard_id="shard-with-a-rather-long-name-that-goes-on-and-on",
        attempt=12,
        revision="base",
        commit="a" * 40,
        files=("tests/test_x.py",),
        timeout_s=1200.5,
    )
    name = job_name(run, "abc123")
    manifest = job_manifest(
        run,
        name=name,
        source="https://example.invalid/repo.git",
        settings=MemberSettings(namespace="ci", node_selector={"pool": "tests"}),
        git_image="alpine/git",
        reservation_mb=6144,
    )

    assert len(name) <= 63 and name.endswith("-a12-base-abc123")
    assert all(c.isalnum() or c == "-" for c in name) and name == name.lower()
    spec = manifest["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 1201
    assert spec["ttlSecondsAfterFinished"] > 0
    labels = spec["template"]["metadata"]["labels"]
    assert labels["release-ledger/gate"] == "true"
    assert labels["release-ledger/attempt"] == "12" and labels["release-ledger/revision"] == "base"
    assert all(len(v) <= 63 for v in labels.values())
    pod = spec["template"]["spec"]
    clone = pod["initContainers"][0]["command"]
    assert "a" * 40 in clone and "--detach" in clone[2]
    runner = pod["containers"][0]
    assert runner["resources"]["requests"]["memory"] == "6144Mi"
    assert runner["resources"]["limits"]["memory"] == "6144Mi"
    assert pod["nodeSelector"] == {"pool": "tests"}
    assert pod["automountServiceAccountToken"] is False  # no API credentials for the suite


def test_the_pods_runner_is_told_which_variables_the_suite_may_see() -> None:
    run = ShardRun(run_id="r", shard_id="s", attempt=1, revision="head", commit="b" * 40,
                   files=("tests/test_x.py",), timeout_s=60.0)  # fmt: skip
    manifest = job_manifest(
        run, name="n", source="file:///x", settings=MemberSettings(), git_image="alpine/git",
        reservation_mb=512, environment=EnvironmentRequest(pass_env=("CI_*",)),
    )  # fmt: skip
    runner = manifest["spec"]["template"]["spec"]["containers"][0]
    spec = json.loads(runner["command"][3])
    assert spec["pass_env"] == ["CI_*"]


def test_unknown_context_missing_source_and_bad_pool_config_are_bad_input(
    tmp_path: Path, repo: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kc", {"east": "http://127.0.0.1:9"})
    with pytest.raises(BadInput, match="unknown kubeconfig context 'nowhere'"):
        build_kubernetes_executor(
            pool=["east", "nowhere"], source="file:///x", repo=repo, kubeconfig=str(kubeconfig)
        )
    with pytest.raises(BadInput, match="no source URL"):
        build_kubernetes_executor(pool=["east"], source=None, repo=repo, kubeconfig=str(kubeconfig))
    git(repo, "remote", "add", "origin", "https://example.invalid/repo.git")
    built = build_kubernetes_executor(
        pool=["east"], source=None, repo=repo, kubeconfig=str(kubeconfig)
    )
    assert built.source == "https://example.invalid/repo.git"
    built.close()

    bad_configs = {
        "not toml [": "not valid TOML",
        '[members.east]\ncapacity = "lots"\n': "members.east.capacity",
        "[members.east]\ncolour = 'blue'\n": "unknown key 'colour'",
        "[members.west]\ncapacity = 2\n": "member 'west', which is not in the pool",
        "[members.east]\nnode_selector = 'x'\n": "node_selector",
    }
    for text, message in bad_configs.items():
        config = tmp_path / "pool.toml"
        config.write_text(text)
        with pytest.raises(BadInput, match=message):
            build_kubernetes_executor(
                pool=["east"],
                source="file:///x",
                repo=repo,
                kubeconfig=str(kubeconfig),
                pool_config=config,
            )


def test_kubeconfig_env_and_pool_config_settings_apply(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kc", {"east": "http://127.0.0.1:9"})
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    config = tmp_path / "pool.toml"
    config.write_text(
        '[members.east]\nnamespace = "ci"\ncapacity = 7\nimage = "python:3.12"\n'
        'node_selector = { pool = "tests" }\nservice_account = "runner"\n'
    )
    built = build_kubernetes_executor(
        pool=["east"], source="file:///x", repo=repo, pool_config=config
    )
    try:
        lease = built.measure_pool()[0]
        assert lease.capacity == 7 and not lease.ready
        assert lease.reason == "connection refused"
    finally:
        built.close()


def test_a_member_that_never_answers_is_unready_after_its_read_timeout(
    pool: tuple[dict[str, StandinMember], Path], repo: Path, tmp_path: Path
) -> None:
    members, kubeconfig = pool
    members["west"].hang = True
    timings = dataclasses.replace(FAST, measure_read_s=1.0, read_s=1.0, attempts=2)
    built = build_kubernetes_executor(
        pool=["east", "west"], source="file:///x", repo=repo, kubeconfig=str(kubeconfig),
        timings=timings,
    )  # fmt: skip
    try:
        started = time.monotonic()
        leases = {lease.member: lease for lease in built.measure_pool()}
        assert time.monotonic() - started < 8
        assert leases["east"].ready
        assert not leases["west"].ready and leases["west"].reason == "read timed out"

        started = time.monotonic()
        observation = built.run(shard(repo, ("tests/test_pass.py",), member="west"))
        assert (observation.failure_reason, observation.failure_detail) == (
            "ApiError",
            "read timed out",
        )
        assert time.monotonic() - started < 15
    finally:
        built.close()


def test_pool_config_namespace_and_node_selector_are_used(
    pool: tuple[dict[str, StandinMember], Path], repo: Path, tmp_path: Path
) -> None:
    members, kubeconfig = pool
    members["east"].add_node("node-2", "32Gi", labels={"pool": "tests"})
    config = tmp_path / "pool.toml"
    config.write_text('[members.east]\nnamespace = "ci"\nnode_selector = { pool = "tests" }\n')
    built = build_kubernetes_executor(
        pool=["east", "west"], source=f"file://{repo}", repo=repo, kubeconfig=str(kubeconfig),
        pool_config=config, timings=FAST,
    )  # fmt: skip
    try:
        leases = {lease.member: lease for lease in built.measure_pool()}
        assert leases["east"].free_mb_per_node == {"node-2": 32768.0}
        assert leases["west"].free_mb_per_node == {"node-1": 16384.0}

        observation = built.run(shard(repo, ("tests/test_pass.py",)))
        assert observation.exit_code == 0
        posts = [path for method, path in members["east"].requests if method == "POST"]
        assert posts and all(p.startswith("/apis/batch/v1/namespaces/ci/jobs") for p in posts)
    finally:
        built.close()
