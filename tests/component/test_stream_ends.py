"""How streams end, and what they hold, against a FAKE API server (a real
one cannot be made to hold an event half-sent, or to stream faster than
any client reads, on cue).

Every cut ends cleanly: sign-out, a user's suspension and a session's
expiry end a watch right after a whole event with the chunked body's last
chunk (read here from a raw socket, chunk by chunk), and a WebSocket with
a close frame saying why. A client that stops reading is slowed by TCP
back-pressure: the gateway stops reading from the API server, and what the
replica's streams hold stays within GATEWAY_STREAM_BUFFER_BYTES."""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import ssl
import uuid
from typing import Any, Awaitable, Callable

import pytest
from aiohttp import WSMsgType, web

from provisioning.db import repositories as repo
from provisioning.models import AuditEvent
from provisioning.secrets import Secret
from proxy import keys
from proxy.auth import sessions
from proxy.passthrough.backpressure import ONE_PIECE
from tests.fakes.apiserver import FakeAPIServer
from tests.fakes.kube import FakeTokenIssuer
from tests.support.environment import SESSION_SECRET
from tests.support.gatewayclient import Session, provisioned_workspace


ADDED = b'{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"first"}}}\n'
MODIFIED = b'{"type":"MODIFIED","object":{"kind":"ConfigMap","metadata":{"name":"first"}}}\n'
DELETED = b'{"type":"DELETED","object":{"kind":"ConfigMap","metadata":{"name":"first"}}}\n'


async def raw_get(gateway: Any, target: str, token: str,
                  receive_buffer: int | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """GET `target` on a connection of our own (TLS, as the gateway serves):
    the reader after the answer's head, and the head. `receive_buffer`
    shrinks the socket's receive buffer, for a client that stops reading
    to fill up soon."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (gateway.server.host, gateway.server.port))
    context = ssl.create_default_context(cafile=str(gateway.ca_file))
    reader, writer = await asyncio.open_connection(sock=sock, ssl=context, server_hostname=gateway.server.host)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: {gateway.server.host}\r\nAuthorization: Bearer {token}\r\n\r\n"
                 .encode())
    head = await reader.readuntil(b"\r\n\r\n")
    return reader, writer, head


async def chunked_body(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """The body's chunks, read as sent, until its last chunk (True) or the
    connection's end (False: broken off)."""
    body = b""
    try:
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            if size == 0:
                return body, await reader.readexactly(2) == b"\r\n"
            body += await reader.readexactly(size)
            assert await reader.readexactly(2) == b"\r\n"
    except (asyncio.IncompleteReadError, ConnectionError):
        return body, False


def events(body: bytes) -> list[str]:
    """Each line a whole JSON event (a torn one fails here)."""
    assert body.endswith(b"\n"), body
    return [json.loads(line)["type"] for line in body.splitlines()]


async def sign_out(gateway: Any, user: Session) -> None:
    assert (await gateway.post("/api/v1/auth/logout", headers=user.bearer)).status == 204


async def suspend_user(gateway: Any, user: Session) -> None:
    db = gateway.server.app[keys.DATABASE]
    user_id = uuid.UUID(user.user_id)
    assert await repo.set_user_status(db, user_id, "suspended", AuditEvent("UserSuspended", user_id)) is not None


async def short_session(gateway: Any, user: Session, seconds: int) -> str:
    """A session token of `user`'s that expires `seconds` from now (the
    shortest the settings allow is a minute)."""
    user_id, session_id = uuid.UUID(user.user_id), uuid.uuid4()
    token, expires_at = sessions.mint(Secret(SESSION_SECRET), user_id, session_id,
                                      datetime.datetime.now(datetime.timezone.utc), seconds)
    assert await repo.create_session(gateway.server.app[keys.DATABASE], session_id, user_id, expires_at,
                                     AuditEvent("Login", user_id)) is not None
    return token


def heard(gateway: Any, kind: str, id_: str) -> asyncio.Event:
    """Set once the gateway has heard (and so acted on) this event: its own
    subscribers were subscribed first, and run first."""
    event = asyncio.Event()

    def on_message(message: dict[str, Any]) -> None:
        if message.get("kind") == kind and str(message.get("id")) == id_:
            event.set()
    gateway.server.app[keys.EVENTS].subscribe(on_message)
    return event


Cause = Callable[[Any, Session], Awaitable[None]]


@pytest.mark.parametrize("cause", [sign_out, suspend_user, None], ids=["sign-out", "user-suspended", "session-expired"])
async def test_a_watch_cut_ends_after_a_whole_event_with_the_chunked_bodys_last_chunk(
        make_gateway: Any, fake_api_server: FakeAPIServer, cause: Cause | None) -> None:
    async def one_event_then_hold(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(ADDED)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    _server, upstream = await fake_api_server(one_event_then_hold)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    token = user.token if cause is not None else await short_session(gateway, user, 3)
    reader, writer, head = await raw_get(gateway, f"{path}?watch=true", token)
    assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in head.lower()
    async with asyncio.timeout(30):
        assert await reader.readuntil(b"\r\n") and await reader.readexactly(len(ADDED) + 2) == ADDED + b"\r\n"
        if cause is not None:
            await cause(gateway, user)
        body, whole = await chunked_body(reader)  # the session's expiry comes by itself
    assert (body, whole) == (b"", True)
    writer.close()


async def test_a_watch_cut_mid_event_passes_the_rest_of_that_event_and_nothing_after(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    """The FAKE API server has sent half an event when the session ends: the
    client gets that event whole (a torn line is a decoding error, not an
    end), then the end of the body, never the event after it."""
    signed_out = asyncio.Event()

    async def half_an_event_until_signed_out(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(ADDED + MODIFIED[:20])
        await signed_out.wait()
        await response.write(MODIFIED[20:] + DELETED)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    _server, upstream = await fake_api_server(half_an_event_until_signed_out)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    session_id = str(sessions.verify(Secret(SESSION_SECRET), user.token).session_id)
    reader, writer, _head = await raw_get(gateway, f"{path}?watch=true", user.token)
    async with asyncio.timeout(30):
        gateway_heard = heard(gateway, "session_revoked", session_id)
        await sign_out(gateway, user)
        await gateway_heard.wait()
        signed_out.set()
        body, whole = await chunked_body(reader)
    assert whole and events(body) == ["ADDED", "MODIFIED"]
    writer.close()


@pytest.mark.parametrize("cause, code, reason", [
    (sign_out, 1008, "the session ended; sign in again"),
    (suspend_user, 1008, "the account changed; sign in again"),
    (None, 1001, "the gateway is shutting down; reconnect"),
], ids=["sign-out", "user-suspended", "shutdown"])
async def test_a_websocket_cut_ends_with_a_close_frame_saying_why(
        make_gateway: Any, fake_api_server: FakeAPIServer, cause: Cause | None, code: int, reason: str) -> None:
    """1008 (policy violation) for a right that ended: reconnecting as
    before is refused; 1001 (going away) for a stop: reconnect elsewhere."""
    async def exec_that_prints_then_holds(request: web.Request) -> web.StreamResponse:
        socket_ = web.WebSocketResponse(protocols=["v5.channel.k8s.io"], compress=False)
        await socket_.prepare(request)
        await socket_.send_bytes(b"\x01hello\n")
        async for _message in socket_:
            pass
        return socket_

    _server, upstream = await fake_api_server(exec_that_prints_then_holds)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    exec_path = path.replace("/configmaps", "/pods/p/exec") + "?command=sh&stdout=true"
    async with asyncio.timeout(30):
        terminal = await gateway.ws_connect(exec_path, headers=user.bearer, protocols=["v5.channel.k8s.io"])
        assert (await terminal.receive_bytes()) == b"\x01hello\n"
        if cause is not None:
            await cause(gateway, user)
        else:
            gateway.server.app[keys.DRAIN].begin()
        closing = await terminal.receive()
    assert (closing.type, closing.data, closing.extra) == (WSMsgType.CLOSE, code, reason)
    await terminal.close()


async def test_stalled_readers_are_held_by_back_pressure_within_the_replicas_ceiling(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    """Many clients stop reading a watch the FAKE API server streams as fast
    as it can. The gateway stops reading from it (its writes back up: the
    back-pressure reaches the API server), and what the streams hold stays
    within the ceiling plus one piece per stream (a stream that holds
    nothing may still read one, so readers that keep up are never stopped
    by those that do not). The stalled streams' own marks add up to more
    than the ceiling, so streams also stop for the ceiling itself: its
    count of waits is not zero."""
    readers = 32
    ceiling = 1024 * 1024  # the least the setting allows; the stalled streams hold more than it
    line = json.dumps({"type": "ADDED", "object": {"data": "x" * 4000}}).encode() + b"\n"

    async def as_fast_as_it_can(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        while True:
            await response.write(line * 16)

    _server, upstream = await fake_api_server(as_fast_as_it_can)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream,
                                 GATEWAY_STREAM_BUFFER_BYTES=str(ceiling), GATEWAY_MAX_STREAMS_PER_WORKSPACE="100")
    user, path = await provisioned_workspace(gateway)
    registry = gateway.server.app[keys.METRICS].registry
    clients = []
    async with asyncio.timeout(120):
        for _ in range(readers):
            reader, writer, head = await raw_get(gateway, f"{path}?watch=true", user.token, receive_buffer=4096)
            assert head.startswith(b"HTTP/1.1 200 ")
            clients.append(writer)  # and never read again
        # Every stream has stopped reading from the API server, for its client.
        while registry.get_sample_value("tenant_gateway_proxy_streams_waiting_for_clients") != readers:
            await asyncio.sleep(0.05)
    held = registry.get_sample_value("tenant_gateway_proxy_stream_buffered_bytes")
    assert held is not None and 0 < held <= ceiling + readers * ONE_PIECE, held
    assert (registry.get_sample_value("tenant_gateway_proxy_stream_ceiling_waits") or 0) > 0
    for writer in clients:
        writer.close()
