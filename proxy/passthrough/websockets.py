"""WebSocket relay for exec, attach, port-forward (and watches over WebSocket).

The upstream handshake happens first, with the client's subprotocols offered
verbatim (`v5.channel.k8s.io`, `v4.channel.k8s.io`,
`SPDY/3.1+portforward.k8s.io`, ...). Only after the API server answers 101 is
the client's connection upgraded, with exactly the subprotocol the API server
chose; any other answer is returned as an ordinary error, so a refused
upstream never leaves a half-open tunnel. Frames are relayed as they come, in
both directions, until either side closes.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import WSMsgType, web

from provisioning.errors import BadRequest, ClusterUnavailable, GatewayError, UpstreamError
from proxy.passthrough.headers import upstream_request_headers, websocket_subprotocols
from proxy.passthrough.ticket import Ticket
from proxy.passthrough.upstream import RedirectRefused

# Exec output can be large; the API server bounds it, not us.
_MAX_MESSAGE = 16 * 1024 * 1024


class UpgradeRefused(GatewayError):
    """The API server did not switch protocols; its status is passed on."""

    code = "upgrade_refused"

    def __init__(self, status: int) -> None:
        self.status = status if 400 <= status < 600 else 502
        super().__init__(f"the Kubernetes API server refused the upgrade with status {status}")


async def _connect(request: web.Request, ticket: Ticket, token: str) -> aiohttp.ClientWebSocketResponse:
    upstream = ticket.passthrough.upstream
    try:
        return await upstream.websockets.ws_connect(
            upstream.url(ticket.decision.upstream_path, ticket.decision.upstream_query),
            method=request.method,
            protocols=websocket_subprotocols(request.headers),
            # The API server's watch-over-WebSocket handler (x/net/websocket)
            # refuses handshakes without an Origin. The browser's Origin was
            # checked by the gate; clients that send none get the server's own.
            origin=request.headers.get("Origin") or upstream.server,
            headers=upstream_request_headers(request.headers, token),
            autoping=True, heartbeat=None, max_msg_size=_MAX_MESSAGE, compress=0,
        )
    except aiohttp.WSServerHandshakeError as error:
        raise UpgradeRefused(error.status) from None
    except RedirectRefused as error:  # the long session never chases one (proxy.passthrough.upstream)
        raise UpstreamError("the Kubernetes API server answered the upgrade with a redirect") from error
    except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError) as error:
        raise ClusterUnavailable() from error
    except aiohttp.ClientError as error:
        raise UpstreamError() from error


async def _pump(source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
    async for message in source:
        if message.type == WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        elif message.type == WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            break


async def relay_websocket(request: web.Request, ticket: Ticket) -> web.StreamResponse:
    if not web.WebSocketResponse().can_prepare(request).ok:
        # Checked before anything is opened (or audited) upstream.
        raise BadRequest("a malformed WebSocket handshake (Connection, Sec-WebSocket-Key or -Version)",
                         code="bad_websocket_handshake")
    with ticket.passthrough.streams.track(ticket.owner):  # a slot before anything opens upstream
        return await _relay_websocket(request, ticket)


async def _relay_websocket(request: web.Request, ticket: Ticket) -> web.StreamResponse:
    token = await ticket.token()
    try:
        upstream = await _connect(request, ticket, token)
    except UpgradeRefused as refused:
        if refused.status != 401:
            raise
        ticket.drop_token(token)
        upstream = await _connect(request, ticket, await ticket.token())
    if ticket.decision.is_exec:
        ticket.passthrough.audit.enqueue(ticket.event("ProxyExec", subprotocol=upstream.protocol))
    else:
        ticket.audit_write(101)
    client = web.WebSocketResponse(protocols=(upstream.protocol,) if upstream.protocol else (),
                                   autoping=True, heartbeat=None, max_msg_size=_MAX_MESSAGE, compress=False)
    try:
        await client.prepare(request)
        down = asyncio.create_task(_pump(upstream, client))
        up = asyncio.create_task(_pump(client, upstream))
        try:
            await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (down, up):
                task.cancel()
            await asyncio.gather(down, up, return_exceptions=True)
    finally:
        await upstream.close()
        await client.close()
    return client
