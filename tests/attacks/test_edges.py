"""Given a tenant that abuses the gateway's shared resources (a flood of
credentials or streams, its pods reading the gateway's metrics), then the
answer is the contract's 4xx and nobody else's requests are harmed. The
edges that need no cluster (bodies, strings, forwarding headers) are in
tests/component/test_inputs.py."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from proxy import keys
from tests.support.gatewayclient import error_of
from tests.support.watches import open_watch
from tests.support.gatewayclient import metrics_text, tenant

pytestmark = pytest.mark.cluster


async def test_kubeconfig_issuance_is_rate_limited_per_user(make_gateway: Any) -> None:
    gateway = await make_gateway(GATEWAY_RATE_KUBECONFIG="2/3600")
    user, _workspace = await tenant(gateway)
    for _ in range(2):
        await user.kubeconfig()
    refused = await user.call("GET", "/api/v1/workspaces/credentials/kubeconfig")
    assert await error_of(refused) == (429, "rate_limited")
    assert int(refused.headers["Retry-After"]) > 0
    other, _ = await tenant(gateway)  # per user: another user is not held back
    await other.kubeconfig()


async def test_one_stream_too_many_is_429_on_every_replica_and_cuts_nothing(make_gateway: Any) -> None:
    gateway = await make_gateway(GATEWAY_MAX_STREAMS_PER_WORKSPACE="2")
    replica = await make_gateway(GATEWAY_MAX_STREAMS_PER_WORKSPACE="2")  # same database: a second replica
    user, workspace = await tenant(gateway)
    # One stream on each replica: behind a load balancer, a cap per replica
    # would let the tenant open twice as many.
    first = await open_watch(gateway, user, workspace)
    second = await open_watch(gateway, user, workspace, base=str(replica.make_url("")))
    try:
        path = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps?watch=true"
        for via in (gateway, replica):
            refused = await via.get(path, headers=user.bearer)
            assert refused.status == 429 and int(refused.headers["Retry-After"]) > 0
            assert (await refused.json())["error"]["code"] == "rate_limited"
        # Short requests are not streams; the open watches still deliver.
        made = await user.call("POST", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps",
                               json={"metadata": {"name": "seen"}})
        assert made.status == 201
        for stream in (first, second):  # after any ADDED for what was there before (kube-root-ca.crt)
            while b'"seen"' not in (line := await asyncio.wait_for(stream.content.readline(), 30)):
                assert line, "the watch ended before delivering the new ConfigMap"
        # Another workspace has slots of its own.
        other_user, other = await tenant(gateway)
        third = await open_watch(gateway, other_user, other)
        third.close()
        await third._test_session.close()  # type: ignore[attr-defined]
    finally:
        for stream in (first, second):
            stream.close()
            await stream._test_session.close()  # type: ignore[attr-defined]


async def test_a_tenant_reaching_the_gateway_cannot_read_its_metrics(gateway: Any) -> None:
    """What a tenant's pod reaches is the public listener; the metrics (every
    tenant's request counts, streams and token results) are not there."""
    user, workspace = await tenant(gateway)
    await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps")
    for path in ("/metrics", "/metrics/", "/Metrics", "/k8s/metrics"):
        answer = await gateway.get(path)
        assert answer.status == 404, path
        assert "tenant_gateway_" not in await answer.text(), path
    # The metrics listener has them, and nothing else.
    assert "tenant_gateway_requests_total" in await metrics_text(gateway)
    host, port = gateway.app[keys.METRICS_ADDRESS]
    async with aiohttp.ClientSession() as session:
        for path in ("/healthz", "/api/v1/me", f"/k8s/{workspace['id']}/api"):
            async with session.get(f"http://{host}:{port}{path}", headers=user.bearer) as answer:
                assert answer.status == 404, path
