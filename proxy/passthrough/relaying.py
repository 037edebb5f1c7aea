"""Relay one HTTP request to the API server and stream the answer back.

Bodies are never buffered whole: the request body is handed to the client
library as a stream, and the response is written chunk by chunk as it
arrives, so a watch event reaches the browser when the API server flushes it.
A 401 from upstream means the cached token went bad (a replaced
ServiceAccount, an early expiry): the token is dropped and a body-less
request is retried once with a fresh one. Requests with bodies are not
replayed: their body has already been streamed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from aiohttp import web

from provisioning.errors import ClusterUnavailable, UpstreamError
from proxy.passthrough.headers import downstream_response_headers, upstream_request_headers
from proxy.passthrough.ticket import Ticket
from proxy.passthrough.upstream import METHODS_GIVEN_A_CONTENT_TYPE, NO_CONTENT_TYPE

_CHUNK = 64 * 1024


class _ShortResponse(web.StreamResponse):
    """A relayed answer to an ordinary request: its headers leave with the
    first piece of the body, as one TLS record and one write, instead of on
    their own (half the segments, and half the wake-ups of the client, for a
    small object). A watch or log stream keeps aiohttp's default, headers at
    once, so the client learns the stream is open before the first event."""

    _send_headers_immediately = False



async def _send(ticket: Ticket, request: web.Request, token: str) -> aiohttp.ClientResponse:
    passthrough = ticket.passthrough
    session = passthrough.upstream.long if ticket.decision.long_running else passthrough.upstream.short
    has_body = request.body_exists and request.method not in ("GET", "HEAD")
    try:
        return await session.request(
            request.method,
            passthrough.upstream.url(ticket.decision.upstream_path, ticket.decision.upstream_query),
            headers=upstream_request_headers(request.headers, token),
            data=request.content.iter_chunked(_CHUNK) if has_body else None,
            allow_redirects=False,
            skip_auto_headers=NO_CONTENT_TYPE if request.method in METHODS_GIVEN_A_CONTENT_TYPE else None,
        )
    except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError) as error:
        raise ClusterUnavailable() from error
    except aiohttp.ClientError as error:
        raise UpstreamError() from error


async def relay_http(request: web.Request, ticket: Ticket) -> web.StreamResponse:
    token = await ticket.token()
    upstream = await _send(ticket, request, token)
    if upstream.status == 401 and not request.body_exists:
        upstream.release()
        ticket.drop_token(token)
        token = await ticket.token()
        upstream = await _send(ticket, request, token)
    if upstream.status == 401:
        ticket.drop_token(token)
    # Recorded as soon as the API server has answered: a client that hangs up
    # while the body streams must not leave its write unaudited.
    ticket.audit_write(upstream.status)
    async with upstream:
        kind = web.StreamResponse if ticket.decision.long_running else _ShortResponse
        response = kind(status=upstream.status, reason=upstream.reason,
                        headers=downstream_response_headers(upstream.headers))
        if ticket.decision.long_running:
            with ticket.passthrough.streams.track(ticket.workspace.id):
                await _stream(request, response, upstream)
        else:
            await _stream(request, response, upstream)
    return response


async def _stream(request: web.Request, response: web.StreamResponse, upstream: aiohttp.ClientResponse) -> None:
    await response.prepare(request)
    try:
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, asyncio.TimeoutError):
        # The API server's answer broke off (a restart, the short session's
        # deadline) or the client left. Break ours off as well: a clean end
        # would hand the client a truncated LIST as if it were complete.
        if request.transport is not None:
            request.transport.close()
        return
    await response.write_eof()


def own_namespace_list(namespace_object: dict[str, Any]) -> dict[str, Any]:
    """`GET /api/v1/namespaces` for a tenant: a list holding only its own."""
    return {
        "kind": "NamespaceList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": namespace_object.get("metadata", {}).get("resourceVersion", "")},
        "items": [namespace_object],
    }


async def relay_namespace_list(request: web.Request, ticket: Ticket) -> web.Response:
    path = f"/api/v1/namespaces/{ticket.workspace.namespace}"
    session = ticket.passthrough.upstream.short
    headers = upstream_request_headers(request.headers, await ticket.token())
    headers["Accept"] = "application/json"
    headers["Accept-Encoding"] = "identity"  # parsed here, so never compressed
    try:
        async with session.get(ticket.passthrough.upstream.url(path, ""), headers=headers,
                               allow_redirects=False) as upstream:
            body = await upstream.read()
            if upstream.status != 200:
                return web.Response(status=upstream.status, body=body,
                                    headers=downstream_response_headers(upstream.headers))
    except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError) as error:
        raise ClusterUnavailable() from error
    return web.json_response(own_namespace_list(json.loads(body)))
