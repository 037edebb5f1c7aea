"""The pass-through through its test seams (proxy.app.create_app): a FAKE
token issuer (`kube`), a FAKE API server as the pass-through's upstream
(`upstream`) and a clock the test moves (`clock`). They show on cue what
the real components take an hour to show: a tenant token is reused until
its refresh point on the gateway's clock, then renewed; and what reaches
the API server is that token alone, never the client's credential."""

from __future__ import annotations

import datetime
import uuid
from typing import Any, AsyncIterator

import pytest
from aiohttp import web

from provisioning.db import repositories as repo
from provisioning.kube.client import ClusterEndpoint
from provisioning.models import AuditEvent
from proxy import keys
from proxy.passthrough.upstream import Upstream
from tests.gatewayclient import register_and_login


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class FakeTokenIssuer:
    """A FAKE gateway client: it answers TokenRequests only, each with a new
    token that lives an hour."""

    endpoint = ClusterEndpoint("https://127.0.0.1:1", None)
    ca_base64 = ""

    def __init__(self) -> None:
        self.issued: list[str] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert path.endswith("/serviceaccounts/sa-tenant-admin/token")
        self.issued.append(f"token-{len(self.issued) + 1}")
        expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        return {"status": {"token": self.issued[-1], "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}


@pytest.fixture
async def api_server(aiohttp_server: Any) -> AsyncIterator[tuple[list[dict[str, str]], Upstream]]:
    """A FAKE API server that answers every request with an empty list and
    keeps the headers it was sent."""
    seen: list[dict[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"kind": "ConfigMapList", "items": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    server = await aiohttp_server(app)
    upstream = Upstream(str(server.make_url("")), None)
    yield seen, upstream
    upstream.close()


async def test_a_tenant_token_is_renewed_at_its_refresh_point_on_the_gateways_clock(
        make_gateway: Any, api_server: tuple[list[dict[str, str]], Upstream]) -> None:
    seen, upstream = api_server
    issuer, clock = FakeTokenIssuer(), Clock()
    gateway = await make_gateway(kube=issuer, upstream=upstream, clock=clock)
    user = await register_and_login(gateway)
    db = gateway.server.app[keys.DATABASE]
    namespace = f"tenant-{user.user_id}"
    workspace, _ = await repo.claim_workspace(db, uuid.UUID(user.user_id), namespace, "sa-tenant-admin", "basic")
    await repo.finish_provisioning(db, workspace.id, "uid-1", AuditEvent("WorkspaceProvisioned", workspace.user_id,
                                                                         workspace.id, None, {}))
    path = f"/k8s/{workspace.id}/api/v1/namespaces/{namespace}/configmaps"

    async def get() -> str:
        answer = await gateway.get(path, headers={**user.bearer, "Impersonate-User": "admin",
                                                  "X-Remote-User": "admin"})
        assert answer.status == 200, await answer.text()
        sent = seen[-1]
        assert not [name for name in sent if name.lower().startswith(("impersonate-", "x-remote-"))]
        return sent["Authorization"]

    assert await get() == await get() == "Bearer token-1"
    # An hour's token is renewed when 10 minutes are left (the proxy's refresh margin): not a second before.
    clock.now += 3000 - 1
    assert await get() == "Bearer token-1"
    clock.now += 1
    assert await get() == "Bearer token-2"
    assert issuer.issued == ["token-1", "token-2"]
