"""A loopback stand-in for the part of the Kubernetes API the pool executor uses.

Each member is a threading HTTP server on 127.0.0.1 (ephemeral port) keeping nodes, pods and
Jobs in memory. A created Job gets one pod whose containers run as local subprocesses: init
containers in order, then the main containers at once. The pod's emptyDir volumes are temp
directories: mount paths in commands, working dirs and termination-message paths are rewritten
to them here, so the adapter builds exactly the manifest it would send to a real cluster. Each
pod gets its own loopback address as `status.podIP`, so the pod proxy reaches the results
server the pod itself runs.

Faults per member (`member.fault`): OOMKilled, Evicted, DeadlineExceeded, ImagePullBackOff,
Unschedulable; `member.http_500` (next N requests answer 500, -1 for all), `member.stop()`
(connection refused), `member.hang` (requests are accepted, never answered) and
`member.drop_watches` (next N watches close mid-line).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

FAULTS = ("OOMKilled", "Evicted", "DeadlineExceeded", "ImagePullBackOff", "Unschedulable")
FAULT_DELAY_S = 0.3  # how long a pod runs before an injected fault strikes


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, message: str, reason: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _labels_match(labels: Mapping[str, str], selector: str | None) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = re.split("==?", term, maxsplit=1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def _fields_match(obj: Mapping[str, Any], selector: str | None) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if _field(obj, key) == value:
                return False
        else:
            key, value = re.split("==?", term, maxsplit=1)
            if _field(obj, key) != value:
                return False
    return True


@dataclass
class _PodRuntime:
    """The local side of one pod: its volume dirs, processes and whether it was torn down."""

    root: Path
    ip: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    stopped: bool = False


class StandinMember:
    """One stand-in cluster: an HTTP server plus in-memory nodes, pods and Jobs."""

    def __init__(
        self,
        name: str,
        root: Path,
        *,
        nodes: Mapping[str, str] | None = None,
        node_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.name = name
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.resource_version = 1
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.runtimes: dict[tuple[str, str], _PodRuntime] = {}
        self.fault: str | None = None
        self.http_500 = 0
        self.hang = False  # accept requests but never answer (until stopped)
        self.drop_watches = 0
        self.watches = 0
        self.requests: list[tuple[str, str]] = []
        self.jobs_created: list[str] = []
        self.stopping = threading.Event()
        self.connections: set[Any] = set()
        for node, memory in (nodes or {"node-1": "16Gi"}).items():
            self.add_node(node, memory, labels=(node_labels or {}).get(node))
        handler = type("Handler", (_Handler,), {"member": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    # --- world building -------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        memory: str,
        *,
        ready: bool = True,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        with self.lock:
            self.nodes[name] = {
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                },
                "spec": {},
                "status": {
                    "allocatable": {"memory": memory, "cpu": "4"},
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            }

    def set_node_ready(self, name: str, ready: bool) -> None:
        with self.lock:
            self.nodes[name]["status"]["conditions"][0]["status"] = "True" if ready else "False"

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        node: str,
        memory: str,
        phase: str = "Running",
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """A pod that only occupies memory (another team's workload)."""
        with self.lock:
            pod = {
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "resources": {"requests": {"memory": memory}}}],
                },
                "status": {"phase": phase},
            }
            self._store_pod(pod, "ADDED")

    # --- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        """Close the listening socket: every later request is `connection refused`."""
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            connections = list(self.connections)
        for connection in connections:  # kept-alive connections drop too
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        with self.lock:
            keys = list(self.runtimes)
        for key in keys:
            self._kill(key)

    def live_jobs(self) -> list[str]:
        with self.lock:
            return sorted(name for _ns, name in self.jobs)

    def live_processes(self) -> int:
        with self.lock:
            return sum(
                1
                for runtime in self.runtimes.values()
                for process in runtime.processes.values()
                if process.poll() is None
            )

    # --- storage and events -----------------------------------------------------------------

    def _bump(self, obj: dict[str, Any]) -> None:
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)

    def _store_pod(self, pod: dict[str, Any], kind: str = "MODIFIED") -> None:
        with self.changed:
            self._bump(pod)
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            if kind == "DELETED":
                self.pods.pop(key, None)
            else:
                self.pods[key] = pod
            self.events.append((self.resource_version, kind, json.loads(json.dumps(pod))))
            self.changed.notify_all()

    def _update_pod(self, key: tuple[str, str], change: Any) -> dict[str, Any] | None:
        with self.changed:
            pod = self.pods.get(key)
            if pod is None:
                return None
            change(pod)
            self._store_pod(pod)
            return pod

    def _update_job(self, key: tuple[str, str], change: Any) -> None:
        with self.changed:
            job = self.jobs.get(key)
            if job is not None:
                change(job)
                self._bump(job)
                self.changed.notify_all()

    def _finish_job(self, key: tuple[str, str], kind: str, reason: str, message: str) -> None:
        def change(job: dict[str, Any]) -> None:
            status = job.setdefault("status", {})
            if any(c.get("status") == "True" for c in status.get("conditions", [])):
                return
            status["conditions"] = [
                {"type": kind, "status": "True", "reason": reason, "message": message}
            ]
            status["active"] = 0
            status["succeeded" if kind == "Complete" else "failed"] = 1
            status["completionTime"] = _now()

        self._update_job(key, change)

    # --- running a Job's pod ----------------------------------------------------------------

    def create_job(self, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
        name = job["metadata"]["name"]
        with self.changed:
            if (namespace, name) in self.jobs:
                raise KeyError(name)
            job["metadata"].update(
                namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now()
            )
            job["status"] = {"active": 1, "startTime": _now()}
            self._bump(job)
            self.jobs[(namespace, name)] = job
            self.jobs_created.append(name)
            fault = self.fault
        threading.Thread(target=self._run_job, args=(namespace, job, fault), daemon=True).start()
        return job

    def delete_job(self, namespace: str, name: str) -> bool:
        with self.changed:
            job = self.jobs.pop((namespace, name), None)
            if job is None:
                return False
            pods = [k for k, p in self.pods.items() if p.get("_job") == (namespace, name)]
        for key in pods:
            self._kill(key)
            with self.changed:
                pod = self.pods.get(key)
                if pod is not None:
                    self._store_pod(pod, "DELETED")
        return True

    def _run_job(self, namespace: str, job: dict[str, Any], fault: str | None) -> None:
        template = job["spec"]["template"]
        job_key = (namespace, job["metadata"]["name"])
        pod_name = f"{job['metadata']['name'][:57]}-{uuid.uuid4().hex[:5]}"
        key = (namespace, pod_name)
        spec = json.loads(json.dumps(template["spec"]))
        pod: dict[str, Any] = {
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": namespace,
                "labels": {**template["metadata"].get("labels", {}), "job-name": job_key[1]},
                "uid": str(uuid.uuid4()),
            },
            "spec": spec,
            "status": {"phase": "Pending", "conditions": []},
            "_job": job_key,
        }
        ip = f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.{random.randint(1, 254)}"
        runtime = _PodRuntime(Path(tempfile.mkdtemp(prefix="pod-", dir=self.root)), ip)
        with self.changed:
            if job_key not in self.jobs:
                return
            self.runtimes[key] = runtime
            self._store_pod(pod, "ADDED")
        deadline = job["spec"].get("activeDeadlineSeconds")
        if fault == "DeadlineExceeded":
            deadline = 1
        if deadline:
            timer = threading.Timer(float(deadline), self._deadline, args=(job_key, key))
            timer.daemon = True
            timer.start()
        if fault == "Unschedulable":
            self._update_pod(key, _unschedulable)
            return
        selector = spec.get("nodeSelector") or {}
        node = sorted(
            n
            for n, obj in self.nodes.items()
            if _ready(obj)
            and all(obj["metadata"]["labels"].get(k) == v for k, v in selector.items())
        )[:1]
        if not node:
            self._update_pod(key, _unschedulable)
            return

        def schedule(pod: dict[str, Any]) -> None:
            pod["spec"]["nodeName"] = node[0]
            pod["status"]["podIP"] = ip
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]

        self._update_pod(key, schedule)
        if fault == "ImagePullBackOff":
            self._image_pull_loop(key)
            return
        for container in spec.get("initContainers", []):
            self._set_container(key, "initContainerStatuses", container["name"], running=True)
            code, message = self._run_container(key, runtime, pod, container, wait=True)
            if runtime.stopped:
                return
            self._set_container(
                key, "initContainerStatuses", container["name"], code=code, message=message
            )
            if code != 0:
                self._fail_pod(key, job_key, "", "")
                return
        for container in spec.get("containers", []):
            if fault != "DeadlineExceeded":  # then the containers hang until the deadline
                self._run_container(key, runtime, pod, container, wait=False)
            self._set_container(key, "containerStatuses", container["name"], running=True)

        def running(pod: dict[str, Any]) -> None:
            pod["status"]["phase"] = "Running"

        self._update_pod(key, running)
        if fault == "DeadlineExceeded":
            return
        if fault in ("OOMKilled", "Evicted"):
            time.sleep(FAULT_DELAY_S)
            if fault == "OOMKilled":
                runner = spec["containers"][0]["name"]
                self._kill_process(runtime, runner)
                self._set_container(key, "containerStatuses", runner, code=137, reason="OOMKilled")
            else:
                self._kill(key)
                self._fail_pod(key, job_key, "Evicted", "The node was low on resource: memory.")
            return
        self._wait_containers(key, job_key, runtime, spec)

    def _wait_containers(
        self, key: tuple[str, str], job_key: tuple[str, str], runtime: _PodRuntime, spec: Any
    ) -> None:
        codes: dict[str, int] = {}
        names = [c["name"] for c in spec.get("containers", [])]
        while len(codes) < len(names) and not runtime.stopped:
            for name in names:
                process = runtime.processes.get(name)
                if name in codes or process is None or process.poll() is None:
                    continue
                codes[name] = process.returncode
                message = self._termination_message(runtime, name, process.returncode)
                self._set_container(
                    key, "containerStatuses", name, code=process.returncode, message=message
                )
            time.sleep(0.05)
        if runtime.stopped:
            return
        if all(code == 0 for code in codes.values()):

            def succeeded(pod: dict[str, Any]) -> None:
                pod["status"]["phase"] = "Succeeded"

            self._update_pod(key, succeeded)
            self._finish_job(job_key, "Complete", "", "")
        else:
            self._fail_pod(key, job_key, "", "")

    def _fail_pod(
        self, key: tuple[str, str], job_key: tuple[str, str], reason: str, message: str
    ) -> None:
        def failed(pod: dict[str, Any]) -> None:
            pod["status"]["phase"] = "Failed"
            if reason:
                pod["status"]["reason"] = reason
                pod["status"]["message"] = message
                for entry in pod["status"].get("containerStatuses", []):
                    if "running" in entry.get("state", {}):
                        terminated = {"exitCode": 137, "reason": "Error", "finishedAt": _now()}
                        entry["state"] = {"terminated": terminated}

        self._update_pod(key, failed)
        self._finish_job(
            job_key,
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )

    def _deadline(self, job_key: tuple[str, str], key: tuple[str, str]) -> None:
        with self.lock:
            job = self.jobs.get(job_key)
            if job is None or any(
                c.get("status") == "True" for c in job["status"].get("conditions", [])
            ):
                return
        self._finish_job(
            job_key, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline"
        )
        self._kill(key)
        with self.changed:
            pod = self.pods.get(key)
            if pod is not None:
                self._store_pod(pod, "DELETED")

    def _image_pull_loop(self, key: tuple[str, str]) -> None:
        reasons = ["ErrImagePull", "ImagePullBackOff"]
        turn = 0
        while not self.stopping.is_set():
            with self.lock:
                if key not in self.pods:
                    return
            reason = reasons[turn % 2]

            def waiting(pod: dict[str, Any], reason: str = reason) -> None:
                container = pod["spec"]["initContainers"][0]
                pod["status"]["initContainerStatuses"] = [
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "waiting": {
                                "reason": reason,
                                "message": f'Back-off pulling image "{container["image"]}"',
                            }
                        },
                    }
                ]

            self._update_pod(key, waiting)
            turn += 1
            self.stopping.wait(1.0)

    def _set_container(
        self,
        key: tuple[str, str],
        which: str,
        name: str,
        *,
        running: bool = False,
        code: int | None = None,
        reason: str = "",
        message: str = "",
    ) -> None:
        def change(pod: dict[str, Any]) -> None:
            statuses = pod["status"].setdefault(which, [])
            entry = next((s for s in statuses if s["name"] == name), None)
            if entry is None:
                entry = {"name": name, "ready": False, "restartCount": 0, "image": "standin"}
                statuses.append(entry)
            if running:
                entry["state"] = {"running": {"startedAt": _now()}}
                entry["ready"] = True
            else:
                terminated: dict[str, Any] = {
                    "exitCode": code,
                    "reason": reason or ("Completed" if code == 0 else "Error"),
                    "finishedAt": _now(),
                }
                if message:
                    terminated["message"] = message
                entry["state"] = {"terminated": terminated}
                entry["ready"] = False

        self._update_pod(key, change)

    def _container_paths(self, runtime: _PodRuntime, pod: Mapping[str, Any], container: Any) -> Any:
        volumes = {v["name"]: runtime.root / "volumes" / v["name"] for v in pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
        term = runtime.root / f"termination-{container['name']}"
        term.touch()
        mounts[container.get("terminationMessagePath", "/dev/termination-log")] = term
        for path in volumes.values():
            path.mkdir(parents=True, exist_ok=True)
        return mounts

    def _run_container(
        self,
        key: tuple[str, str],
        runtime: _PodRuntime,
        pod: Mapping[str, Any],
        container: Any,
        *,
        wait: bool,
    ) -> tuple[int, str]:
        mounts = self._container_paths(runtime, pod, container)

        def local(text: str) -> str:
            for mount in sorted(mounts, key=len, reverse=True):
                text = text.replace(mount, str(mounts[mount]))
            return text

        argv = [local(a) for a in [*container.get("command", []), *container.get("args", [])]]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        for variable in container.get("env", []):
            if "value" in variable:
                env[variable["name"]] = local(str(variable["value"]))
            elif _field(variable, "valueFrom.fieldRef.fieldPath") == "status.podIP":
                env[variable["name"]] = runtime.ip
            elif _field(variable, "valueFrom.fieldRef.fieldPath") == "metadata.name":
                env[variable["name"]] = key[1]
        workdir = (
            Path(local(container.get("workingDir", ""))) if container.get("workingDir") else None
        )
        log = runtime.root / f"log-{container['name']}"
        with open(log, "wb") as handle:
            process = subprocess.Popen(
                argv,
                cwd=workdir if workdir and workdir.is_dir() else runtime.root,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        with self.lock:
            runtime.processes[container["name"]] = process
            if runtime.stopped:
                self._kill_process(runtime, container["name"])
        if not wait:
            return 0, ""
        code = process.wait()
        return code, self._termination_message(runtime, container["name"], code, container)

    def _termination_message(
        self, runtime: _PodRuntime, name: str, code: int, container: Any = None
    ) -> str:
        term = runtime.root / f"termination-{name}"
        message = term.read_text(errors="replace")[:4096] if term.exists() else ""
        policy = (container or {}).get("terminationMessagePolicy", "File")
        if not message and code != 0 and policy == "FallbackToLogsOnError":
            log = runtime.root / f"log-{name}"
            message = log.read_bytes()[-2048:].decode(errors="replace") if log.exists() else ""
        return message

    def container_log(self, key: tuple[str, str], container: str) -> bytes:
        runtime = self.runtimes.get(key)
        if runtime is None:
            return b""
        log = runtime.root / f"log-{container}"
        return log.read_bytes() if log.exists() else b""

    def _kill_process(self, runtime: _PodRuntime, name: str) -> None:
        process = runtime.processes.get(name)
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

    def _kill(self, key: tuple[str, str]) -> None:
        with self.lock:
            runtime = self.runtimes.get(key)
            if runtime is None:
                return
            runtime.stopped = True
            names = list(runtime.processes)
        for name in names:
            self._kill_process(runtime, name)

    def proxy(self, namespace: str, pod_port: str, path: str) -> tuple[int, bytes]:
        name, _, port = pod_port.partition(":")
        with self.lock:
            runtime = self.runtimes.get((namespace, name))
        if runtime is None or (namespace, name) not in self.pods:
            return 404, json.dumps(_status(404, f'pods "{name}" not found', "NotFound")).encode()
        url = f"http://{runtime.ip}:{port or 80}/{path}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError as error:
            message = f"error trying to reach service: {error}"
            return 503, json.dumps(_status(503, message, "ServiceUnavailable")).encode()

    def close(self) -> None:
        if not self.stopping.is_set():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _ready(node: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node["status"].get("conditions", [])
    )


def _unschedulable(pod: dict[str, Any]) -> None:
    pod["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient memory.",
        }
    ]


def _public(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if not k.startswith("_")}


class _Handler(BaseHTTPRequestHandler):
    member: StandinMember
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.member.lock:
            self.member.connections.add(self.request)

    def finish(self) -> None:
        with self.member.lock:
            self.member.connections.discard(self.request)
        with contextlib.suppress(OSError):
            super().finish()

    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _injected(self) -> bool:
        member = self.member
        with member.lock:
            member.requests.append((self.command, self.path))
            hang = member.hang
        if hang:
            member.stopping.wait(60)
            self.close_connection = True
            return True
        with member.lock:
            if member.http_500 == 0:
                return False
            if member.http_500 > 0:
                member.http_500 -= 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))  # keep the stream in step
        self._send(500, _status(500, "injected internal error", "InternalError"))
        return True

    def do_GET(self) -> None:
        if self._injected():
            return
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        member = self.member
        labels, fields = query.get("labelSelector"), query.get("fieldSelector")
        if parts == ["api", "v1", "nodes"]:
            with member.lock:
                items = [
                    n
                    for n in member.nodes.values()
                    if _labels_match(n["metadata"]["labels"], labels)
                ]
                self._list("NodeList", items)
            return
        if parts == ["api", "v1", "pods"]:
            self._pods(None, labels, fields, query)
            return
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and parts[4] == "pods":
            namespace = parts[3]
            if len(parts) == 5:
                self._pods(namespace, labels, fields, query)
                return
            if len(parts) >= 7 and parts[6] == "proxy":
                code, body = member.proxy(namespace, parts[5], "/".join(parts[7:]))
                self._send(code, body, "application/octet-stream")
                return
            key = (namespace, parts[5])
            with member.lock:
                pod = member.pods.get(key)
            if pod is None:
                self._send(404, _status(404, f'pods "{parts[5]}" not found', "NotFound"))
            elif len(parts) == 7 and parts[6] == "log":
                log = member.container_log(key, query.get("container", ""))
                self._send(200, log, "text/plain")
            else:
                self._send(200, _public(pod))
            return
        if parts[:4] == ["apis", "batch", "v1", "namespaces"] and len(parts) >= 6:
            namespace = parts[4]
            with member.lock:
                if len(parts) == 6:
                    items = [
                        j
                        for (ns, _), j in member.jobs.items()
                        if ns == namespace
                        and _labels_match(j["metadata"].get("labels", {}), labels)
                    ]
                    self._list("JobList", items)
                    return
                job = member.jobs.get((namespace, parts[6]))
                if job is None:
                    self._send(404, _status(404, f'jobs.batch "{parts[6]}" not found', "NotFound"))
                else:
                    self._send(200, job)
            return
        self._send(404, _status(404, f"the stand-in does not serve {url.path}", "NotFound"))

    def _list(self, kind: str, items: Sequence[Mapping[str, Any]]) -> None:
        self._send(
            200,
            {
                "kind": kind,
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.member.resource_version)},
                "items": [_public(i) for i in items],
            },
        )

    def _pods(
        self,
        namespace: str | None,
        labels: str | None,
        fields: str | None,
        query: Mapping[str, str],
    ) -> None:
        member = self.member

        def matches(pod: Mapping[str, Any]) -> bool:
            return (
                (namespace is None or pod["metadata"]["namespace"] == namespace)
                and _labels_match(pod["metadata"].get("labels", {}), labels)
                and _fields_match(pod, fields)
            )

        if query.get("watch") not in ("true", "1"):
            with member.lock:
                self._list("PodList", [p for p in member.pods.values() if matches(p)])
            return
        self._watch(matches, query)

    def _watch(self, matches: Any, query: Mapping[str, str]) -> None:
        member = self.member
        timeout = float(query.get("timeoutSeconds") or 60)
        until = time.monotonic() + timeout
        with member.lock:
            member.watches += 1
            drop = member.drop_watches > 0
            if drop:
                member.drop_watches -= 1
            since = query.get("resourceVersion")
            pending: list[tuple[str, dict[str, Any]]] = []
            if since:
                cursor = int(since)
            else:
                cursor = member.resource_version
                pending = [("ADDED", p) for p in member.pods.values() if matches(p)]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while True:
                with member.changed:
                    while not pending:
                        fresh = [(rv, k, o) for rv, k, o in member.events if rv > cursor]
                        for rv, kind, obj in fresh:
                            cursor = rv
                            if matches(obj):
                                pending.append((kind, obj))
                        if pending:
                            break
                        left = until - time.monotonic()
                        if left <= 0 or member.stopping.is_set():
                            self._chunk(b"")
                            return
                        member.changed.wait(min(left, 0.5))
                kind, obj = pending.pop(0)
                line = json.dumps({"type": kind, "object": _public(obj)}).encode() + b"\n"
                if drop:
                    self._chunk(line[: len(line) // 2])
                    self.close_connection = True
                    return  # the connection drops mid-line, without the closing chunk
                self._chunk(line)
        except (BrokenPipeError, ConnectionResetError):
            return

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        if self._injected():
            return
        parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        if parts[:4] == ["apis", "batch", "v1", "namespaces"] and parts[5:] == ["jobs"]:
            try:
                job = self.member.create_job(parts[4], self._body())
            except KeyError as error:
                self._send(409, _status(409, f"jobs.batch {error} already exists", "AlreadyExists"))
                return
            self._send(201, job)
            return
        self._send(404, _status(404, "not served", "NotFound"))

    def do_DELETE(self) -> None:
        if self._injected():
            return
        parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        self._body()
        if parts[:4] == ["apis", "batch", "v1", "namespaces"] and len(parts) == 7:
            if self.member.delete_job(parts[4], parts[6]):
                self._send(200, _status(200, "deleted"))
            else:
                self._send(404, _status(404, f'jobs.batch "{parts[6]}" not found', "NotFound"))
            return
        self._send(404, _status(404, "not served", "NotFound"))


def write_kubeconfig(path: Path, members: Mapping[str, str]) -> Path:
    """A kubeconfig with one context per member (name -> server URL); JSON is valid YAML."""
    names = list(members)
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": members[n]}} for n in names],
        "users": [{"name": n, "user": {"token": "standin"}} for n in names],
        "contexts": [{"name": n, "context": {"cluster": n, "user": n}} for n in names],
        "current-context": names[0] if names else "",
    }
    path.write_text(json.dumps(document, indent=2))
    return path


@contextlib.contextmanager
def standin_pool(
    root: Path, names: Sequence[str]
) -> Iterator[tuple[dict[str, StandinMember], Path]]:
    """Start one stand-in member per name and write their kubeconfig; stop them all after."""
    members = {name: StandinMember(name, root / "members" / name) for name in names}
    try:
        kubeconfig = write_kubeconfig(root / "kubeconfig", {n: m.url for n, m in members.items()})
        yield members, kubeconfig
    finally:
        for member in members.values():
            member.close()
