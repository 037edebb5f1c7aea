"""What reaches the API server through the proxy and what comes back: real
kubectl and the official Python client, the query as sent, gzip untouched,
the relay's framing, one TokenRequest for many requests."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
import pytest
from kubernetes import client as k8s, watch
from yarl import URL

from devstack.cluster import LocalCluster
from tests.support.gatewayclient import admin_session, metric, metrics_text, tenant
from tests.support.kubeclients import kubeconfig_for_proxy, kubectl, through_gateway
from tests.support.replicas import tls_session

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


# The upload below is one ConfigMap past the built-in tier's 64 KiB cap.
ROOMY_TIERS = "basic: {hard: {requests.cpu: '4', limits.memory: 8Gi}, objectBytes: {configMap: 128Ki}}"


async def test_relay_framing_against_the_real_api_server(make_gateway: Any) -> None:
    """The relay's own HTTP/1.1 client (proxy.passthrough.http1) with the
    framings the real API server uses: a chunked upload, an answer to HEAD,
    a large chunked answer read slowly, and many requests on kept-alive
    connections."""
    user, workspace = await tenant(await make_gateway(tiers=ROOMY_TIERS))
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
