"""Reading Kubernetes objects (plain JSON dicts) into what the gate needs to know.

Kept free of I/O so every rule — which reason a failed pod gets, how much memory a node has
free — is one function over API objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from kubernetes.utils import parse_quantity

from release_ledger.adapters.executors.kubernetes.jobs import (
    LABEL_PREFIX,
    RUNNER_CONTAINER,
    parse_manifest,
)

IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
MIB = Decimal(1024 * 1024)

State = Literal["running", "waiting", "done", "failed"]


@dataclass(frozen=True)
class PodOutcome:
    """Where one Job stands: still running, waiting on something that may never come
    (an image, a node), done with a manifest, or failed with a reason read from the API."""

    state: State
    reason: str = ""
    detail: str = ""
    manifest: dict[str, Any] | None = None
    pod: str = ""
    node: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _statuses(pod: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return list(_get(pod, "status", key) or [])


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in _get(obj, "status", "conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def _short(text: Any, limit: int = 400) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _init_failure(pod: Mapping[str, Any]) -> str:
    for status in _statuses(pod, "initContainerStatuses"):
        terminated = _get(status, "state", "terminated")
        if terminated and terminated.get("exitCode", 0) != 0:
            message = _short(terminated.get("message"))
            return f"init container {status.get('name')} exited {terminated.get('exitCode')}" + (
                f": {message}" if message else ""
            )
    return ""


def job_outcome(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> PodOutcome:
    """Classify a Job and its pods; reasons are the API's own words (OOMKilled, Evicted, ...)."""
    if job is None:
        return PodOutcome("failed", "ApiError", "the Job disappeared before its results were read")
    waiting: PodOutcome | None = None
    for pod in pods:
        name = str(_get(pod, "metadata", "name") or "")
        node = str(_get(pod, "spec", "nodeName") or "")
        where = {"pod": name, "node": node}
        if _get(pod, "status", "reason") == "Evicted":
            detail = _short(_get(pod, "status", "message")) or "the pod was evicted"
            return PodOutcome("failed", "Evicted", detail, pod=name, node=node, extra=where)
        for status in _statuses(pod, "containerStatuses"):
            if status.get("name") != RUNNER_CONTAINER:
                continue
            terminated = _get(status, "state", "terminated")
            if not terminated:
                continue
            if terminated.get("reason") == "OOMKilled":
                detail = f"runner exceeded its memory limit (exit {terminated.get('exitCode')})"
                return PodOutcome("failed", "OOMKilled", detail, pod=name, node=node, extra=where)
            manifest = parse_manifest(terminated.get("message"))
            if manifest is not None and manifest.get("oom_killed"):
                detail = (
                    f"the kernel OOM-killed the shard command (signal {manifest.get('signal')})"
                )
                return PodOutcome("failed", "OOMKilled", detail, pod=name, node=node, extra=where)
            if manifest is not None:
                return PodOutcome("done", manifest=manifest, pod=name, node=node, extra=where)
            reason = str(terminated.get("reason") or "Error")
            detail = (
                f"runner exited {terminated.get('exitCode')} without a result manifest: "
                f"{_short(terminated.get('message'))}"
            )
            return PodOutcome("failed", reason, detail, pod=name, node=node, extra=where)
        for status in _statuses(pod, "initContainerStatuses") + _statuses(pod, "containerStatuses"):
            reason = _get(status, "state", "waiting", "reason")
            if reason in IMAGE_REASONS:
                detail = _short(_get(status, "state", "waiting", "message")) or str(reason)
                waiting = PodOutcome("waiting", str(reason), detail, pod=name, node=node)
        scheduled = _condition(pod, "PodScheduled")
        if (
            scheduled
            and scheduled.get("status") == "False"
            and (scheduled.get("reason") == "Unschedulable")
        ):
            detail = _short(scheduled.get("message")) or "no node can take the pod"
            waiting = PodOutcome("waiting", "Unschedulable", detail, pod=name, node=node)
    failed = _condition(job, "Failed")
    if failed and failed.get("status") == "True":
        reason = str(failed.get("reason") or "JobFailed")
        details = [_short(failed.get("message"))] + [_init_failure(pod) for pod in pods]
        pod = pods[0] if pods else {}
        return PodOutcome(
            "failed",
            reason,
            "; ".join(d for d in details if d),
            pod=str(_get(pod, "metadata", "name") or ""),
            node=str(_get(pod, "spec", "nodeName") or ""),
        )
    for pod in pods:
        if _get(pod, "status", "phase") == "Failed":
            reason = str(_get(pod, "status", "reason") or "PodFailed")
            detail = _init_failure(pod) or _short(_get(pod, "status", "message"))
            return PodOutcome("failed", reason, detail, pod=str(_get(pod, "metadata", "name")))
    return waiting or PodOutcome("running")


def node_ready(node: Mapping[str, Any]) -> bool:
    """Ready condition True and not cordoned."""
    ready = _condition(node, "Ready")
    return bool(ready and ready.get("status") == "True") and not _get(node, "spec", "unschedulable")


def _bytes(quantity: Any) -> Decimal:
    if quantity is None:
        return Decimal(0)
    try:
        return Decimal(parse_quantity(quantity))  # type: ignore[no-untyped-call]
    except ValueError:
        return Decimal(0)


def pod_memory_request(pod: Mapping[str, Any]) -> Decimal:
    """A pod's effective memory request: max(largest init container, sum of containers)."""
    spec = pod.get("spec") or {}

    def request(container: Mapping[str, Any]) -> Decimal:
        return _bytes(_get(container, "resources", "requests", "memory"))

    main = sum((request(c) for c in spec.get("containers") or []), Decimal(0))
    init = max((request(c) for c in spec.get("initContainers") or []), default=Decimal(0))
    overhead = _bytes(_get(spec, "overhead", "memory"))
    return max(main, init) + overhead


def selected(node: Mapping[str, Any], node_selector: Mapping[str, str]) -> bool:
    labels = _get(node, "metadata", "labels") or {}
    return all(labels.get(key) == value for key, value in node_selector.items())


def free_mb_per_node(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """Allocatable memory minus the requests of non-terminal pods, per ready selected node."""
    free: dict[str, Decimal] = {}
    for node in nodes:
        if node_ready(node) and selected(node, node_selector or {}):
            name = str(_get(node, "metadata", "name"))
            free[name] = _bytes(_get(node, "status", "allocatable", "memory"))
    for pod in pods:
        node_name = _get(pod, "spec", "nodeName")
        if node_name in free and _get(pod, "status", "phase") not in TERMINAL_PHASES:
            free[node_name] -= pod_memory_request(pod)
    return {name: float(max(Decimal(0), value) / MIB) for name, value in sorted(free.items())}


def job_finished(job: Mapping[str, Any]) -> bool:
    for kind in ("Complete", "Failed"):
        condition = _condition(job, kind)
        if condition and condition.get("status") == "True":
            return True
    return False


def count_gate_jobs(
    jobs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> tuple[int, int]:
    """(running, pending) unfinished gate Jobs: running once one of its pods runs."""
    running_jobs = {
        _get(pod, "metadata", "labels", f"{LABEL_PREFIX}job")
        for pod in pods
        if _get(pod, "status", "phase") == "Running"
    }
    running = pending = 0
    for job in jobs:
        if job_finished(job):
            continue
        if _get(job, "metadata", "name") in running_jobs:
            running += 1
        else:
            pending += 1
    return running, pending


def job_failed_condition(job: Mapping[str, Any]) -> bool:
    """Whether the Job controller itself has concluded the Job failed."""
    failed = _condition(job, "Failed")
    return bool(failed and failed.get("status") == "True")
