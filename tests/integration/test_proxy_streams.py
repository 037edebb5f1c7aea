"""Long-running streams through the proxy: watches over HTTP and WebSocket,
upgrades and their Origin, and how streams end (suspension on any
replica, a lost event listener, shutdown, a client that leaves)."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import time
import weakref
from typing import Any

import aiohttp
import asyncpg
import pytest

from provisioning.events import LISTENER_APPLICATION_NAME
from proxy.passthrough import http1
from tests.support.gatewayclient import Session, admin_session, tenant
from tests.support.replicas import REPLICAS
from tests.support.watches import open_watch, until_closed

pytestmark = pytest.mark.cluster


async def suspend_while_watching(gateway: Any, database_url: str, user: Session, workspace: dict[str, Any],
                                 stream: aiohttp.ClientResponse) -> float:
    """Suspend through `gateway`; return how long the open watch took to close."""
    root = await admin_session(gateway, database_url)
    closing = asyncio.create_task(until_closed(stream, 10))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    assert (await root.call("POST", f"/api/v1/workspaces/{workspace['id']}/suspend")).status == 200
    await closing
    return time.monotonic() - started


async def test_suspension_cuts_an_open_watch(gateway: Any, database_url: str) -> None:
    user, workspace = await tenant(gateway)
    stream = await open_watch(gateway, user, workspace)
    assert await suspend_while_watching(gateway, database_url, user, workspace, stream) < 3
    refused = await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps")
    assert refused.status == 403 and (await refused.json())["error"]["code"] == "workspace_suspended"


async def test_losing_the_event_listener_cuts_open_streams(gateway: Any, database_url: str) -> None:
    """A stream is authorised once, at its start; a suspension whose event was
    missed while the listener was away must not leave it open. The fault is
    real: PostgreSQL ends the listening backend."""
    user, workspace = await tenant(gateway)
    stream = await open_watch(gateway, user, workspace)
    closing = asyncio.create_task(until_closed(stream, 10))
    await asyncio.sleep(0.3)
    connection = await asyncpg.connect(database_url)
    try:
        ended = await connection.fetchval(
            """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
               WHERE datname = current_database() AND application_name = $1""", LISTENER_APPLICATION_NAME)
    finally:
        await connection.close()
    assert ended == 1
    assert await closing < 5
    # The gateway reconnects its listener; new requests are served as before.
    again = await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps")
    assert again.status == 200


async def test_suspend_on_one_replica_cuts_a_watch_on_another(gateway: Any, second_gateway: str,
                                                              database_url: str) -> None:
    user, workspace = await tenant(gateway)
    stream = await open_watch(gateway, user, workspace, base=second_gateway)
    assert await suspend_while_watching(gateway, database_url, user, workspace, stream) < 3


async def test_websocket_watch_relays_frames_and_the_subprotocol(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    ns = workspace["namespace"]
    url = gateway.make_url(f"/k8s/{workspace['id']}/api/v1/namespaces/{ns}/configmaps").with_query({"watch": "true"})
    async with gateway.session.ws_connect(url, headers=user.bearer, protocols=("base64.binary.k8s.io",)) as ws:
        assert ws.protocol == "base64.binary.k8s.io"
        await user.call("POST", f"/k8s/{workspace['id']}/api/v1/namespaces/{ns}/configmaps",
                        json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "over-ws"}})
        names = []
        async with asyncio.timeout(10):
            async for message in ws:
                text = message.data if isinstance(message.data, str) else message.data.decode()
                event = json.loads(text if text.startswith("{") else base64.b64decode(text))
                names.append(event["object"]["metadata"]["name"])
                if "over-ws" in names:
                    break
        assert "over-ws" in names


async def test_refused_upgrade_leaves_no_tunnel_and_spdy_is_a_clear_4xx(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    exec_path = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/pods/nope/exec?command=sh&stdin=true"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gateway.session.ws_connect(gateway.make_url(exec_path), headers=user.bearer,
                                         protocols=("v5.channel.k8s.io",))
    assert refused.value.status == 404
    spdy = await user.call("POST", exec_path, headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1"})
    assert spdy.status == 400 and (await spdy.json())["error"]["code"] == "spdy_not_supported"
    # A malformed handshake (no Connection: Upgrade, no key) is refused before
    # anything is opened or audited upstream: a 400, not a 500.
    half = await user.call("GET", exec_path, headers={"Upgrade": "websocket"})
    assert half.status == 400 and (await half.json())["error"]["code"] == "bad_websocket_handshake"
    # The namespace list is answered by the gateway itself, upgrade or not.
    namespaces = await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces", headers={"Upgrade": "websocket"})
    assert namespaces.status == 200
    assert [item["metadata"]["name"] for item in (await namespaces.json())["items"]] == [workspace["namespace"]]


async def test_cookie_upgrade_needs_an_allowed_origin(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    url = gateway.make_url(f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps").with_query({"watch": "true"})
    cookies = {"Cookie": f"gw_session={user.token}; gw_csrf={user.csrf}", "Origin": "https://evil.example.test"}
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gateway.session.ws_connect(url, headers=cookies)
    assert refused.value.status == 403


async def test_cookie_upgrade_origin_behind_a_trusted_tls_terminating_proxy(make_gateway: Any) -> None:
    """Behind an ingress the gateway's own scheme is not the browser's; the
    ingress's X-Forwarded-Proto is believed from a trusted peer (the unit
    test of `public_scheme` covers untrusted ones). The test gateway serves
    TLS, so the proxy here claims plain http."""
    behind_proxy = await make_gateway(GATEWAY_TRUSTED_PROXIES="127.0.0.1")
    user, workspace = await tenant(behind_proxy)
    url = behind_proxy.make_url(f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"
                                ).with_query({"watch": "true"})
    headers = {"Cookie": f"gw_session={user.token}; gw_csrf={user.csrf}", "Origin": f"http://{url.host}:{url.port}"}
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await behind_proxy.session.ws_connect(url, headers=headers)
    assert refused.value.status == 403
    async with behind_proxy.session.ws_connect(url, headers={**headers, "X-Forwarded-Proto": "http"}) as socket:
        assert not socket.closed


async def test_shutdown_ends_open_watches_at_once(second_gateway: str, gateway: Any) -> None:
    """SIGTERM on a replica: streams are cut immediately, not after the drain timeout."""
    user, workspace = await tenant(gateway)
    stream = await open_watch(gateway, user, workspace, base=second_gateway)
    replica = REPLICAS[second_gateway]
    closing = asyncio.create_task(until_closed(stream, 15))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    replica.terminate()
    await closing
    assert time.monotonic() - started < 5


async def test_a_watch_the_client_leaves_frees_its_upstream_connection_at_once(gateway: Any) -> None:
    """Its TLS buffers are about 300 KiB: left to the cyclic garbage
    collector, a burst of watches that end stays in memory until the
    collector happens to run."""
    user, workspace = await tenant(gateway)
    gc.collect()
    gc.disable()
    try:
        before = {id(o) for o in gc.get_objects() if isinstance(o, http1._Connection)}
        stream = await open_watch(gateway, user, workspace)
        opened = [weakref.ref(o) for o in gc.get_objects() if isinstance(o, http1._Connection) and id(o) not in before]
        assert len(opened) == 1
        stream.close()
        await stream._test_session.close()  # type: ignore[attr-defined]
        async with asyncio.timeout(10):  # the relay notices the client left and closes its upstream connection
            while opened[0]() is not None:
                await asyncio.sleep(0.05)
    finally:
        gc.enable()
