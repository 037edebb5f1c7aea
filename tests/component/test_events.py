"""The cross-replica event listener (provisioning.events) against a real
PostgreSQL, through a relay on its socket that can go silent (a dead peer,
no reset) or drop notifications while passing everything else (what a
transaction-mode pooler does to LISTEN). Streams are cut and caches turned
off (the reset) within the 5 s promise either way; the listener's own
heartbeat never reaches subscribers. And the gateway, through the same
relay: while its listener hears nothing it opens no stream (nothing could
cut it) and /readyz reports it (still ready: short requests go on); a
fresh gateway hears events before its first request."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from pathlib import Path
from typing import Any, AsyncIterator
from urllib.parse import parse_qsl, urlencode

import asyncpg
import pytest

from provisioning.db.repositories import EVENTS_CHANNEL
from provisioning.events import EventListener
from proxy import keys
from tests.fakes.apiserver import RecordingAPIServer
from tests.fakes.kube import FakeTokenIssuer
from tests.support.gatewayclient import exec_handshake, k8s_error, provisioned_workspace
from tests.support.lanes import BOTH_LANES

# What the gateway promises: a stream whose right ends is cut within 5 s.
PROMISE_SECONDS = 5.0


class PostgresRelay:
    """A Unix-socket relay to PostgreSQL. `silence` stops forwarding both
    ways and keeps every socket open; `drop_notifications` passes everything
    but the server's NotificationResponse messages."""

    def __init__(self, server_url: str, folder: Path) -> None:
        head, _, query = server_url.partition("?")
        params = dict(parse_qsl(query))
        self.target = str(Path(params["host"]) / f".s.PGSQL.{params.get('port', '5432')}")
        self.folder = folder
        self.url = f"{head}?{urlencode({**params, 'host': str(folder)})}"
        self.silent = False
        self.drop_notifications = False
        self.connect_delay = 0.0
        """Seconds before each new connection reaches the server (a slow network, a busy pooler)."""
        self.dropped = 0
        self.echoes = 0
        """Exchanges that brought a notification back, up to the server's ReadyForQuery."""
        self._server: asyncio.AbstractServer | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        port = dict(parse_qsl(self.url.partition("?")[2])).get("port", "5432")
        self._server = await asyncio.start_unix_server(self._accept, str(self.folder / f".s.PGSQL.{port}"))

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(self.connect_delay)
        up_reader, up_writer = await asyncio.open_unix_connection(self.target)
        self._writers += [writer, up_writer]
        await asyncio.gather(self._pipe(reader, up_writer), self._from_server(up_reader, writer),
                             return_exceptions=True)
        writer.close()
        up_writer.close()

    async def _hold_if_silent(self) -> None:
        if self.silent:
            await asyncio.Event().wait()  # swallow everything from now on

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            await self._hold_if_silent()
            writer.write(data)
            await writer.drain()

    async def _from_server(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Message by message (a type byte, then a length that counts itself)."""
        notified = False
        while True:
            try:
                header = await reader.readexactly(5)
            except asyncio.IncompleteReadError:
                return
            body = await reader.readexactly(struct.unpack("!I", header[1:])[0] - 4)
            await self._hold_if_silent()
            if header[:1] == b"A" and self.drop_notifications:
                self.dropped += 1
                continue
            writer.write(header + body)
            await writer.drain()
            if header[:1] == b"A":
                notified = True
            elif header[:1] == b"Z" and notified:
                notified = False
                self.echoes += 1


@pytest.fixture
async def relay(database_url: str, tmp_path: Path) -> AsyncIterator[PostgresRelay]:
    made = PostgresRelay(database_url, tmp_path)
    await made.start()
    yield made
    await made.close()


class Watched:
    """A listener and what its subscribers saw."""

    def __init__(self, listener: EventListener) -> None:
        self.listener = listener
        self.events: list[dict[str, Any]] = []
        self.resets: list[float] = []
        listener.subscribe(self.events.append, lambda: self.resets.append(time.monotonic()))

    async def until(self, condition: Any, within: float) -> None:
        async with asyncio.timeout(within):
            while not condition():
                await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def listening(dsn: str) -> AsyncIterator[Watched]:
    listener = EventListener(dsn, retry_seconds=0.2)
    watched = Watched(listener)
    await listener.start()
    try:
        await watched.until(lambda: listener.connected, 10)
        yield watched
    finally:
        await listener.stop()


async def test_a_silently_dead_socket_resets_within_the_promise(relay: PostgresRelay) -> None:
    async with listening(relay.url) as watched:
        before, echoes = len(watched.resets), relay.echoes
        # The worst moment: just after a heartbeat came back, a whole cycle
        # before the next (or anywhere, for a listener without one).
        with contextlib.suppress(TimeoutError):
            await watched.until(lambda: relay.echoes > echoes, 2.5)
        relay.silent = True
        lost_at = time.monotonic()
        await watched.until(lambda: len(watched.resets) > before, PROMISE_SECONDS + 5)
        assert not watched.listener.connected
        assert watched.resets[before] - lost_at < PROMISE_SECONDS


async def test_a_connection_that_drops_notifications_resets_within_the_promise(
        relay: PostgresRelay, database_url: str) -> None:
    """Everything else still answers (`SELECT 1` would succeed); events would never come."""
    async with listening(relay.url) as watched:
        before = len(watched.resets)
        relay.drop_notifications = True
        lost_at = time.monotonic()
        await watched.until(lambda: len(watched.resets) > before, PROMISE_SECONDS + 5)
        assert watched.resets[before] - lost_at < PROMISE_SECONDS
        # Reconnected through the same relay, it is never trusted again: its heartbeat never comes back.
        await asyncio.sleep(3)
        assert not watched.listener.connected and relay.dropped >= 2
        relay.drop_notifications = False
        await watched.until(lambda: watched.listener.connected, 10)


async def test_the_heartbeat_never_reaches_subscribers_nor_moves_the_generation(database_url: str) -> None:
    async with listening(database_url) as watched:
        generation, resets = watched.listener.generation, len(watched.resets)
        await asyncio.sleep(4.5)  # two heartbeats at least
        assert watched.listener.connected
        assert (watched.listener.generation, len(watched.resets), watched.events) == (generation, resets, [])
        writer = await asyncpg.connect(database_url)
        try:
            await writer.execute("SELECT pg_notify($1, $2)", EVENTS_CHANNEL, '{"kind": "user_changed", "id": "x"}')
        finally:
            await writer.close()
        await watched.until(lambda: watched.events, 5)
        assert watched.events == [{"kind": "user_changed", "id": "x"}]
        assert watched.listener.generation == generation + 1


async def test_a_change_committed_here_is_heard_here_before_its_notify(database_url: str) -> None:
    """What this replica committed (a suspension, a logout) reaches its own
    subscribers at once, and a cache read begun before it is not kept: the
    caller's next request may arrive before PostgreSQL's NOTIFY does."""
    async with listening(database_url) as watched:
        read_began = watched.listener.generation
        watched.listener.committed({"kind": "user_changed", "id": "x"})
        assert watched.events == [{"kind": "user_changed", "id": "x"}]
        assert not watched.listener.may_cache(read_began)


async def readiness(gateway: Any, events: str, within: float = 10) -> tuple[int, dict[str, str]]:
    """/readyz's status and checks, once it reports the listener as `events`."""
    async with asyncio.timeout(within):
        while True:
            answer = await gateway.get("/readyz")
            body = await answer.json()
            if body["checks"]["events"] == events:
                return answer.status, dict(body["checks"])
            await asyncio.sleep(0.1)


@BOTH_LANES
async def test_no_stream_opens_while_the_listener_hears_nothing(
        relay: PostgresRelay, make_gateway: Any, api_server: RecordingAPIServer) -> None:
    """A stream opened then would miss the NOTIFY of a later suspension or
    logout and run until the listener is back; a short request reads the
    database meanwhile and is safe."""
    seen, upstream = api_server
    gateway = await make_gateway(GATEWAY_DATABASE_URL=relay.url, kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    assert await readiness(gateway, "ok") == (200, {"database": "ok", "kubernetes": "ok", "events": "ok"})
    relay.drop_notifications = True  # everything else still answers
    # Reported, and still ready (the contract's readiness): short requests go on.
    assert await readiness(gateway, "unavailable") == (
        200, {"database": "ok", "kubernetes": "ok", "events": "unavailable"})
    assert not gateway.server.app[keys.EVENTS].connected
    before = len(seen)
    pod = path.replace("/configmaps", "/pods/p")
    for stream in (path + "?watch=true", pod + "/log?follow=true"):
        answer = await gateway.get(stream, headers=user.bearer)
        assert await k8s_error(answer) == (503, "events_unavailable"), stream
        assert answer.headers["Retry-After"] == "1" and (await answer.json())["details"] == {"retryAfterSeconds": 1}
    exec_ = await gateway.get(pod + "/exec?command=sh&stdout=true",
                              headers={**user.bearer, **exec_handshake("dGhlIHNhbXBsZSBub25jZQ==")})
    assert await k8s_error(exec_) == (503, "events_unavailable")
    assert len(seen) == before  # none of them reached the API server
    assert (await gateway.get(path, headers=user.bearer)).status == 200  # a short request still goes
    relay.drop_notifications = False
    assert (await readiness(gateway, "ok"))[0] == 200
    assert (await gateway.get(path + "?watch=true", headers=user.bearer)).status == 200


@BOTH_LANES
async def test_a_gateway_that_starts_deaf_to_events_says_truly_what_readyz_answers(
        relay: PostgresRelay, make_gateway: Any, api_server: RecordingAPIServer,
        caplog: pytest.LogCaptureFixture) -> None:
    """Behind a pooler that never delivers notifications it starts anyway,
    and its warning says what /readyz then does: reports, stays ready."""
    _seen, upstream = api_server
    relay.drop_notifications = True
    with caplog.at_level(logging.WARNING, logger="proxy.app"):
        gateway = await make_gateway(GATEWAY_DATABASE_URL=relay.url, GATEWAY_DATABASE_TIMEOUT_SECONDS="1",
                                     kube=FakeTokenIssuer(), upstream=upstream)
    warned = [record.getMessage() for record in caplog.records if "event listener is not connected" in
              record.getMessage()]
    assert len(warned) == 1 and "/readyz reports it in checks.events and stays ready" in warned[0], warned
    assert await readiness(gateway, "unavailable") == (
        200, {"database": "ok", "kubernetes": "ok", "events": "unavailable"})


@BOTH_LANES
async def test_a_fresh_gateway_hears_events_before_its_first_request(
        relay: PostgresRelay, make_gateway: Any, api_server: RecordingAPIServer) -> None:
    """The listener connects in a cleanup context of its own: the server
    must not answer before it is connected, or its first streams are
    refused."""
    _seen, upstream = api_server
    user, path = await provisioned_workspace(await make_gateway(kube=FakeTokenIssuer(), upstream=upstream))
    relay.connect_delay = 0.5  # the second replica's listener takes a while to connect
    second = await make_gateway(GATEWAY_DATABASE_URL=relay.url, kube=FakeTokenIssuer(), upstream=upstream)
    watch = await second.get(path + "?watch=true", headers=user.bearer)  # its first request
    assert watch.status == 200, await watch.text()
    ready = await second.get("/readyz")
    assert ready.status == 200 and (await ready.json())["checks"]["events"] == "ok"
