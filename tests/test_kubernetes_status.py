"""Reading API objects: which reason a failed Job gets, and how much memory a node has free."""

from __future__ import annotations

import json
from typing import Any

import pytest

from release_ledger.adapters.executors.kubernetes.status import (
    count_gate_jobs,
    free_mb_per_node,
    job_outcome,
)

pytestmark = pytest.mark.kubernetes

FAILED_JOB = {
    "status": {
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    }
}
MANIFEST = {"v": 1, "exit_code": 1, "signal": None, "report": None, "log_tail": None}


def pod(
    *, reason: str = "", runner: dict[str, Any] | None = None, phase: str = "Running"
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if reason:
        status["reason"] = reason
    if runner is not None:
        status["containerStatuses"] = [{"name": "runner", "state": runner}]
    return {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": status}


def terminated(message: str = "", reason: str = "Completed", code: int = 0) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, "message": message}}


def test_eviction_and_oom_are_named_before_the_jobs_generic_failure() -> None:
    evicted = job_outcome(FAILED_JOB, [pod(reason="Evicted", phase="Failed")])
    oom = job_outcome(FAILED_JOB, [pod(runner=terminated(reason="OOMKilled", code=137))])

    assert (evicted.state, evicted.reason) == ("failed", "Evicted")
    assert (oom.state, oom.reason) == ("failed", "OOMKilled")


def test_a_written_manifest_is_done_even_if_the_deadline_passed_meanwhile() -> None:
    deadline = {
        "status": {
            "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]
        }
    }
    outcome = job_outcome(deadline, [pod(runner=terminated(json.dumps(MANIFEST)))])

    assert outcome.state == "done" and outcome.manifest == MANIFEST


def test_a_kernel_oom_kill_recorded_in_the_manifest_is_oomkilled() -> None:
    manifest = {**MANIFEST, "exit_code": None, "signal": 9, "oom_killed": True}
    outcome = job_outcome({}, [pod(runner=terminated(json.dumps(manifest)))])

    assert (outcome.state, outcome.reason) == ("failed", "OOMKilled")


def test_a_runner_that_died_without_a_manifest_fails_with_the_containers_reason() -> None:
    outcome = job_outcome(
        {}, [pod(runner=terminated("python: not found", reason="Error", code=127))]
    )

    assert (outcome.state, outcome.reason) == ("failed", "Error")
    assert "exited 127 without a result manifest" in outcome.detail


def test_waiting_states_are_reported_as_waiting_not_failed() -> None:
    pulling = pod(runner={"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}})
    unschedulable = pod(phase="Pending")
    unschedulable["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3"}
    ]

    assert job_outcome({}, [pulling]).state == "waiting"
    assert job_outcome({}, [pulling]).reason == "ImagePullBackOff"
    assert (job_outcome({}, [unschedulable]).reason, job_outcome({}, []).state) == (
        "Unschedulable",
        "running",
    )
    assert job_outcome(None, []).reason == "ApiError"


def test_free_memory_subtracts_effective_requests_of_live_pods_on_ready_nodes() -> None:
    nodes = [
        {
            "metadata": {"name": "a", "labels": {}},
            "status": {
                "allocatable": {"memory": "8Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
        {
            "metadata": {"name": "b", "labels": {}},
            "status": {
                "allocatable": {"memory": "8Gi"},
                "conditions": [{"type": "Ready", "status": "False"}],
            },
        },
    ]
    with_init = {
        "spec": {
            "nodeName": "a",
            "initContainers": [{"resources": {"requests": {"memory": "3Gi"}}}],
            "containers": [
                {"resources": {"requests": {"memory": "1Gi"}}},
                {"resources": {"requests": {"memory": "512Mi"}}},
            ],
        },
        "status": {"phase": "Running"},
    }
    finished = {
        "spec": {"nodeName": "a", "containers": [{"resources": {"requests": {"memory": "4Gi"}}}]},
        "status": {"phase": "Succeeded"},
    }

    assert free_mb_per_node(nodes, [with_init, finished]) == {"a": 5120.0}


def test_gate_jobs_count_as_running_once_their_pod_runs() -> None:
    jobs = [
        {"metadata": {"name": "j1"}, "status": {}},
        {"metadata": {"name": "j2"}, "status": {}},
        {
            "metadata": {"name": "j3"},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]},
        },
    ]
    pods = [{"metadata": {"labels": {"release-ledger/job": "j1"}}, "status": {"phase": "Running"}}]

    assert count_gate_jobs(jobs, pods) == (1, 1)
