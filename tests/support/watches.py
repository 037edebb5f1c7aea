"""Watches through the gateway, as a web UI opens them: opened, then read
until the gateway (or the test) closes them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from tests.support.gatewayclient import Session
from tests.support.replicas import tls_session


async def open_watch(gateway: Any, user: Session, workspace: dict[str, Any], base: str | None = None) -> aiohttp.ClientResponse:
    path = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps?watch=true"
    session = tls_session(gateway, timeout=aiohttp.ClientTimeout(total=None))
    response = await session.get((base or str(gateway.make_url(""))).rstrip("/") + path, headers=user.bearer)
    response._test_session = session  # type: ignore[attr-defined]
    assert response.status == 200
    return response


async def until_closed(response: aiohttp.ClientResponse, limit: float) -> float:
    start = time.monotonic()
    try:
        async with asyncio.timeout(limit):
            async for _ in response.content.iter_any():
                pass
    except aiohttp.ClientPayloadError:
        pass  # the gateway cut the chunked stream: exactly what suspension does
    finally:
        response.close()
        await response._test_session.close()  # type: ignore[attr-defined]
    return time.monotonic() - start
