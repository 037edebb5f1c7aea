"""The web-session proxy against the real API server: real kubectl, the
official Python client, raw HTTP and WebSocket clients."""

from __future__ import annotations

import asyncio
import base64
import gc
import gzip
import json
import re
import subprocess
import time
import uuid
import weakref
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
import asyncpg
import pytest
from kubernetes import client as k8s, watch
from yarl import URL

from devstack.cluster import LocalCluster
from provisioning.events import LISTENER_APPLICATION_NAME
from proxy.passthrough import http1
from tests.gatewayclient import Session, admin_session, register_and_login
from tests.kubeclients import kubeconfig_for_proxy, kubectl, through_gateway
from tests.replicas import tls_session
from tests.watches import open_watch, until_closed
from tests.gatewayclient import metric, metrics_text, tenant
from tests.replicas import REPLICAS

pytestmark = pytest.mark.cluster


def proxy_url(gateway: Any, workspace: dict[str, Any]) -> str:
    return str(gateway.make_url(f"/k8s/{workspace['id']}"))


async def test_kubectl_through_the_proxy(cluster: LocalCluster, gateway: Any, tmp_path: Path,
                                        database_url: str) -> None:
    user, workspace = await tenant(gateway)
    ns = workspace["namespace"]
    config = kubeconfig_for_proxy(tmp_path, proxy_url(gateway, workspace), user.token, ns, gateway.ca_file)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return kubectl(cluster, config, *args)

    created = await asyncio.to_thread(run, "create", "configmap", "via-proxy", "--from-literal=k=v")
    assert created.returncode == 0, created.stderr
    got = await asyncio.to_thread(run, "get", "configmap", "via-proxy", "-o", "jsonpath={.data.k}")
    assert got.stdout == "v", got.stderr
    listed = await asyncio.to_thread(run, "get", "namespaces", "-o", "name")
    assert listed.stdout.split() == [f"namespace/{ns}"], listed.stderr
    assert (await asyncio.to_thread(run, "get", "namespace", ns, "-o", "name")).stdout.strip() == f"namespace/{ns}"
    for refused in (("get", "nodes"), ("-n", "default", "get", "configmaps"), ("get", "pods", "-A"),
                    ("create", "namespace", "mine-too"), ("get", "clusterroles")):
        answer = await asyncio.to_thread(run, *refused)
        assert answer.returncode != 0 and "forbidden" in answer.stderr.lower(), (refused, answer.stderr)
    deleted = await asyncio.to_thread(run, "delete", "configmap", "via-proxy")
    assert deleted.returncode == 0, deleted.stderr
    discovery = await asyncio.to_thread(run, "api-resources", "--namespaced=true", "-o", "name")
    assert "configmaps" in discovery.stdout.split()
    # Writes are audited with the human identity; reads are only counted.
    await asyncio.sleep(0.6)
    root = await admin_session(gateway, database_url)
    rows = await (await root.call("GET", f"/api/v1/audit?workspace_id={workspace['id']}&action=ProxyWrite")).json()
    assert {(r["details"]["method"], r["user_id"]) for r in rows} == {("POST", user.user_id), ("DELETE", user.user_id)}


async def test_official_python_client_and_watch(cluster: LocalCluster, gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    ns = workspace["namespace"]
    core = k8s.CoreV1Api(through_gateway(proxy_url(gateway, workspace), user.token, gateway.ca_file))

    seen: list[tuple[str, float]] = []

    def watch_configmaps() -> None:
        stream = watch.Watch()
        for event in stream.stream(core.list_namespaced_config_map, ns, timeout_seconds=20):
            name = event["object"].metadata.name
            if name.startswith("w-"):
                seen.append((name, time.monotonic()))
            if len(seen) == 3:
                stream.stop()

    watcher = asyncio.create_task(asyncio.to_thread(watch_configmaps))
    await asyncio.sleep(1.0)
    made_at = {}
    for i in range(3):
        name = f"w-{i}"
        made_at[name] = time.monotonic()
        await asyncio.to_thread(core.create_namespaced_config_map, ns, {"metadata": {"name": name}})
        await asyncio.sleep(0.2)
    await asyncio.wait_for(watcher, 30)
    assert [n for n, _ in seen] == ["w-0", "w-1", "w-2"]
    assert all(at - made_at[name] < 1.0 for name, at in seen)
    names = [c.metadata.name for c in (await asyncio.to_thread(core.list_namespaced_config_map, ns)).items]
    assert {"w-0", "w-1", "w-2"} <= set(names)
    await asyncio.to_thread(core.delete_namespaced_config_map, "w-0", ns)


async def test_identity_is_the_tenant_service_account_whatever_the_client_sends(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    hostile = {
        "Impersonate-User": "system:admin", "Impersonate-Group": "system:masters",
        "Impersonate-Uid": "0", "Impersonate-Extra-Scopes": "all",
        "X-Remote-User": "system:admin", "X-Remote-Group": "system:masters",
        "Connection": "X-Remote-Extra-Foo", "X-Remote-Extra-Foo": "bar",
        "Cookie": "gw_session=stolen",
    }
    answer = await user.call("POST", f"/k8s/{workspace['id']}/apis/authentication.k8s.io/v1/selfsubjectreviews",
                             json=review, headers=hostile)
    assert answer.status == 201, await answer.text()
    info = (await answer.json())["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{workspace['namespace']}:sa-tenant-admin"
    assert "system:masters" not in info["groups"]


@pytest.mark.parametrize("method, path", [
    ("GET", "/api/v1/namespaces/kube-system/secrets"),
    ("GET", "/api/v1/namespaces/OTHER/configmaps"),
    ("POST", "/api/v1/namespaces/OTHER/configmaps"),
    ("GET", "/api/v1/nodes"),
    ("GET", "/api/v1/pods"),
    ("DELETE", "/api/v1/namespaces/OWN"),
    ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
    ("GET", "/api/v1/namespaces/OWN/../kube-system/secrets"),
    ("GET", "/api/v1/namespaces/OWN%2F..%2Fkube-system/secrets"),
    ("GET", "/api/v1/namespaces/OWN/configmaps/%2e%2e/%2e%2e/kube-system"),
    ("GET", "//api/v1/namespaces/kube-system/secrets"),
    ("GET", "/api/v1/watch/namespaces/kube-system/secrets"),
    ("GET", "/logs/"),
    ("GET", "/debug/pprof/"),
])
async def test_tenant_wall_refuses_before_the_api_server(gateway: Any, method: str, path: str) -> None:
    user, workspace = await tenant(gateway)
    other = f"tenant-{uuid.uuid4()}"
    path = path.replace("OWN", workspace["namespace"]).replace("OTHER", other)
    url = gateway.make_url(f"/k8s/{workspace['id']}").with_path(f"/k8s/{workspace['id']}{path}", encoded=True)
    answer = await gateway.session.request(method, url, headers=user.bearer, json={} if method == "POST" else None)
    assert answer.status in (403, 404), await answer.text()
    assert "error" in await answer.json()
    # Nothing was sent upstream: no tenant token was ever needed.
    assert metric(await metrics_text(gateway), "tenant_gateway_token_requests_total") == 0


async def test_the_query_reaches_the_api_server_exactly_as_sent(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    base = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"
    made = await user.call("POST", base, json={"apiVersion": "v1", "kind": "ConfigMap",
                                               "metadata": {"name": "q", "labels": {"v": "t"}}})
    assert made.status == 201

    async def select(raw_query: str) -> aiohttp.ClientResponse:
        url = URL(f"{gateway.make_url(base)}?{raw_query}", encoded=True)
        return await gateway.session.get(url, headers=user.bearer)

    # `%2574` is a literal "%74": decoded twice on the way it would become "t"
    # and select the ConfigMap; the API server must see the invalid "v=%74".
    assert (await select("labelSelector=v%3D%2574")).status == 400
    matched = await select("labelSelector=v%3Dt")
    assert matched.status == 200 and [i["metadata"]["name"] for i in (await matched.json())["items"]] == ["q"]
    plus = await select("labelSelector=v%3Dt%2Bx")  # "+" kept encoded: never read as a space
    assert plus.status == 400


async def test_one_token_request_serves_many_requests_and_a_cold_burst(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    path = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"
    burst = await asyncio.gather(*(user.call("GET", path) for _ in range(8)))
    assert [r.status for r in burst] == [200] * 8
    checkouts = metric(await metrics_text(gateway), "tenant_gateway_database_checkouts_total")
    for _ in range(20):
        assert (await user.call("GET", path)).status == 200
    text = await metrics_text(gateway)
    assert metric(text, 'tenant_gateway_token_requests_total{result="success"}') == 1
    assert metric(text, "tenant_gateway_token_cache_hits_total") >= 20
    # Warm requests are served from the session, workspace and token caches alone.
    assert metric(text, "tenant_gateway_database_checkouts_total") == checkouts


async def test_cookie_sessions_need_csrf_for_proxied_writes(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    path = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"
    cookies = {"Cookie": f"gw_session={user.token}; gw_csrf={user.csrf}"}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert (await gateway.get(path, headers=cookies)).status == 200
    assert (await gateway.post(path, json=body, headers=cookies)).status == 403
    ok = await gateway.post(path, json=body, headers={**cookies, "X-CSRF-Token": user.csrf})
    assert ok.status == 201, await ok.text()


async def test_someone_elses_workspace_is_not_found(gateway: Any) -> None:
    _, workspace = await tenant(gateway)
    intruder = await register_and_login(gateway)
    answer = await intruder.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps")
    assert answer.status == 404
    async with tls_session(gateway) as fresh:  # no cookies from earlier logins
        anonymous = await fresh.get(gateway.make_url(f"/k8s/{workspace['id']}/version"))
        assert anonymous.status == 401


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


async def test_gzip_is_passed_through_untouched(gateway: Any) -> None:
    user, workspace = await tenant(gateway)
    ns = workspace["namespace"]
    # The API server compresses only responses over 128 KiB.
    await asyncio.gather(*(
        user.call("POST", f"/k8s/{workspace['id']}/api/v1/namespaces/{ns}/configmaps",
                  json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"z-{i}"},
                        "data": {"v": "x" * 4096}})
        for i in range(40)))
    async with tls_session(gateway, auto_decompress=False) as plain:
        raw = await plain.get(gateway.make_url(f"/k8s/{workspace['id']}/api/v1/namespaces/{ns}/configmaps"),
                              headers={**user.bearer, "Accept-Encoding": "gzip"})
        assert raw.headers.get("Content-Encoding") == "gzip"
        assert raw.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
        body = await raw.read()

    assert len(json.loads(gzip.decompress(body))["items"]) >= 40
    assert re.match(rb"\x1f\x8b", body)


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


async def test_relay_framing_against_the_real_api_server(gateway: Any) -> None:
    """The relay's own HTTP/1.1 client (proxy.passthrough.http1) with the
    framings the real API server uses: a chunked upload, an answer to HEAD,
    a large chunked answer read slowly, and many requests on kept-alive
    connections."""
    user, workspace = await tenant(gateway)
    ns = workspace["namespace"]
    base = f"/k8s/{workspace['id']}/api/v1/namespaces/{ns}/configmaps"

    async def chunked_body() -> AsyncIterator[bytes]:
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chunked"},
                           "data": {"v": "y" * 70_000}}).encode()
        for start in range(0, len(body), 16_384):
            yield body[start:start + 16_384]

    created = await user.call("POST", base, data=chunked_body(), headers={"Content-Type": "application/json"})
    assert created.status == 201, await created.text()

    # The API server refuses HEAD (405, with a Content-Length and no body):
    # relayed as such, and the next request is not confused by it.
    head = await user.call("HEAD", f"{base}/chunked")
    assert head.status == 405 and await head.read() == b""
    assert (await user.call("GET", f"{base}/chunked")).status == 200

    # ~800 KiB in 45 objects: the basic tier holds 50 ConfigMaps.
    await asyncio.gather(*(
        user.call("POST", base, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"big-{i}"},
                                      "data": {"v": "z" * 18_000}})
        for i in range(45)))
    listing = await user.call("GET", base)
    received = bytearray()
    while piece := await listing.content.read(16_384):
        received += piece
        await asyncio.sleep(0.002)  # a slow client: the relay must hold the API server back, not drop bytes
    names = {item["metadata"]["name"] for item in json.loads(received)["items"]}
    assert {f"big-{i}" for i in range(45)} | {"chunked"} <= names

    answers = await asyncio.gather(*(user.call("GET", f"{base}/big-{i % 45}") for i in range(200)))
    assert {a.status for a in answers} == {200}
    assert {json.loads(await a.read())["metadata"]["name"] for a in answers} == {f"big-{i}" for i in range(45)}
