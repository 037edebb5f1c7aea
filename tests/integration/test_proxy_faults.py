"""Proxy behaviour under upstream faults a real API server cannot be made to
produce on cue (a redirect, a mid-stream close), and client disconnects."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import aiohttp
import pytest

from devstack.cluster import LocalCluster
from proxy.passthrough.upstream import Upstream
from tests.fakes.apiserver import FakeUpstream
from tests.support.gatewayclient import metrics_text, register_and_login, tenant

pytestmark = pytest.mark.cluster


@pytest.fixture
async def fake_upstream(aiohttp_server: Any) -> AsyncIterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    server = await aiohttp_server(fake.app)
    yield fake, str(server.make_url("")).rstrip("/")


async def test_upstream_redirects_are_relayed_never_followed(
        cluster: LocalCluster, make_gateway: Any, fake_upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = fake_upstream
    # The real API server issues the tokens; the FAKE one is the pass-through's upstream.
    upstream = Upstream(url, None)
    try:
        setup = await make_gateway()
        user = await register_and_login(setup)
        workspace = await user.init()
        gateway = await make_gateway(upstream=upstream)
        user.client = gateway
        answer = await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps/redirect-me",
                                 allow_redirects=False)
        assert answer.status == 302
        assert fake.hits == [f"/api/v1/namespaces/{workspace['namespace']}/configmaps/redirect-me"]

        # ws_connect has no allow_redirects: the upgrade is refused, not chased to the secrets.
        base = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await gateway.session.ws_connect(gateway.make_url(f"{base}/pods/p/exec/redirect-me"),
                                             headers=user.bearer, protocols=("v5.channel.k8s.io",))
        assert refused.value.status == 502
        assert fake.hits[-1].endswith("/redirect-me") and not any("secrets" in hit for hit in fake.hits)
        # A bearer token offered as a subprotocol never reaches the API server.
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await gateway.session.ws_connect(
                gateway.make_url(f"{base}/pods/p/exec"), headers=user.bearer,
                protocols=("v5.channel.k8s.io", "base64url.bearer.authorization.k8s.io.c29tZW9uZS1lbHNl"))
        assert fake.offered_subprotocols[-1] == "v5.channel.k8s.io"

        # An answer the upstream breaks off mid-body is broken off for the
        # client too, never ended cleanly as if complete; the open-stream
        # gauge returns to zero.
        collection = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"
        for query in ("?watch=1", ""):
            answer = await user.call("GET", collection + query)
            assert (await answer.content.readline()).startswith(b'{"type":"ADDED"')
            with pytest.raises(aiohttp.ClientPayloadError):
                await answer.read()
        await asyncio.sleep(0.1)
        assert 'tenant_gateway_proxy_open_streams 0.0' in await metrics_text(gateway)
    finally:
        upstream.close()


async def test_client_disconnect_closes_the_upstream_watch(cluster: LocalCluster, gateway: Any) -> None:
    user, workspace = await tenant(gateway)  # heard provisioned: its event cannot cut the watch
    path = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps?watch=1"
    watch = await user.call("GET", path)
    assert watch.status == 200
    await asyncio.sleep(0.3)
    metrics = await metrics_text(gateway)
    assert "tenant_gateway_proxy_open_streams 1.0" in metrics
    watch.close()  # the client goes away mid-watch
    for _ in range(50):
        await asyncio.sleep(0.1)
        if "tenant_gateway_proxy_open_streams 0.0" in await metrics_text(gateway):
            return
    raise AssertionError("the relay kept the upstream watch open after the client left")
