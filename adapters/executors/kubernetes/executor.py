"""Runs shards as Kubernetes Jobs on a pool of clusters (kubeconfig contexts).

One ApiClient per member. Every call has a connect and read timeout and bounded retries with
backoff; every watch and wait has a deadline, so an unreachable member answers in seconds and
a lost pod turns into a failure reason instead of a hang. Results come back through the pod
proxy and are checked against the sha256s in the runner's termination message.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from release_ledger.adapters.executors.kubernetes.jobs import (
    GATE_LABEL,
    LABEL_PREFIX,
    RESULTS_PORT,
    MemberSettings,
    expected_files,
    job_manifest,
    job_name,
)
from release_ledger.adapters.executors.kubernetes.pool_config import load_pool_config
from release_ledger.adapters.executors.kubernetes.runner import DEFAULT_IMAGE
from release_ledger.adapters.executors.kubernetes.status import (
    IMAGE_REASONS,
    PodOutcome,
    count_gate_jobs,
    free_mb_per_node,
    job_failed_condition,
    job_outcome,
)
from release_ledger.adapters.executors.local import named_items, report_of, setup_failed
from release_ledger.adapters.git import SAFE_GIT, git_env
from release_ledger.domain.errors import BadInput
from release_ledger.domain.events import MemberLease
from release_ledger.domain.execution import EnvironmentRequest, Observation, ShardRun
from release_ledger.domain.failures import FailureKind
from release_ledger.domain.invocation import TestInvocation
from release_ledger.domain.memory import pod_request_mb

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# The API's words for a pod that ran out of its own memory or time: the shard's outcome,
# bisected like a local `oom` or `timeout`; every other word is the machinery's failure.
OWN_OUTCOMES: dict[str, FailureKind] = {"OOMKilled": "oom", "DeadlineExceeded": "timeout"}
DEFAULT_RSS_MB = 4096.0


@dataclass(frozen=True)
class K8sTimings:
    """Every bound the adapter waits by. Defaults suit real clusters; tests shrink them."""

    connect_s: float = 5.0  # connect timeout of every request (<= 10 s)
    read_s: float = 30.0  # read timeout of every non-watch request
    attempts: int = 4  # tries per API call on 5xx / 429 / connection failures
    backoff_s: float = 0.5  # first pause between tries, doubled each time
    measure_attempts: int = 2  # tries per call while measuring the pool
    measure_read_s: float = 15.0
    watch_window_s: int = 10  # longest single watch before re-reading
    image_pull_grace_s: float = 120.0  # ErrImagePull / ImagePullBackOff for this long fails
    unschedulable_grace_s: float = 120.0  # Unschedulable for this long fails
    settle_s: float = 180.0  # beyond the shard timeout before the adapter stops waiting
    job_settle_s: float = 10.0  # a failed pod waits this long for the Job's own failure reason
    ttl_s: int = 600  # ttlSecondsAfterFinished
    linger_s: int = 300  # results server stays up this long after the runner finished


class ApiFailure(Exception):
    """The API did not answer usefully after bounded retries; the message is one line."""


class Cancelled(Exception):
    """`cancel_all` was called while a shard was waiting."""


def describe_error(error: BaseException) -> str:
    """`HTTP 500: message`, `connection refused`, `connection timed out`, ...: one line."""
    if isinstance(error, ApiException):
        if not error.status:
            return " ".join(str(error.reason or "API error").split())[:200]
        message = ""
        try:
            message = str(json.loads(error.body or b"{}").get("message", ""))
        except (ValueError, AttributeError):
            message = ""
        return f"HTTP {error.status}" + (f": {message[:200]}" if message else "")
    cause: BaseException = error
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        cause = error.reason
    text = str(cause).lower()
    if "refused" in text:
        return "connection refused"
    if isinstance(cause, urllib3.exceptions.ConnectTimeoutError):
        return "connection timed out"
    if isinstance(cause, urllib3.exceptions.ReadTimeoutError | TimeoutError):
        return "read timed out"
    if isinstance(cause, urllib3.exceptions.ProtocolError):
        return "connection dropped"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "host not found"
    return f"{type(cause).__name__}: {' '.join(str(cause).split())[:200]}"


def _retryable(error: BaseException) -> bool:
    if isinstance(error, ApiException):
        return error.status in RETRYABLE_STATUS or not error.status
    return isinstance(error, urllib3.exceptions.HTTPError | OSError)


@dataclass
class MemberApi:
    """One pool member: its context name, settings and API handles."""

    name: str
    settings: MemberSettings
    api_client: k8s.ApiClient

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api_client)

    @property
    def batch(self) -> k8s.BatchV1Api:
        return k8s.BatchV1Api(self.api_client)


def _lines(response: Any) -> Iterator[bytes]:
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line


class KubernetesExecutor:
    """A `PoolExecutor`: one Job per shard attempt and revision, on the member placement chose."""

    name = "kubernetes"

    def __init__(
        self,
        members: Sequence[MemberApi],
        *,
        source: str,
        git_image: str = "alpine/git",
        timings: K8sTimings | None = None,
        environment_request: EnvironmentRequest | None = None,
    ) -> None:
        self.environment_request = environment_request or EnvironmentRequest()
        self._members = {member.name: member for member in members}
        self._order = [member.name for member in members]
        self.source = source
        self.git_image = git_image
        self.timings = timings or K8sTimings()
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str, str], None] = {}  # (member, namespace, name)
        self._cancelled = threading.Event()
        self._invocations: dict[str, TestInvocation | None] = {}  # by commit, as collected

    # --- the port ------------------------------------------------------------------------

    def members(self) -> list[str]:
        return list(self._order)

    def prepare(self, commits: list[str]) -> None:
        """Nothing to stage: each pod clones the source itself at the exact commit."""

    def measure_pool(self) -> list[MemberLease]:
        """Measure every member at once; an unreachable one is `ready=False` with its reason."""
        with ThreadPoolExecutor(max_workers=max(1, len(self._order))) as pool:
            return list(pool.map(self._measure, [self._members[n] for n in self._order]))

    def run(self, shard: ShardRun) -> Observation:
        return self._attempt(shard)[0]

    def collect(
        self, commit: str, timeout_s: float = 300.0, memory_limit_mb: int | None = None
    ) -> tuple[list[str] | None, str]:
        """The items the commit's declared invocation collects in a pod of the first ready
        member: a Job whose runner prepares the revision's environment as for a shard and runs
        the local executor's collect-only run (`invocation_run`) from the invocation's working
        directory; or None and why not (the file walk then finds the files)."""
        leases = self.measure_pool()
        ready = [lease.member for lease in leases if lease.ready]
        if not ready:
            reasons = "; ".join(f"{lease.member}: {lease.reason}" for lease in leases)
            return None, f"no pool member is ready to collect ({reasons})"
        shard = ShardRun(
            run_id="collect", shard_id="collect", attempt=1, revision="head", commit=commit,
            files=(), command=(), timeout_s=timeout_s, memory_limit_mb=memory_limit_mb,
            member=ready[0],
        )  # fmt: skip
        observation, manifest, files = self._attempt(shard, collect=True)
        if observation.environment is not None:
            with self._lock:
                self._invocations[commit] = observation.environment.invocation
        if observation.failure_reason is not None:
            why = observation.failure_detail or observation.failure_reason
            return None, f"collection on {ready[0]}: {why}"
        if manifest.get("collect_error"):
            return None, str(manifest["collect_error"])
        if "items.json" not in files:
            return None, f"collection on {ready[0]} sent no items"
        return named_items(json.loads(files["items.json"])), ""

    def invocation_for(self, commit: str) -> TestInvocation | None:
        """The invocation a pod resolved for `commit` when it collected (None before)."""
        with self._lock:
            return self._invocations.get(commit)

    def _attempt(
        self, shard: ShardRun, collect: bool = False
    ) -> tuple[Observation, dict[str, Any], dict[str, bytes]]:
        """One Job: the observation, and the manifest and files it sent back (empty where
        it failed)."""
        if shard.member is None or shard.member not in self._members:
            raise ValueError(f"shard {shard.shard_id} has no pool member (got {shard.member!r})")
        member = self._members[shard.member]
        namespace = member.settings.namespace
        name = job_name(shard, secrets.token_hex(3))
        started = time.monotonic()
        key = (member.name, namespace, name)
        try:
            if self._cancelled.is_set():
                raise Cancelled
            rss = float(shard.memory_limit_mb) if shard.memory_limit_mb else DEFAULT_RSS_MB
            manifest = job_manifest(
                shard,
                name=name,
                source=self.source,
                settings=member.settings,
                git_image=self.git_image,
                reservation_mb=pod_request_mb(rss),
                ttl_seconds=self.timings.ttl_s,
                linger_seconds=self.timings.linger_s,
                environment=self.environment_request,
                collect=collect,
            )
            with self._lock:
                self._jobs[key] = None
            self._create_job(member, manifest)
            outcome = self._await(member, name, shard, started)
            if outcome.state == "done":
                return self._results(member, outcome, name, started)
            failed = self._failure(member, outcome.reason, outcome.detail, name, outcome, started)
        except ApiFailure as error:
            failed = self._failure(member, "ApiError", str(error), name, None, started)
        except Cancelled:
            why = "the run was cancelled"
            failed = self._failure(member, "cancelled", why, name, None, started)
        finally:
            self._delete_job(member, namespace, name)
            with self._lock:
                self._jobs.pop(key, None)
        return failed, {}, {}

    def cancel_all(self) -> None:
        """Stop waiting and delete every Job this executor created that still exists."""
        self._cancelled.set()
        self._delete_all()

    def close(self) -> None:
        self._delete_all()
        for member in self._members.values():
            member.api_client.close()  # type: ignore[no-untyped-call]

    # --- API calls with bounded retries ---------------------------------------------------

    def _call(
        self,
        request: Callable[[tuple[float, float]], Any],
        *,
        attempts: int | None = None,
        read_s: float | None = None,
        ok_status: frozenset[int] = frozenset(),
    ) -> bytes | None:
        """The response body of `request(timeout)`; None for a status in `ok_status`."""
        tries = attempts or self.timings.attempts
        timeout = (self.timings.connect_s, read_s or self.timings.read_s)
        for attempt in range(tries):
            try:
                response = request(timeout)
                try:
                    return bytes(response.read())
                finally:
                    response.release_conn()
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
                if isinstance(error, ApiException) and error.status in ok_status:
                    return None
                if attempt + 1 >= tries or not _retryable(error):
                    raise ApiFailure(describe_error(error)) from None
            pause = self.timings.backoff_s * (2**attempt)
            if self._cancelled.wait(pause):
                raise Cancelled
        raise AssertionError("unreachable")

    def _json(self, request: Callable[[tuple[float, float]], Any], **kwargs: Any) -> Any:
        body = self._call(request, **kwargs)
        if body is None:
            return None
        try:
            return json.loads(body)
        except ValueError:
            raise ApiFailure("the API answered something that is not JSON") from None

    def _items(
        self, request: Callable[[tuple[float, float]], Any], **kwargs: Any
    ) -> tuple[list[Any], str | None]:
        document = self._json(request, **kwargs) or {}
        return document.get("items") or [], (document.get("metadata") or {}).get("resourceVersion")

    # --- measuring ------------------------------------------------------------------------

    def _measure(self, member: MemberApi) -> MemberLease:
        settings = member.settings
        core, batch = member.core, member.batch
        options: dict[str, Any] = {
            "attempts": self.timings.measure_attempts,
            "read_s": self.timings.measure_read_s,
        }
        try:
            nodes, _ = self._items(
                lambda t: core.list_node(_preload_content=False, _request_timeout=t), **options
            )
            pods, _ = self._items(
                lambda t: core.list_pod_for_all_namespaces(
                    field_selector="status.phase!=Succeeded,status.phase!=Failed",
                    _preload_content=False,
                    _request_timeout=t,
                ),
                **options,
            )
            jobs, _ = self._items(
                lambda t: batch.list_namespaced_job(
                    settings.namespace,
                    label_selector=f"{GATE_LABEL}=true",
                    _preload_content=False,
                    _request_timeout=t,
                ),
                **options,
            )
        except ApiFailure as error:
            return MemberLease(
                member=member.name, ready=False, capacity=settings.capacity, reason=str(error)
            )
        except Cancelled:
            return MemberLease(
                member=member.name, ready=False, capacity=settings.capacity, reason="cancelled"
            )
        free = free_mb_per_node(nodes, pods, settings.node_selector)
        gate_pods = [
            pod
            for pod in pods
            if (pod.get("metadata") or {}).get("namespace") == settings.namespace
            and ((pod.get("metadata") or {}).get("labels") or {}).get(GATE_LABEL) == "true"
        ]
        running, pending = count_gate_jobs(jobs, gate_pods)
        reason = ""
        if not free:
            reason = "no ready node" + (" matching node_selector" if settings.node_selector else "")
        return MemberLease(
            member=member.name,
            ready=bool(free),
            capacity=settings.capacity,
            running=running,
            pending=pending,
            free_mb_per_node=free,
            reason=reason,
        )

    # --- one Job --------------------------------------------------------------------------

    def _create_job(self, member: MemberApi, manifest: dict[str, Any]) -> None:
        body = k8s.V1Job.model_validate(manifest)
        batch = member.batch
        self._call(
            lambda t: batch.create_namespaced_job(
                member.settings.namespace, body, _preload_content=False, _request_timeout=t
            ),
            ok_status=frozenset({409}),  # a retried create whose first try got through
        )

    def _read(self, member: MemberApi, name: str) -> tuple[Any, list[Any], str | None]:
        namespace = member.settings.namespace
        core, batch = member.core, member.batch
        job = self._json(
            lambda t: batch.read_namespaced_job(
                name, namespace, _preload_content=False, _request_timeout=t
            ),
            ok_status=frozenset({404}),
        )
        pods, version = self._items(
            lambda t: core.list_namespaced_pod(
                namespace,
                label_selector=f"{LABEL_PREFIX}job={name}",
                _preload_content=False,
                _request_timeout=t,
            )
        )
        return job, pods, version

    def _await(self, member: MemberApi, name: str, shard: ShardRun, started: float) -> PodOutcome:
        """Read, classify, then watch for the next change; re-read after every event or drop."""
        timings = self.timings
        deadline = started + shard.timeout_s + timings.settle_s
        waiting_since: dict[str, float] = {}
        pod_failed_since: float | None = None
        while True:
            if self._cancelled.is_set():
                raise Cancelled
            now = time.monotonic()
            if now >= deadline:
                return PodOutcome(
                    "failed",
                    "ResultTimeout",
                    f"no result from the API within {deadline - started:.0f}s",
                )
            job, pods, version = self._read(member, name)
            outcome = job_outcome(job, pods)
            if outcome.state == "failed" and not job_failed_condition(job):
                # The pod failed before the Job controller said why (BackoffLimitExceeded,
                # DeadlineExceeded, ...): give it a moment to, then take the pod's reason.
                since = pod_failed_since = pod_failed_since or now
                if now - since < timings.job_settle_s:
                    self._watch_once(member, name, version, min(1.0, deadline - now))
                    continue
            if outcome.state in ("done", "failed"):
                return outcome
            window = float(timings.watch_window_s)
            if outcome.state == "waiting":
                image = outcome.reason in IMAGE_REASONS
                key = "image" if image else outcome.reason
                grace = timings.image_pull_grace_s if image else timings.unschedulable_grace_s
                since = waiting_since.setdefault(key, now)
                waiting_since = {key: since}
                if now - since >= grace:
                    return PodOutcome(
                        "failed",
                        outcome.reason,
                        f"{outcome.detail} (still after {grace:g}s)",
                        pod=outcome.pod,
                        node=outcome.node,
                    )
                window = min(window, since + grace - now)
            else:
                waiting_since = {}
            self._watch_once(member, name, version, min(window, deadline - now))

    def _watch_once(self, member: MemberApi, name: str, version: str | None, window: float) -> None:
        """Block until the Job's pods change, the window ends, or the stream drops."""
        seconds = max(1, int(window + 0.999))
        core = member.core
        response: Any = None
        try:
            response = core.list_namespaced_pod(
                member.settings.namespace,
                label_selector=f"{LABEL_PREFIX}job={name}",
                watch=True,
                resource_version=version,
                timeout_seconds=seconds,
                _preload_content=False,
                _request_timeout=(self.timings.connect_s, seconds + 5.0),
            )
            for _line in _lines(response):
                return  # something changed (or the server sent an error): re-read
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            # A dropped or refused watch is resumed by the next read, which has its own
            # bounded retries; pause so a flapping server is not hammered.
            self._cancelled.wait(min(self.timings.backoff_s, window))
        finally:
            if response is not None:
                response.close()
                response.release_conn()

    def _fetch(self, member: MemberApi, pod: str, file: str) -> bytes:
        core = member.core
        body = self._call(
            lambda t: core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod}:{RESULTS_PORT}",
                member.settings.namespace,
                file,
                _preload_content=False,
                _request_timeout=t,
            )
        )
        return body or b""

    def _results(
        self, member: MemberApi, outcome: PodOutcome, name: str, started: float
    ) -> tuple[Observation, dict[str, Any], dict[str, bytes]]:
        """The pod's observation from its result files (checked against the manifest), with
        the manifest and those files."""
        manifest = outcome.manifest or {}
        files: dict[str, bytes] = {}
        for file, (sha256, size) in expected_files(manifest).items():
            data = self._fetch(member, outcome.pod, file)
            if hashlib.sha256(data).hexdigest() != sha256:
                detail = f"{file} from pod {outcome.pod}: {len(data)} bytes, sha256 mismatch"
                if size >= 0 and len(data) != size:
                    detail += f" (expected {size} bytes)"
                return self._failure(member, "ApiError", detail, name, outcome, started), {}, {}
            files[file] = data
        self._quit_results_server(member, outcome.pod)
        signal = manifest.get("signal")
        exit_code = manifest.get("exit_code")
        extra = {"job": name, "pod": outcome.pod, "node": outcome.node}
        environment = None
        if "environment.json" in files:
            try:
                prepared = json.loads(files["environment.json"])
            except ValueError:
                detail = f"environment.json from pod {outcome.pod} is not JSON"
                failed = self._failure(member, "ApiError", detail, name, outcome, started)
                return failed, {}, {}
            environment = report_of(prepared, member.name)
            if environment.status != "ready":
                observation = setup_failed(environment)
                observation = observation.model_copy(update={"member": member.name, "extra": extra})
                return observation, manifest, files
        observation = Observation(
            exit_code=int(exit_code) if exit_code is not None else None,
            signal=int(signal) if signal is not None else None,
            report=files.get("report.xml"),
            log_tail=files.get("log_tail", b""),
            rss_mb=float(manifest.get("rss_mb") or 0.0),
            seconds=float(manifest.get("seconds") or time.monotonic() - started),
            timed_out=bool(manifest.get("timed_out", False)),
            oom=bool(manifest.get("oom", False)),
            member=member.name,
            extra=extra,
            environment=environment,
            sandbox="pod",  # its own container: the pod is the suite's whole world
        ).with_modified_checkout([str(f) for f in manifest.get("modified_files") or ()])
        return observation, manifest, files

    def _quit_results_server(self, member: MemberApi, pod: str) -> None:
        with contextlib.suppress(ApiFailure, Cancelled):  # deleting the Job stops it anyway
            self._fetch(member, pod, "quit")

    def _failure(
        self,
        member: MemberApi,
        reason: str,
        detail: str,
        name: str,
        outcome: PodOutcome | None,
        started: float,
    ) -> Observation:
        extra = {"job": name}
        if outcome is not None:
            extra.update({k: v for k, v in (("pod", outcome.pod), ("node", outcome.node)) if v})
        kind = OWN_OUTCOMES.get(reason, "cancelled" if reason == "cancelled" else "infrastructure")
        return Observation.failed(
            kind,
            reason,
            detail,
            member=member.name,
            timed_out=kind == "timeout",
            oom=kind == "oom",
            seconds=time.monotonic() - started,
            extra=extra,
        )

    # --- cleanup --------------------------------------------------------------------------

    def _delete_job(self, member: MemberApi, namespace: str, name: str) -> bool:
        batch = member.batch
        try:
            self._call(
                lambda t: batch.delete_namespaced_job(
                    name,
                    namespace,
                    propagation_policy="Background",
                    _preload_content=False,
                    _request_timeout=t,
                ),
                attempts=3,
                ok_status=frozenset({404}),
            )
            return True
        except (ApiFailure, Cancelled):
            return False

    def _delete_all(self) -> None:
        with self._lock:
            keys = list(self._jobs)
        for member, namespace, name in keys:
            if self._delete_job(self._members[member], namespace, name):
                with self._lock:
                    self._jobs.pop((member, namespace, name), None)


# --- construction and validation ----------------------------------------------------------


def _origin_url(repo: Path) -> str | None:
    try:
        result = subprocess.run(
            ["git", *SAFE_GIT, "-C", str(repo), "remote", "get-url", "origin"],
            env=git_env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    url = result.stdout.strip()
    return url if result.returncode == 0 and url else None


def _kubeconfig_path(kubeconfig: str | None) -> str:
    return kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def _contexts(kubeconfig: str) -> list[str]:
    try:
        contexts, _active = k8s_config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=kubeconfig
        )
    except (ConfigException, OSError, ValueError) as error:
        raise BadInput(f"cannot read kubeconfig {kubeconfig}: {error}") from None
    return [str(context["name"]) for context in contexts or []]


def build_kubernetes_executor(
    *,
    pool: Sequence[str],
    namespace: str = "default",
    capacity: int = 4,
    image: str = DEFAULT_IMAGE,
    source: str | None,
    repo: Path,
    pool_config: Path | str | None = None,
    git_image: str = "alpine/git",
    kubeconfig: str | None = None,
    timings: K8sTimings | None = None,
    environment_request: EnvironmentRequest | None = None,
) -> KubernetesExecutor:
    """Validate everything up front (BadInput naming the problem), then connect lazily."""
    names = pool.split(",") if isinstance(pool, str) else list(pool)
    members = [member.strip() for member in names if member.strip()]
    if not members:
        raise BadInput("--pool names no kubeconfig context")
    duplicates = sorted({m for m in members if members.count(m) > 1})
    if duplicates:
        raise BadInput(f"--pool names context {duplicates[0]!r} more than once")
    if capacity < 1:
        raise BadInput(f"--capacity must be at least 1, not {capacity}")
    path = _kubeconfig_path(kubeconfig)
    known = _contexts(path)
    for member in members:
        if member not in known:
            raise BadInput(
                f"unknown kubeconfig context {member!r} in {path} "
                f"(known: {', '.join(known) or 'none'})"
            )
    url = source or _origin_url(repo)
    if not url:
        raise BadInput(
            f"no source URL for the pods to clone: {repo} has no origin remote; pass --source URL"
        )
    defaults = MemberSettings(namespace=namespace, capacity=capacity, image=image)
    settings = load_pool_config(Path(pool_config) if pool_config else None, members, defaults)
    label = environment_request.interpreter if environment_request else ""
    if label:  # a matrix lane: each member's image for this interpreter
        settings = {
            member: replace(found, image=found.image.replace("{python}", label))
            for member, found in settings.items()
        }
    timings = timings or K8sTimings()
    apis = [MemberApi(member, settings[member], _api_client(path, member)) for member in members]
    return KubernetesExecutor(
        apis,
        source=url,
        git_image=git_image,
        timings=timings,
        environment_request=environment_request,
    )


def _api_client(kubeconfig: str, context: str) -> k8s.ApiClient:
    configuration = type.__call__(k8s.Configuration)
    configuration.retries = 0  # our own bounded retries with backoff decide
    try:
        api_client: k8s.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig,
            context=context,
            persist_config=False,
            client_configuration=configuration,
        )
    except (ConfigException, OSError, ValueError) as error:
        raise BadInput(f"kubeconfig context {context!r} cannot be loaded: {error}") from None
    return api_client
