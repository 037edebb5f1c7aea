"""A proxied write with no room for its audit row is refused before it
reaches the API server (503 `audit_unavailable`, Retry-After), never
carried out unaudited.

Through the gateway's /k8s/ proxy, with the FAKE API server of the seams
(it records what reaches it; the real one cannot be asked) and the real
PostgreSQL, made to hold the audit writer back by a real
`LOCK TABLE audit_logs` from another connection.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
from aiohttp import web

from proxy import keys
from tests.fakes.apiserver import FakeAPIServer
from tests.fakes.kube import FakeTokenIssuer
from tests.support.gatewayclient import k8s_error, metric, metrics_text, provisioned_workspace


async def test_a_write_with_no_room_for_its_audit_row_is_refused_before_the_api_server_sees_it(
        make_gateway: Any, fake_api_server: FakeAPIServer, database_url: str) -> None:  # noqa: F811
    """The queue has one place. The table is locked, so the first write's
    row cannot be stored and keeps that place. The second write waits for
    a place, is refused 503 with Retry-After, and never reaches the API
    server. Once the lock goes, the first write's row is stored, and
    writes go through again: every write that reached the API server has
    its row."""
    reached: list[str] = []

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        reached.append(body["metadata"]["name"])
        return web.json_response({"kind": "ConfigMap", **body}, status=201)

    server, _upstream = await fake_api_server(create)
    gateway = await make_gateway(kube=FakeTokenIssuer(str(server.make_url("")).rstrip("/")),
                                 GATEWAY_AUDIT_QUEUE_ROWS="1", GATEWAY_AUDIT_WAIT_SECONDS="0.5")
    user, path = await provisioned_workspace(gateway)

    async def post(name: str) -> Any:
        return await gateway.post(path, json={"metadata": {"name": name}}, headers=user.bearer)

    locker = await asyncpg.connect(database_url)
    try:
        lock = locker.transaction()
        await lock.start()
        await locker.execute("LOCK TABLE audit_logs")
        assert (await post("first")).status == 201
        refused = await post("second")
        assert await k8s_error(refused) == (503, "audit_unavailable")
        assert refused.headers["Retry-After"] == "1"
        assert reached == ["first"]
        await lock.commit()
    finally:
        await locker.close()
    db = gateway.server.app[keys.DATABASE]
    audit = gateway.server.app[keys.AUDIT]
    async with asyncio.timeout(30):
        while audit.queue.taken:
            await asyncio.sleep(0.05)
    assert (await post("third")).status == 201
    assert reached == ["first", "third"]
    async with asyncio.timeout(30):
        while audit.queue.taken:
            await asyncio.sleep(0.05)
    rows = await db.fetch("SELECT details FROM audit_logs WHERE action = 'ProxyWrite' AND user_id = $1",
                          uuid.UUID(user.user_id))
    assert sorted(json.loads(r["details"])["status"] for r in rows) == [201, 201]
    scraped = await metrics_text(gateway.server)
    assert metric(scraped, "tenant_gateway_audit_refusals_total") == 1
    assert metric(scraped, 'tenant_gateway_audit_rows_total{outcome="stored"}') == 2
    assert metric(scraped, "tenant_gateway_audit_queue_taken") == 0
