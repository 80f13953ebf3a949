"""The Kubernetes Job one shard attempt runs as, and the two tiny programs its pod runs.

The pod fetches the source at the exact commit (an init container clones into a shared
emptyDir and detaches at the SHA); the runner container prepares the revision's environment,
runs the shard command under the shared supervisor, and writes the JUnit report, a log tail,
the environment it prepared and a manifest (exit code, sizes, sha256s) into the shared volume,
and puts the manifest in its termination message. A results container serves those files over HTTP
so the adapter fetches them through the API server's pod proxy: reports of any size survive,
unlike pod logs (kubelet rotates them), and every byte is checked against the manifest.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from release_ledger.adapters.executors.invocation_run import FILES_MARK
from release_ledger.adapters.executors.kubernetes.runner import PYTHON_MARK
from release_ledger.adapters.executors.programs import remote_program
from release_ledger.adapters.pytest_plugin import PLUGIN_MODULE, PLUGIN_SOURCE
from release_ledger.domain.execution import EnvironmentRequest, ShardRun, expand_command

GATE_LABEL = "release-ledger/gate"
LABEL_PREFIX = "release-ledger/"
WORK_MOUNT = "/ledger"  # the shared emptyDir, as every container sees it
SOURCE_DIR = f"{WORK_MOUNT}/src"
OUT_DIR = f"{WORK_MOUNT}/out"
JUNIT_PATH = f"{OUT_DIR}/report.xml"
TERMINATION_PATH = "/dev/termination-log"
RESULTS_PORT = 8770
RESULTS_CONTAINER = "results"
RUNNER_CONTAINER = "runner"
SOURCE_CONTAINER = "source"
RESULTS_MEMORY = "64Mi"  # the results server's own request and limit, beside the reservation
LOG_TAIL_BYTES = 64 * 1024
RESULT_FILES = ("manifest.json", "report.xml", "log_tail", "environment.json", "items.json")

_DNS_BAD = re.compile(r"[^a-z0-9-]+")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")

# Clones the source into the shared volume and detaches at the SHA: never a branch name.
CLONE_SCRIPT = (
    'set -e; git clone --quiet --no-checkout "$1" "$3"; '
    'git -C "$3" -c advice.detachedHead=false checkout --quiet --detach "$2"; '
    'test "$(git -C "$3" rev-parse HEAD)" = "$2"'
)

# The runner container's program: environment preparation and the shard supervisor, then
# `runner.py` (see its docstring).
RUNNER_SCRIPT = remote_program("kubernetes/runner.py")
ENV_CACHE = f"{WORK_MOUNT}/envs"

# Serves the result files read-only until told to quit, or a while after the manifest exists.
RESULTS_SCRIPT = r"""
import http.server, os, socket, sys, threading, time
out, port, linger = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
names = set(sys.argv[4].split(","))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        name = self.path.split("?")[0].strip("/")
        if name == "quit":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            threading.Thread(target=server.shutdown, daemon=True).start()
            return
        path = os.path.join(out, name)
        if name not in names or not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(os.path.getsize(path)))
        self.end_headers()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 16), b""):
                self.wfile.write(chunk)
    def log_message(self, *args):
        pass
host = os.environ.get("POD_IP") or "0.0.0.0"
class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    daemon_threads = True
server = Server((host, port), Handler)
def linger_then_quit():
    manifest = os.path.join(out, "manifest.json")
    while not (os.path.exists(manifest) and time.time() - os.path.getmtime(manifest) > linger):
        time.sleep(1)
    server.shutdown()
threading.Thread(target=linger_then_quit, daemon=True).start()
server.serve_forever()
"""


@dataclass(frozen=True)
class MemberSettings:
    """Where and how one pool member runs Jobs (defaults, or its entry in the pool config)."""

    namespace: str = "default"
    capacity: int = 4
    image: str = "python:3.11-slim"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    service_account: str | None = None


def dns_label(text: str, limit: int = 63) -> str:
    """A DNS-1123 label: lowercase alphanumerics and dashes, at most `limit` characters."""
    label = _DNS_BAD.sub("-", text.lower()).strip("-")
    if len(label) <= limit:
        return label or "x"
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{label[: limit - 9].rstrip('-')}-{digest}"


def label_value(text: str) -> str:
    """A label value: at most 63 characters of [A-Za-z0-9_.-], alphanumeric at both ends."""
    value = _LABEL_BAD.sub("-", text).strip("-_.")
    if len(value) > 63:
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        value = f"{value[:54].rstrip('-_.')}-{digest}"
    return value


def job_name(shard: ShardRun, suffix: str) -> str:
    """`rl-RUN-SHARD-aN-head|base-SUFFIX`, DNS-safe and at most 63 characters.

    The suffix keeps a resumed run's retried attempt from colliding with a leftover Job.
    """
    tail = f"-a{shard.attempt}-{shard.revision}-{dns_label(suffix, 8)}"
    head = dns_label(f"rl-{shard.run_id[:16]}-{shard.shard_id}", 63 - len(tail))
    return f"{head}{tail}"


def job_labels(shard: ShardRun, name: str) -> dict[str, str]:
    """The labels every gate Job and its pod carry: found by `release-ledger/gate=true`."""
    return {
        GATE_LABEL: "true",
        f"{LABEL_PREFIX}run": label_value(shard.run_id),
        f"{LABEL_PREFIX}shard": label_value(shard.shard_id),
        f"{LABEL_PREFIX}attempt": str(shard.attempt),
        f"{LABEL_PREFIX}revision": shard.revision,
        f"{LABEL_PREFIX}job": name,
    }


def memory_mib(reservation_mb: int) -> str:
    return f"{reservation_mb}Mi"


def job_manifest(
    shard: ShardRun,
    *,
    name: str,
    source: str,
    settings: MemberSettings,
    git_image: str,
    reservation_mb: int,
    ttl_seconds: int = 600,
    linger_seconds: int = 300,
    environment: EnvironmentRequest | None = None,
    collect: bool = False,
) -> dict[str, Any]:
    """The batch/v1 Job for one shard attempt at one revision, as a plain dict; with
    `collect`, the revision's collect-only run instead (its command and files unused)."""
    # The files are named in the pod, from where the invocation runs (`in_workdir`).
    argv = expand_command(shard.command, python=PYTHON_MARK, junit=JUNIT_PATH, files=[FILES_MARK])
    request = environment or EnvironmentRequest()
    runner_spec = {
        "out": OUT_DIR,
        "src": SOURCE_DIR,
        "junit": JUNIT_PATH,
        "termination": TERMINATION_PATH,
        "tail_bytes": LOG_TAIL_BYTES,
        "timeout_s": float(shard.timeout_s),
        # The supervisor kills at the pod's own limit: the same figure the kernel enforces,
        # measured by the same rule as on every other executor.
        "memory_limit_mb": reservation_mb,
        "commit": shard.commit,
        "env_mode": request.mode,
        "env_command": list(request.command),
        "env_extras": list(request.extras),
        "env_exclude_newer": request.exclude_newer,
        "pass_env": list(request.pass_env),
        "outputs": list(request.outputs),
        "env_pinned": request.pinned,
        "env_skip_sources": dict(shard.skip_sources),
        "env_cache": ENV_CACHE,
        "plugin_module": PLUGIN_MODULE,
        "plugin_source": PLUGIN_SOURCE,
        "file_limits": dict(shard.file_limits),
        "files": list(shard.files),
    }
    if collect:
        runner_spec["collect"] = True
    labels = job_labels(shard, name)
    volume_mount = [{"name": "work", "mountPath": WORK_MOUNT}]
    memory = memory_mib(reservation_mb)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "volumes": [{"name": "work", "emptyDir": {}}],
        "initContainers": [
            {
                "name": SOURCE_CONTAINER,
                "image": git_image,
                "command": ["sh", "-c", CLONE_SCRIPT, "clone", source, shard.commit, SOURCE_DIR],
                "volumeMounts": volume_mount,
                "terminationMessagePath": TERMINATION_PATH,
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            }
        ],
        "containers": [
            {
                "name": RUNNER_CONTAINER,
                "image": settings.image,
                "command": [
                    "python",
                    "-c",
                    RUNNER_SCRIPT,
                    json.dumps(runner_spec, sort_keys=True),
                    *argv,
                ],
                "workingDir": SOURCE_DIR,
                "volumeMounts": volume_mount,
                "terminationMessagePath": TERMINATION_PATH,
                "terminationMessagePolicy": "File",
                "resources": {"requests": {"memory": memory}, "limits": {"memory": memory}},
            },
            {
                "name": RESULTS_CONTAINER,
                "image": settings.image,
                "command": [
                    "python",
                    "-c",
                    RESULTS_SCRIPT,
                    OUT_DIR,
                    str(RESULTS_PORT),
                    str(linger_seconds),
                    ",".join(RESULT_FILES),
                ],
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                ],
                "ports": [{"containerPort": RESULTS_PORT, "name": "results"}],
                "volumeMounts": volume_mount,
                "resources": {
                    "requests": {"memory": RESULTS_MEMORY},
                    "limits": {"memory": RESULTS_MEMORY},
                },
            },
        ],
    }
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    # The suite is untrusted code: no credentials for the cluster's API in its pod, whatever
    # account it runs as (nothing in the pod talks to the API; the gate reads the results).
    pod_spec["automountServiceAccountToken"] = False
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, math.ceil(shard.timeout_s)),
            "ttlSecondsAfterFinished": ttl_seconds,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def parse_manifest(message: str | None) -> dict[str, Any] | None:
    """The runner's manifest from its termination message, or None when absent or malformed."""
    if not message:
        return None
    try:
        manifest = json.loads(message)
    except ValueError:
        return None
    if not isinstance(manifest, dict) or manifest.get("v") != 1:
        return None
    return manifest


def expected_files(manifest: Mapping[str, Any]) -> dict[str, tuple[str, int]]:
    """File name -> (sha256, size) for every result file the manifest says was written."""
    files: dict[str, tuple[str, int]] = {}
    names = (
        ("report", "report.xml"),
        ("log_tail", "log_tail"),
        ("environment", "environment.json"),
        ("items", "items.json"),  # a collect-only run's
    )
    for key, name in names:
        entry = manifest.get(key)
        if isinstance(entry, dict) and "sha256" in entry:
            files[name] = (str(entry["sha256"]), int(entry.get("size", -1)))
    return files
