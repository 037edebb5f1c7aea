"""Streams into real pods, attacked: another tenant's pod, a pod that does not
exist, malformed WebSocket frames, clients that vanish, an exec whose audit
row cannot be written, and streams that must end when the workspace is
suspended (on every replica)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devstack.cluster import LocalCluster
from tests.support.databases import stop_postgres
from tests.support.gatewayclient import admin_session
from tests.support.pods import Tenant, new_tenant, read_until
from tests.support.gatewayclient import metric, metrics_text
from tests.support.pods import HTTP_SERVER, STDIN, exec_url, forwarded_port

pytestmark = pytest.mark.cluster


async def test_exec_into_another_tenants_pod_is_refused_by_the_gateway(
        cluster: LocalCluster, gateway: Any, tenant: Tenant, tmp_path: Path, database_url: str) -> None:
    victim = await new_tenant(cluster, gateway, tmp_path)
    pod = await victim.run_pod("exec sleep 3600")
    for argv in (("exec", "-n", victim.namespace, pod, "--", "id"), ("attach", "-n", victim.namespace, pod),
                 ("port-forward", "-n", victim.namespace, pod, ":8080")):
        refused = await tenant.kubectl(*argv, timeout=30)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), (argv, refused.stderr)
    foreign = exec_url(tenant, pod, ["id"], tty=False).replace(f"/namespaces/{tenant.namespace}/",
                                                                 f"/namespaces/{victim.namespace}/")
    with pytest.raises(aiohttp.WSServerHandshakeError) as handshake:
        await gateway.session.ws_connect(foreign, headers=tenant.session.bearer, protocols=("v5.channel.k8s.io",))
    assert handshake.value.status == 403
    root = await admin_session(gateway, database_url)
    rows = await (await root.call("GET", f"/api/v1/audit?user_id={tenant.session.user_id}&action=ProxyExec")).json()
    assert rows == []  # refused before anything was opened


async def test_exec_into_a_missing_pod_gets_the_api_servers_answer(tenant: Tenant, gateway: Any) -> None:
    missing = await tenant.kubectl("exec", "no-such-pod", "--", "id", timeout=30)
    assert missing.returncode != 0 and 'pods "no-such-pod" not found' in missing.stderr, missing.stderr
    with pytest.raises(aiohttp.WSServerHandshakeError) as handshake:
        await gateway.session.ws_connect(exec_url(tenant, "no-such-pod", ["id"], tty=False),
                                         headers=tenant.session.bearer, protocols=("v5.channel.k8s.io",))
    assert handshake.value.status == 404


async def open_cat(tenant: Tenant, gateway: Any, pod: str) -> aiohttp.ClientWebSocketResponse:
    socket = await gateway.session.ws_connect(exec_url(tenant, pod, ["cat"], tty=False),
                                              headers=tenant.session.bearer, protocols=("v5.channel.k8s.io",))
    await socket.send_bytes(bytes([STDIN]) + b"alive\n")
    echoed = b""
    async with asyncio.timeout(30):
        while echoed != b"alive\n":  # the API server opens each channel with an empty frame
            message = await socket.receive()
            assert message.type == aiohttp.WSMsgType.BINARY, message
            echoed += message.data[1:]
    return socket  # type: ignore[no-any-return]


async def cat_processes(tenant: Tenant, pod: str) -> list[str]:
    listed = await tenant.kubectl("exec", pod, "--", "ps", "-o", "comm")
    return [name for name in listed.stdout.split() if name == "cat"]


async def until(probe: Any, limit: float = 20) -> None:
    async with asyncio.timeout(limit):
        while not await probe():
            await asyncio.sleep(0.2)


@pytest.mark.parametrize("fault", ["malformed frame", "vanished client"])
async def test_a_broken_client_ends_its_stream_and_frees_the_pod_side(tenant: Tenant, gateway: Any,
                                                                      fault: str) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    socket = await open_cat(tenant, gateway, pod)
    assert await cat_processes(tenant, pod) == ["cat"]
    transport = socket._response.connection.transport  # type: ignore[union-attr]
    assert transport is not None
    if fault == "malformed frame":
        # FIN + a reserved opcode, unmasked: a protocol error (RFC 6455 5.2, 5.3).
        transport.write(b"\x83\x05hello")
        async with asyncio.timeout(30):
            closing = await socket.receive()
        assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
    else:
        transport.abort()

    async def freed() -> bool:
        return metric(await metrics_text(gateway), "tenant_gateway_proxy_open_streams") == 0

    await until(freed)
    await until(lambda: _none(cat_processes(tenant, pod)))  # the upstream leg closed: cat saw EOF
    failures = metric(await metrics_text(gateway), 'tenant_gateway_requests_total{route="proxy",status="5')
    assert failures == 0
    await socket.close()


async def _none(listing: Any) -> bool:
    return not await listing


async def test_no_audit_row_no_exec(migrated_own_postgres: Any, make_gateway: Any, cluster: LocalCluster,
                                    tmp_path: Path) -> None:
    client = await make_gateway(GATEWAY_DATABASE_URL=migrated_own_postgres.get_uri())
    tenant = await new_tenant(cluster, client, tmp_path)
    pod = await tenant.run_pod("exec sleep 3600")
    await stop_postgres(migrated_own_postgres)
    with pytest.raises(aiohttp.WSServerHandshakeError) as handshake:
        await client.session.ws_connect(exec_url(tenant, pod, ["touch", "/tmp/ran"], tty=False),
                                        headers=tenant.session.bearer, protocols=("v5.channel.k8s.io",))
    assert handshake.value.status == 503
    # Looked at with the cluster's own admin credential: the command never ran.
    looked = await asyncio.to_thread(cluster.kubectl_run, "exec", "-n", tenant.namespace, pod, "--",
                                     "ls", "/tmp/ran", check=False)
    assert looked.returncode != 0 and "No such file" in looked.stdout + looked.stderr


async def test_suspension_cuts_exec_attach_port_forward_and_logs(tenant: Tenant, gateway: Any,
                                                                 database_url: str) -> None:
    pod = await tenant.run_pod(HTTP_SERVER + " & i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.3; done",
                               stdin=True)
    execing = await tenant.spawn("exec", "-i", pod, "--", "cat")
    following = await tenant.spawn("logs", "-f", pod)
    forwarding = await tenant.spawn("port-forward", pod, ":8080")
    attached = await tenant.spawn("attach", pod)
    assert following.stdout is not None and attached.stdout is not None
    await read_until(following.stdout, b"tick-")
    await forwarded_port(forwarding)
    await read_until(attached.stdout, b"tick-")
    assert execing.stdin is not None and execing.stdout is not None
    execing.stdin.write(b"still here\n")
    await execing.stdin.drain()
    await read_until(execing.stdout, b"still here")

    root = await admin_session(gateway, database_url)
    started = time.monotonic()
    suspending = asyncio.create_task(root.call("POST", f"/api/v1/workspaces/{tenant.workspace['id']}/suspend"))
    processes = (execing, following, forwarding, attached)
    await asyncio.wait_for(asyncio.gather(*(process.wait() for process in processes)), 30)
    assert time.monotonic() - started < 5  # the contract's bound, from the moment the admin asked
    assert (await suspending).status == 200
    refused = await tenant.kubectl("exec", pod, "--", "id", timeout=30)
    assert refused.returncode != 0


async def test_suspension_cuts_an_exec_on_another_replica(tenant: Tenant, gateway: Any,
                                                          second_gateway: str,
                                                          database_url: str) -> None:
    pod = await tenant.run_pod("exec sleep 3600")
    other = tenant.server.replace(str(gateway.make_url("")).rstrip("/"), second_gateway)
    execing = await tenant.spawn(f"--server={other}", "exec", "-i", pod, "--", "cat")
    assert execing.stdin is not None and execing.stdout is not None
    execing.stdin.write(b"on the other replica\n")
    await execing.stdin.drain()
    await read_until(execing.stdout, b"on the other replica")
    root = await admin_session(gateway, database_url)
    assert (await root.call("POST", f"/api/v1/workspaces/{tenant.workspace['id']}/suspend")).status == 200
    await asyncio.wait_for(execing.wait(), 30)
