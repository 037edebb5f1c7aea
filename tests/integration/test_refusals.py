"""Given a refusal the gateway makes itself, when a real client meets it,
then the client shows the gateway's message, not an empty line.

kubectl (its REST client, and its WebSocket and SPDY dialers for exec and
port-forward) and the official Python client (`ApiException`) read every
error body as a Kubernetes Status; on /k8s the gateway's error is one.
The pods here never get a node, so they stay Pending: kubectl exec still
dials, and every refusal tested here is made before the API server would
need a node.

kubectl first reads discovery (cached per server URL for hours). client-go
reads a discovery answer with `Result.Raw()`, which never decodes a Status:
a refused discovery prints "unknown" for a 403, and for a 401 client-go's own
"the server has asked for the client to provide credentials", whatever the
body. So the suspension and session tests first use kubectl as the tenant
did before the refusal, which warms its discovery cache; its next command
then meets the refusal on the pod itself, where the Status is decoded.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import yarl
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException  # type: ignore[attr-defined]
from kubernetes.stream import stream

from devstack.cluster import LocalCluster
from provisioning.kube.client import KubeClient
from provisioning.secrets import Secret
from proxy.auth import sessions
from proxy.passthrough.gate import SPDY_REFUSED
from proxy.passthrough.upstream import Upstream
from tests.support.environment import SESSION_SECRET
from tests.support.gatewayclient import Session, admin_session, register_and_login
from tests.support.kubeclients import kubeconfig_for_proxy, kubectl, through_gateway
from tests.support.pods import new_tenant, restricted
from tests.support.replicas import gateway_process, tls_session

pytestmark = pytest.mark.cluster

# Pending for good, whatever nodes the cluster has: no node carries the label.
# As workspaces admit pods: Pod Security restricted, pulled with its own right.
POD = restricted({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
                  "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                           "imagePullPolicy": "Always"}],
                           "nodeSelector": {"tenant-gateway.test/nowhere": "true"}}})
WALL = "that namespace belongs to someone else"
SUSPENDED = "this workspace is suspended"


async def pending_pod(user: Session, workspace: dict[str, Any]) -> None:
    made = await user.call("POST", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/pods",
                           json=POD)
    assert made.status == 201, await made.text()


async def tenant_with_pod(gateway: Any) -> tuple[Session, dict[str, Any]]:
    user = await register_and_login(gateway)
    workspace = await user.init()
    await pending_pod(user, workspace)
    return user, workspace


def server_of(gateway: Any, workspace: dict[str, Any], base: str | None = None) -> str:
    return (base or str(gateway.make_url("")).rstrip("/")) + f"/k8s/{workspace['id']}"


async def run_kubectl(cluster: LocalCluster, gateway: Any, tmp_path: Path, server: str, token: str, namespace: str,
                      *args: str, ok: bool = False, **env: str) -> str:
    """kubectl through the gateway, with a discovery cache of this test's
    own; unless `ok`, it must fail, and its stderr is returned."""
    config = kubeconfig_for_proxy(tmp_path, server, token, namespace, gateway.ca_file)
    done = await asyncio.to_thread(kubectl, cluster, config, f"--cache-dir={tmp_path / 'kube-cache'}", *args,
                                   env={**os.environ, **env})
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done.stderr


def python_exec(server: str, token: str, ca_file: Path, namespace: str) -> ApiException:
    """The official client's exec (a WebSocket); it must be refused."""
    core = k8s.CoreV1Api(through_gateway(server, token, ca_file))
    with pytest.raises(ApiException) as refused:
        stream(core.connect_get_namespaced_pod_exec, "sleeper", namespace, command=["true"],
               stderr=True, stdin=False, stdout=True, tty=False)
    return refused.value


def python_read(server: str, token: str, ca_file: Path, namespace: str) -> ApiException:
    core = k8s.CoreV1Api(through_gateway(server, token, ca_file))
    with pytest.raises(ApiException) as refused:
        core.read_namespaced_pod("sleeper", namespace)
    return refused.value


def status_of(refused: ApiException) -> tuple[int, str, str]:
    body = json.loads(refused.body)
    assert body["kind"] == "Status" and body["status"] == "Failure", body
    return refused.status, body["reason"], body["message"]


async def clients_show(cluster: LocalCluster, gateway: Any, tmp_path: Path, server: str, token: str,
                       namespace: str, status: int, reason: str, message: str) -> None:
    """kubectl exec, and the Python client's read and exec of the pod, all
    show `message` (kubectl words a 401 its own way around it)."""
    said = await run_kubectl(cluster, gateway, tmp_path, server, token, namespace,
                             "-n", namespace, "exec", "sleeper", "--", "true")
    shown = (f"error: You must be logged in to the server ({message})" if reason == "Unauthorized"
             else f"Error from server ({reason}): {message}")
    assert shown in said, said
    read = await asyncio.to_thread(python_read, server, token, gateway.ca_file, namespace)
    assert status_of(read) == (status, reason, message)
    execed = await asyncio.to_thread(python_exec, server, token, gateway.ca_file, namespace)
    assert f"Handshake status {status}" in execed.reason and message in execed.reason


async def test_another_tenants_pod(cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    """Given a pod of another tenant, when a tenant execs into it naming its
    namespace, then kubectl and the Python client say whose it is."""
    me, mine = await tenant_with_pod(gateway)
    _, theirs = await tenant_with_pod(gateway)
    await clients_show(cluster, gateway, tmp_path, server_of(gateway, mine), me.token, theirs["namespace"],
                       403, "Forbidden", WALL)


async def test_a_suspended_workspace(cluster: LocalCluster, gateway: Any, tmp_path: Path, database_url: str) -> None:
    user, workspace = await tenant_with_pod(gateway)
    server, ns = server_of(gateway, workspace), workspace["namespace"]
    await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, "get", "pod", "sleeper", ok=True)
    root = await admin_session(gateway, database_url)
    assert (await root.call("POST", f"/api/v1/workspaces/{workspace['id']}/suspend")).status == 200
    await clients_show(cluster, gateway, tmp_path, server, user.token, ns, 403, "Forbidden", SUSPENDED)


async def test_an_expired_or_unknown_session(cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    user, workspace = await tenant_with_pod(gateway)
    server, ns = server_of(gateway, workspace), workspace["namespace"]
    await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, "get", "pod", "sleeper", ok=True)
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=3)
    expired, _ = sessions.mint(Secret(SESSION_SECRET), uuid.UUID(user.user_id), uuid.uuid4(), long_ago, 3600)
    for token, message in ((expired, "the session has expired; log in again"), ("not-a-session", "invalid session")):
        await clients_show(cluster, gateway, tmp_path, server, token, ns, 401, "Unauthorized", message)


async def test_spdy_exec_and_port_forward_say_which_setting_switches_to_websockets(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    user, workspace = await tenant_with_pod(gateway)
    server, ns = server_of(gateway, workspace), workspace["namespace"]
    said = await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, "exec", "sleeper", "--", "true",
                             KUBECTL_REMOTE_COMMAND_WEBSOCKETS="false")
    assert f"Error from server (BadRequest): {SPDY_REFUSED}" in said, said
    # kubectl's default: WebSocket first. The API server refuses an exec into
    # a pod without a node; kubectl then falls back to SPDY, so the message
    # above is what it prints, and -v=4 shows the first refusal, as it says.
    said = await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, "-v=4", "exec", "sleeper", "--",
                             "true")
    assert f"Error from server (BadRequest): {SPDY_REFUSED}" in said, said
    # The refusal is the API server's own, its reason included.
    assert "RemoteCommand fallback: unable to upgrade streaming request: " in said, said
    assert "does not have a host assigned" in said, said
    # kubectl forwards only to a Running pod. No kubelet runs here to make it
    # one, so the status is written as a kubelet would write it.
    await asyncio.to_thread(cluster.kubectl_run, "-n", ns, "patch", "pod", "sleeper", "--subresource=status",
                            "--type=merge", "-p", json.dumps({"status": {"phase": "Running"}}))
    said = await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, "port-forward", "pod/sleeper",
                             ":8080", KUBECTL_PORT_FORWARD_WEBSOCKETS="false")
    assert f"error upgrading connection: {SPDY_REFUSED}" in said, said


async def test_a_rate_limit(cluster: LocalCluster, make_gateway: Any, tmp_path: Path) -> None:
    """The per-workspace cap on open streams, held by one open watch. kubectl
    falls back to SPDY when its WebSocket is refused and prints only that
    answer, so the SPDY attempt must carry the cap's message too."""
    gateway = await make_gateway(GATEWAY_MAX_STREAMS_PER_WORKSPACE="1")
    user, workspace = await tenant_with_pod(gateway)
    server, ns = server_of(gateway, workspace), workspace["namespace"]
    watch = await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{ns}/configmaps?watch=true")
    assert watch.status == 200
    message = "this workspace already has 1 open streams (watch, logs, exec, attach, port-forward); close one first"
    try:
        said = await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, "exec", "sleeper", "--", "true")
        assert f"Error from server (TooManyRequests): {message}" in said, said
        execed = await asyncio.to_thread(python_exec, server, user.token, gateway.ca_file, ns)
        assert "Handshake status 429" in execed.reason and message in execed.reason
        answer = await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{ns}/pods/sleeper/exec?command=true",
                                 headers={"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                                          "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        body = await answer.json()
        assert (answer.status, answer.headers["Retry-After"]) == (429, "5")
        assert (body["reason"], body["details"], body["error"]["code"]) == ("TooManyRequests", {"retryAfterSeconds": 5},
                                                                            "rate_limited")
    finally:
        watch.close()


class Cable:
    """A TCP forwarder between the gateway and the real API server (TLS goes
    through it untouched). Unplugging it makes the API server unreachable,
    as a network failure would."""

    def __init__(self, server: str) -> None:
        self._target = yarl.URL(server)
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def plug(self) -> str:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        return f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self._target.host, self._target.port)
        self._writers += [writer, up_writer]

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
            sink.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer), return_exceptions=True)

    async def unplug(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()


async def test_an_unreachable_api_server(cluster: LocalCluster, make_gateway: Any, tmp_path: Path) -> None:
    real = await KubeClient.from_kubeconfig(cluster.gateway_kubeconfig)
    cable = Cable(real.endpoint.server)
    # Tokens come straight from the API server; the pass-through goes through the cable.
    upstream = Upstream(await cable.plug(), real.endpoint.ca_pem)
    try:
        gateway = await make_gateway(upstream=upstream)
        user, workspace = await tenant_with_pod(gateway)
        server, ns = server_of(gateway, workspace), workspace["namespace"]
        await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, "get", "pod", "sleeper", ok=True)
        await cable.unplug()
        await clients_show(cluster, gateway, tmp_path, server, user.token, ns, 503, "ServiceUnavailable",
                           "the Kubernetes API server is unreachable; retry later")
    finally:
        upstream.close()
        await real.close()


async def websocket_watch(gateway: Any, base: str, user: Session, workspace: dict[str, Any]) -> None:
    """A correct upgrade: the client offers a bearer-token subprotocol (never
    relayed) and one the API server accepts."""
    url = (f"{base}/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"
           "?watch=true&timeoutSeconds=1")
    offered = ("base64url.bearer.authorization.k8s.io.bm90LWEtdG9rZW4", "base64.binary.k8s.io")
    async with tls_session(gateway) as session:
        async with session.ws_connect(url, headers=user.bearer, protocols=offered) as socket:
            assert socket.protocol == "base64.binary.k8s.io"
            async for _ in socket:
                pass


async def test_a_correct_upgrade_logs_no_warning(gateway: Any, caplog: pytest.LogCaptureFixture) -> None:
    user = await register_and_login(gateway)
    workspace = await user.init()
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        await websocket_watch(gateway, str(gateway.make_url("")).rstrip("/"), user, workspace)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_gateway_process_log_has_no_warning_after_upgrades_and_refusals(
        cluster: LocalCluster, gateway: Any, gateway_env: dict[str, str], tmp_path: Path) -> None:
    """Read the log of a real gateway process as an operator would: correct
    upgrades (a watch, a real exec into a running pod) and refusals by the
    gateway or the API server are not problems of the gateway, so none of
    them is a warning."""
    me = await new_tenant(cluster, gateway, tmp_path)
    user, workspace, ns = me.session, me.workspace, me.namespace
    running = await me.run_pod("exec sleep 3600")
    await pending_pod(user, workspace)
    _, theirs = await tenant_with_pod(gateway)
    async with gateway_process(gateway, gateway_env) as replica:
        await websocket_watch(gateway, replica.base, user, workspace)
        server = server_of(gateway, workspace, replica.base)
        await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, "exec", running, "--", "true", ok=True)
        for args in (("exec", "sleeper", "--", "true"), ("-n", theirs["namespace"], "exec", "sleeper", "--", "true")):
            await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, *args)
        await run_kubectl(cluster, gateway, tmp_path, server, user.token, ns, "exec", "sleeper", "--", "true",
                          KUBECTL_REMOTE_COMMAND_WEBSOCKETS="false")
    lines = [json.loads(line) for line in replica.log.splitlines() if line.startswith("{")]
    assert lines, replica.log
    assert not [line for line in lines if line["level"] not in ("debug", "info")], replica.log
