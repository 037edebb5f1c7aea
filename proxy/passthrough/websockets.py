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
from aiohttp import WSCloseCode, WSMsgType, web

from provisioning.errors import BadRequest, ClusterUnavailable, GatewayError, UpstreamError
from proxy.passthrough.headers import offered_subprotocols, upstream_request_headers, websocket_subprotocols
from proxy.passthrough.routing import stream_target
from proxy.passthrough.streams import Stream
from proxy.passthrough.ticket import Ticket
from proxy.passthrough.upstream import RedirectRefused

# Exec output can be large; the API server bounds it, not us.
_MAX_MESSAGE = 16 * 1024 * 1024
# Sent with close code 1001 when the gateway stops: the client may reconnect at once.
GOING_AWAY_REASON = b"the gateway is shutting down; reconnect"
# A client that never answers our close frame is not waited for longer than this.
_CLOSE_SECONDS = 2.0


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


def _well_formed(request: web.Request) -> bool:
    """The client's handshake is valid (Upgrade, Connection, Version, Key).

    aiohttp checks it and negotiates the subprotocol in one step
    (`WebSocketResponse._handshake`), and logs a warning when none of the
    client's protocols is among the response's. Here none is chosen yet (the
    API server chooses, after this check), so the check is given the
    client's own list and finds a match. Given an empty list, it warned on
    every correct upgrade, quoting the offered protocols, which may hold a
    `base64url.bearer.authorization.k8s.io.` token."""
    return web.WebSocketResponse(protocols=offered_subprotocols(request.headers)).can_prepare(request).ok


async def relay_websocket(request: web.Request, ticket: Ticket) -> web.StreamResponse:
    if not _well_formed(request):
        # Checked before anything is opened (or audited) upstream.
        raise BadRequest("a malformed WebSocket handshake (Connection, Sec-WebSocket-Key or -Version)",
                         code="bad_websocket_handshake")
    with ticket.passthrough.streams.track(ticket.owner) as stream:  # a slot before anything opens upstream
        return await _relay_websocket(request, ticket, stream)


async def _relay_websocket(request: web.Request, ticket: Ticket, stream: Stream) -> web.StreamResponse:
    token = await ticket.token()
    if ticket.decision.is_exec:
        # Before the handshake, which is what starts the process in the pod:
        # no row, no session.
        await ticket.passthrough.audit.write_now(ticket.event("ProxyExec", **stream_target(ticket.decision)))
    try:
        upstream = await _connect(request, ticket, token)
    except UpgradeRefused as refused:
        if refused.status != 401:
            raise
        ticket.drop_token(token)
        upstream = await _connect(request, ticket, await ticket.token())
    if not ticket.decision.is_exec:
        ticket.audit_write(101)
    client = web.WebSocketResponse(protocols=(upstream.protocol,) if upstream.protocol else (),
                                   autoping=True, heartbeat=None, max_msg_size=_MAX_MESSAGE, compress=False,
                                   timeout=_CLOSE_SECONDS)
    code, message = WSCloseCode.OK, b""
    try:
        await client.prepare(request)
        down = asyncio.create_task(_pump(upstream, client))
        up = asyncio.create_task(_pump(client, upstream))
        try:
            await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if not stream.take_end():
                raise
            code, message = WSCloseCode.GOING_AWAY, GOING_AWAY_REASON
        finally:
            for task in (down, up):
                task.cancel()
            await asyncio.gather(down, up, return_exceptions=True)
    finally:
        await upstream.close()
        await client.close(code=code, message=message)
    return client
