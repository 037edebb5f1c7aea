"""WebSocket relay for exec, attach, port-forward (and watches over WebSocket).

The handshake is made with the API server first, as the tenant, on a
connection of its own, offering the client's subprotocols
(`v5.channel.k8s.io`, `v4.channel.k8s.io`, ..., never a bearer token
smuggled in as one) and the client's own key. Only after the API server
answers 101, with the right accept key and one of the offered subprotocols,
is the client's connection upgraded, with exactly that subprotocol; any
other answer is returned as an ordinary error (a redirect is never chased),
so a refused upstream never leaves a half-open tunnel.

Then the two connections are spliced: bytes go to the other side as they
arrive, and frames are neither parsed nor rebuilt. RFC 6455 frames cross a
proxy unchanged (the client's are masked already, the server's never are),
the API server checks the client's frames exactly as it would from a
client of its own, and the gateway's work per message is one read and one
write on each leg. A slow reader on either side pauses reading from the
other, with small write buffers (proxy.passthrough.backpressure), and past
the replica's ceiling of buffered bytes a tunnel that holds any stops
reading from the API server until its client has taken them. The relay
still follows where the API server's frames end (framing.FrameBoundary),
so that the close frame of a clean end (a right that ended: 1008; a stop:
1001; proxy.passthrough.streams.Ending) lands between two frames, never
inside one.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib

from aiohttp import web
from multidict import CIMultiDict

from provisioning.errors import BadRequest, UpstreamError
from proxy.passthrough.backpressure import STREAM_WRITE_HIGH, STREAM_WRITE_LOW, ClientFlow
from proxy.passthrough.framing import FrameBoundary
from proxy.passthrough.headers import AUDIT_ID, upstream_request_headers, websocket_subprotocols
from proxy.passthrough.http1 import Upgrade
from proxy.passthrough.relay import Relay, new_audit_id
from proxy.passthrough.routing import stream_target
from proxy.passthrough.stream_buffers import StreamBuffers
from proxy.passthrough.streams import Stream
from proxy.passthrough.ticket import Ticket
from proxy.passthrough.upstream import SEND_FAILURES, UpgradeRefused, upgrade_refused

# How long a clean end waits for the frame in flight to finish, and then for
# the client to answer the close frame, before it closes anyway.
_CLOSE_SECONDS = 2.0
_ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 4.2.2). Pure."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _ACCEPT_GUID).digest()).decode("ascii")


def close_frame(code: int, reason: bytes) -> bytes:
    """A close frame as a server sends it: unmasked, reason cut to fit a control frame. Pure."""
    payload = code.to_bytes(2, "big") + reason[:123]
    return bytes((0x88, len(payload))) + payload


def chosen_subprotocol(answer: CIMultiDict[str], key: str, offered: list[str]) -> str | None:
    """The subprotocol of a 101 the API server gave; UpstreamError if that
    answer is not a WebSocket handshake for this key and these offers. Pure."""
    if (answer.get("Upgrade", "").lower() != "websocket"
            or answer.get("Sec-WebSocket-Accept") != accept_key(key)
            or "Sec-WebSocket-Extensions" in answer):  # none were offered: frames the client could not read
        raise UpstreamError("the Kubernetes API server answered the upgrade with a malformed handshake")
    chosen = answer.get("Sec-WebSocket-Protocol")
    if chosen is not None and chosen not in offered:
        raise UpstreamError("the Kubernetes API server chose a subprotocol that was not offered")
    return chosen


class _Tunnel(asyncio.Protocol):
    """The API server's connection after it switched protocols, spliced to
    the client's: a relay of bytes."""

    def __init__(self, request: web.Request, upgrade: Upgrade, buffers: StreamBuffers) -> None:
        assert request.transport is not None and isinstance(request.protocol, web.RequestHandler)
        self.ended = asyncio.Event()  # either side is gone
        self.client_left = asyncio.Event()
        self._client, self._client_protocol = request.transport, request.protocol
        self._frames = FrameBoundary()
        self._stopping = False
        self._stopped = asyncio.Event()  # a clean end reached a frame boundary
        self._drained: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference
        self._upstream, early = upgrade.take_over(self)
        self._flow = ClientFlow(self._client, self._client_protocol, buffers)
        self._upstream.set_write_buffer_limits(high=STREAM_WRITE_HIGH, low=STREAM_WRITE_LOW)
        # aiohttp hands what the client sends after the upgrade to this
        # stand-in for its WebSocket reader, starting with anything that came
        # with the handshake.
        request.protocol.set_parser(_ClientBytes(self))  # type: ignore[arg-type]
        if early:
            self.data_received(early)
        # Either side may have gone while the other was being set up, its
        # end reported to no one.
        if self._client.is_closing():
            self.client_gone()
        if self._upstream.is_closing():
            self.ended.set()

    # -- the API server's connection (asyncio.Protocol) --------------------

    def data_received(self, data: bytes) -> None:
        """API server -> client."""
        if self._stopping:
            data = data[:self._frames.feed(data, stop_at_boundary=True)]
            if self._frames.at_boundary:
                self._stopped.set()
        else:
            self._frames.feed(data)
        client = self._client
        if data and not client.is_closing():
            client.write(data)
            flow = self._flow
            flow.note(self._upstream.get_write_buffer_size())
            if flow.must_wait and self._drained is None:
                self._upstream.pause_reading()
                self._drained = asyncio.get_running_loop().create_task(self._resume_when_drained())

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended.set()

    def pause_writing(self) -> None:
        self._client.pause_reading()

    def resume_writing(self) -> None:
        if not self._client.is_closing():
            self._client.resume_reading()

    async def _resume_when_drained(self) -> None:
        try:
            # Once the client's transport has room again (or raises once it is gone).
            await self._flow.room(self._upstream.get_write_buffer_size())
        except ConnectionError:
            return
        finally:
            self._drained = None
        if not self._upstream.is_closing():
            self._upstream.resume_reading()

    # -- the client's connection (through _ClientBytes) --------------------

    def up(self, data: bytes) -> None:
        """Client -> API server."""
        if not self._upstream.is_closing():
            self._upstream.write(data)

    def client_gone(self) -> None:
        self.client_left.set()
        self.ended.set()

    # -- ending --------------------------------------------------------------

    async def end_cleanly(self, code: int, reason: bytes) -> bool:
        """Close the client's side with a close frame between two of the API
        server's frames, and the API server's side; wait (bounded) for the
        client to answer and leave. False if no frame ended in time: a close
        frame then would tear one, so the caller cuts instead."""
        self._stopping = True
        if not self._frames.at_boundary:
            try:
                async with asyncio.timeout(_CLOSE_SECONDS):
                    await self._stopped.wait()
            except TimeoutError:
                return False
        self._upstream.close()
        if not self._client.is_closing():
            self._client.write(close_frame(code, reason))
            try:
                async with asyncio.timeout(_CLOSE_SECONDS):
                    await self.client_left.wait()
            except TimeoutError:
                pass
        return True

    def close(self, *, cut: bool) -> None:
        """Both connections: closed after what is queued is sent, or for a
        cut, at once. What is queued gets `_CLOSE_SECONDS` to go: a peer
        that never reads would otherwise hold the connection (and, upstream,
        the exec at the kubelet) for as long as it likes, past the stream's
        slot and out of reach of any cut."""
        if self._drained is not None:
            self._drained.cancel()  # its wait for the client has no stream left to resume
        self._flow.close()
        loop = asyncio.get_running_loop()
        for transport in (self._upstream, self._client):
            if cut:
                transport.abort()
            else:
                transport.close()
                loop.call_later(_CLOSE_SECONDS, transport.abort)  # a no-op once it has closed


class _ClientBytes:
    """Stands in for aiohttp's WebSocket reader on the client's connection
    (`RequestHandler.set_parser`): what the client sends goes upstream as it is."""

    def __init__(self, tunnel: _Tunnel) -> None:
        self._tunnel = tunnel

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self._tunnel.up(data)
        return False, b""

    def feed_eof(self) -> None:  # the client's connection is gone
        self._tunnel.client_gone()


def is_websocket_key(key: str | None) -> bool:
    """A Sec-WebSocket-Key as RFC 6455 4.1 has it: 16 bytes, base64. Pure.
    (aiohttp's own check lets a non-ASCII key reach a ValueError it does not
    catch.)"""
    if key is None:
        return False
    try:
        return len(base64.b64decode(key.encode("ascii"), validate=True)) == 16
    except (UnicodeEncodeError, binascii.Error):
        return False


def _well_formed(request: web.Request) -> bool:
    """The client's handshake is valid (GET, Upgrade, Connection, Version, Key).

    aiohttp checks it and negotiates the subprotocol in one step
    (`WebSocketResponse._handshake`), and logs a warning when none of the
    client's protocols is among the response's. Here none is chosen yet (the
    API server chooses, after this check), so the check is given the
    client's own list and finds a match. Given an empty list, it warned on
    every correct upgrade, quoting the offered protocols, which may hold a
    `base64url.bearer.authorization.k8s.io.` token. aiohttp reads the
    first Sec-WebSocket-Protocol line only, so that is the list it is given
    (every line's, and an empty first line, offering nothing aiohttp sees,
    got the token logged). Compression is left out of the check: the
    client's Extensions never go upstream, and aiohttp's parser of them
    raises ValueError (a 500) on a window size of 4,301 digits."""
    first_line = request.headers.get("Sec-WebSocket-Protocol")
    protocols = [p.strip() for p in first_line.split(",")] if first_line is not None else []
    return (is_websocket_key(request.headers.get("Sec-WebSocket-Key"))
            and web.WebSocketResponse(protocols=protocols, compress=False).can_prepare(request).ok)


async def _upgrade(request: web.Request, ticket: Ticket, relay: Relay, token: str,
                   audit_id: str | None) -> tuple[Upgrade, str | None]:
    """The upgrade, made with the API server: its 101, and the subprotocol it
    chose. Its event in the cluster's audit log is named `audit_id`, if given."""
    upstream = relay.upstream(ticket)
    decision = ticket.decision
    key = request.headers["Sec-WebSocket-Key"]
    offered = websocket_subprotocols(request.headers)
    outgoing = upstream_request_headers(request.headers, token)
    outgoing.update({"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                     "Sec-WebSocket-Key": key,
                     # The API server's watch-over-WebSocket handler (x/net/websocket)
                     # refuses handshakes without an Origin. The browser's Origin was
                     # checked by the gate; clients that send none get the server's own.
                     "Origin": request.headers.get("Origin") or upstream.server})
    if offered:
        outgoing["Sec-WebSocket-Protocol"] = ", ".join(offered)
    if audit_id is not None:
        outgoing[AUDIT_ID] = audit_id
    query = decision.upstream_query
    try:
        # No read timeout once it runs, but the answer to the upgrade comes
        # as soon as the kubelet has started the stream.
        upgrade = await upstream.pool.upgrade(f"{decision.upstream_path}?{query}" if query else decision.upstream_path,
                                              outgoing, timeout=upstream.timeout)
    except SEND_FAILURES as error:
        relay.failed(ticket, error)
    if upgrade.status == 101:
        try:
            return upgrade, chosen_subprotocol(upgrade.headers, key, offered)
        except UpstreamError:
            upgrade.abort()
            raise
    upgrade_refused(upgrade)


async def relay_websocket(request: web.Request, ticket: Ticket, relay: Relay) -> web.StreamResponse:
    if request.method != "GET" or not _well_formed(request):
        # Checked before anything is opened (or audited) upstream.
        raise BadRequest("a malformed WebSocket handshake (Connection, Sec-WebSocket-Key or -Version)",
                         code="bad_websocket_handshake")
    try:
        async with relay.streams.track(ticket.owner, request) as stream:  # a slot before anything opens upstream
            return await _relay_websocket(request, ticket, relay, stream)
    except UpgradeRefused as refused:
        # kubectl falls back to SPDY after a refused upgrade, and prints why
        # the upgrade was refused only with -v=4: the API server's own words.
        answer = refused.relayed()
        if answer is None:
            raise
        return answer


async def _relay_websocket(request: web.Request, ticket: Ticket, relay: Relay, stream: Stream) -> web.StreamResponse:
    token = await relay.token(ticket)
    exec_audit_id = new_audit_id() if ticket.decision.is_exec else None
    if exec_audit_id is not None:
        # Before the handshake, which is what starts the process in the pod:
        # no row, no session. It names the handshake's event in the cluster's
        # audit log, so the timeline shows the exec once.
        await relay.audit.write_now(ticket.event("ProxyExec", **stream_target(ticket.decision),
                                                 audit_id=exec_audit_id))
    try:
        upgrade, subprotocol = await _upgrade(request, ticket, relay, token, exec_audit_id)
    except UpgradeRefused as refused:
        if refused.status != 401:
            raise
        relay.drop_token(ticket, token)
        # Another request, another event (the refused one keeps its name).
        upgrade, subprotocol = await _upgrade(request, ticket, relay, await relay.token(ticket),
                                              new_audit_id() if exec_audit_id is not None else None)
    if not ticket.decision.is_exec:
        relay.record(ticket, 101)
    response = web.StreamResponse(status=101, reason="Switching Protocols", headers={
        "Upgrade": "websocket", "Connection": "Upgrade",
        "Sec-WebSocket-Accept": accept_key(request.headers["Sec-WebSocket-Key"]),
        **({"Sec-WebSocket-Protocol": subprotocol} if subprotocol else {})})
    try:
        await response.prepare(request)
    except BaseException:
        upgrade.abort()
        raise
    request.protocol.keep_alive(False)
    tunnel = _Tunnel(request, upgrade, relay.streams.buffers)
    cut = True
    try:
        await tunnel.ended.wait()
        cut = False
    except asyncio.CancelledError:
        ending = stream.take_end()
        if ending is None:
            raise
        cut = not await tunnel.end_cleanly(ending.close_code, ending.close_reason)
    finally:
        tunnel.close(cut=cut)
    return response
