"""A new tenant's first requests at once (one TokenRequest), then warm
requests (no TokenRequest, no database checkout), counted from /metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.stack import Stack


WARM_REQUESTS = 200


async def cold_burst(stack: Stack) -> dict[str, Any]:
    async with stack.session() as session:
        tenant = await stack.new_tenant(session)
        before = await stack.metric(session, 'tenant_gateway_token_requests_total{result="success"}')
        url = f"{stack.gateway_url}/k8s/{tenant.workspace_id}/api/v1/namespaces/{tenant.namespace}/configmaps"
        headers = {"Authorization": f"Bearer {tenant.session_token}"}

        async def one() -> int:
            async with session.get(url, headers=headers) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(one() for _ in range(8)))
        after = await stack.metric(session, 'tenant_gateway_token_requests_total{result="success"}')
        warm_before = after
        # The gateway counts every connection taken from its pool; PostgreSQL's
        # own counters lag by up to 10 s and include the earlier set-up.
        checkouts_before = await stack.metric(session, "tenant_gateway_database_checkouts_total")
        for _ in range(WARM_REQUESTS):
            await one()
        checkouts_after = await stack.metric(session, "tenant_gateway_database_checkouts_total")
        warm_after = await stack.metric(session, 'tenant_gateway_token_requests_total{result="success"}')
    return {"statuses": statuses, "token_requests": after - before, "warm_token_requests": warm_after - warm_before,
            "warm_requests": WARM_REQUESTS, "warm_database_checkouts": checkouts_after - checkouts_before}
