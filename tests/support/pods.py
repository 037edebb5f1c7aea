"""Real pods on the local node, driven through the gateway the way a tenant
drives them: the real kubectl with a kubeconfig that points at
`https://<gateway>/k8s/<workspace>` and carries the session token."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from devstack.cluster import LocalCluster
from devstack.nodeparts import BUSYBOX_IMAGE
from tests.support.gatewayclient import Session, register_and_login
from tests.support.kubeclients import kubeconfig_for_proxy

# What Pod Security `restricted` (every tier's default) asks of a pod and of
# each container: a numeric user that is not root (busybox's image would run
# as root; 65534 is its `nobody`), the runtime's seccomp profile, no
# privilege escalation, no capabilities.
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def restricted(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` (a manifest, or a template) with the securityContexts
    `restricted` asks for added to its spec and each container."""
    spec = pod["spec"]
    spec["securityContext"] = {**RESTRICTED_POD, **spec.get("securityContext", {})}
    for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
        container["securityContext"] = {**RESTRICTED_CONTAINER, **container.get("securityContext", {})}
    return pod


def pod_manifest(name: str, script: str, *, stdin: bool = False, tty: bool = False) -> dict[str, Any]:
    """A busybox pod running `script` under sh, as Pod Security `restricted` wants it.

    It requests what busybox needs, not the tier's default (100m): the node
    has 2 CPUs, and the whole suite's pods must fit on it at once."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "securityContext": dict(RESTRICTED_POD),
            "containers": [{
                "name": "main", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", script],
                "stdin": stdin, "tty": tty,
                "resources": {"requests": {"cpu": "5m", "memory": "16Mi"}},
                "securityContext": dict(RESTRICTED_CONTAINER),
            }],
        },
    }


@dataclass
class Tenant:
    """A signed-in user with a workspace, and kubectl pointed at it through the gateway."""

    cluster: LocalCluster
    session: Session
    workspace: dict[str, Any]
    kubeconfig: Path
    server: str

    @property
    def namespace(self) -> str:
        return str(self.workspace["namespace"])

    def argv(self, *args: str) -> list[str]:
        return [str(self.cluster.kubectl), f"--kubeconfig={self.kubeconfig}", *args]

    async def kubectl(self, *args: str, input: str | None = None, env: dict[str, str] | None = None,
                      timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """kubectl to completion, off the event loop (the gateway serves on it)."""
        return await asyncio.to_thread(
            subprocess.run, self.argv(*args), input=input, capture_output=True, text=True, timeout=timeout,
            env={**os.environ, **(env or {})})

    async def spawn(self, *args: str, env: dict[str, str] | None = None, **kwargs: Any) -> asyncio.subprocess.Process:
        """A long-running kubectl (exec -i, logs -f, port-forward) with pipes."""
        kwargs.setdefault("stdin", asyncio.subprocess.PIPE)
        kwargs.setdefault("stdout", asyncio.subprocess.PIPE)
        kwargs.setdefault("stderr", asyncio.subprocess.PIPE)
        return await asyncio.create_subprocess_exec(*self.argv(*args), env={**os.environ, **(env or {})}, **kwargs)

    async def remove_pods(self) -> None:
        """Free the node for the rest of the suite (as the cluster's admin)."""
        await asyncio.to_thread(self.cluster.kubectl_run, "-n", self.namespace, "delete", "pods", "--all",
                                "--grace-period=0", "--wait=false", check=False)

    async def run_pod(self, script: str, *, name: str | None = None, stdin: bool = False, tty: bool = False) -> str:
        """Create a pod through the gateway and wait until it runs; its name."""
        name = name or f"pod-{uuid.uuid4().hex[:8]}"
        applied = await self.kubectl("apply", "-f", "-", input=json.dumps(pod_manifest(name, script, stdin=stdin, tty=tty)))
        assert applied.returncode == 0, applied.stderr
        ready = await self.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=90s", timeout=100)
        assert ready.returncode == 0, ready.stderr + (await self.kubectl("describe", "pod", name)).stdout
        return name


async def new_tenant(cluster: LocalCluster, gateway: Any, folder: Path) -> Tenant:
    session = await register_and_login(gateway)
    workspace = await session.init()
    server = str(gateway.make_url(f"/k8s/{workspace['id']}"))
    config = kubeconfig_for_proxy(folder, server, session.token, workspace["namespace"], gateway.ca_file)
    return Tenant(cluster, session, workspace, config, server)


async def read_until(stream: asyncio.StreamReader, needle: bytes, limit: float = 30) -> bytes:
    """Read until `needle` has arrived (or fail after `limit` seconds)."""
    seen = b""
    async with asyncio.timeout(limit):
        while needle not in seen:
            chunk = await stream.read(4096)
            if not chunk:
                raise AssertionError(f"stream ended before {needle!r}; got {seen[-500:]!r}")
            seen += chunk
    return seen


# A busybox httpd serving one page on port 8080 (port-forward tests).
HTTP_SERVER = ("mkdir -p /tmp/www && echo hello-from-the-pod > /tmp/www/index.html"
               " && exec httpd -f -p 8080 -h /tmp/www")  # /tmp: the pod runs as nobody
# A busybox nc that echoes every connection on port 9000 back to it (port-forward's bytes both ways).
ECHO_SERVER = "while true; do nc -l -p 9000 -e cat; done"
# The channels of v5.channel.k8s.io (a browser's exec WebSocket).
STDIN, STDOUT, STDERR, STATUS, RESIZE = 0, 1, 2, 3, 4


async def forwarded_port(process: asyncio.subprocess.Process) -> int:
    assert process.stdout is not None
    line = await read_until(process.stdout, b"->")
    found = re.search(rb"127\.0\.0\.1:(\d+) ->", line)
    assert found, line
    return int(found.group(1))


def exec_url(tenant: Tenant, pod: str, command: list[str], *, tty: bool) -> str:
    query = urlencode([("command", part) for part in command] + [
        ("stdin", "true"), ("stdout", "true"), ("stderr", "false" if tty else "true"), ("tty", str(tty).lower())])
    return f"{tenant.server}/api/v1/namespaces/{tenant.namespace}/pods/{pod}/exec?{query}"
