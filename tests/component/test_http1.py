"""The relay's HTTP/1.1 client (proxy.passthrough.http1) against a FAKE
server that scripts the faults a real API server cannot be made to produce
on cue: answers cut short, stray bytes, stale kept-alive connections,
silence. The happy paths are also proven against the real API server by
tests/integration/test_passthrough.py.

Given a scripted peer, when the pool sends a request, then the answer is
read exactly, and a connection is reused only when nothing about it is in
doubt.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable

import pytest
from multidict import CIMultiDict

from proxy.passthrough.http1 import (MAX_REFUSAL_BYTES, Pool, RequestBodyStalled, UpstreamConnectionLost, UpstreamProtocolError,
                                    request_head)

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class FakePeer:
    """A FAKE API server: each new connection runs the next script (the
    last one repeats); every request head it reads is recorded."""

    def __init__(self, *scripts: Script) -> None:
        self.scripts = list(scripts)
        self.connections = 0
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        script = self.scripts[min(self.connections, len(self.scripts) - 1)]
        self.connections += 1
        try:
            await script(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_head(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        return head


@pytest.fixture
async def peer_pool() -> AsyncIterator[Callable[..., Awaitable[tuple[FakePeer, Pool]]]]:
    made: list[tuple[FakePeer, Pool]] = []

    async def make(*scripts: Script, **options: object) -> tuple[FakePeer, Pool]:
        peer = FakePeer(*scripts)
        pool = Pool(await peer.start(), None, **options)  # type: ignore[arg-type]
        made.append((peer, pool))
        return peer, pool

    yield make
    for peer, pool in made:
        pool.close()
        assert peer.server is not None
        peer.server.close()


def answering(*answers: bytes, then_close: bool = False) -> Callable[[FakePeer], Script]:
    """A script: read a request, write the next answer, and so on."""
    def script_for(peer: FakePeer) -> Script:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for answer in answers:
                await peer.read_head(reader)
                writer.write(answer)
                await writer.drain()
            if then_close:
                return
            await reader.read()  # keep the connection open until the client ends it
        return script
    return script_for


def answering_once_then_dropping(peer: FakePeer) -> Script:
    """A script: answer one request, then read the next and close without a word
    (a kept-alive connection the server gave up on just as it was reused)."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        writer.write(OK)
        await writer.drain()
        await peer.read_head(reader)
    return script


async def get(pool: Pool, target: str = "/api", timeout: float | None = 5.0) -> tuple[int, bytes]:
    answer = await pool.request("GET", target, CIMultiDict({"Accept": "application/json"}), timeout=timeout)
    body = b""
    while chunk := await answer.read_chunk():
        body += chunk
    return answer.status, body


# -- the request head (pure) ---------------------------------------------------

def test_a_bodyless_request_carries_no_framing_and_our_host() -> None:
    head = request_head("GET", "/api/v1/namespaces/t/pods?watch=1", "10.0.0.1:6443",
                        CIMultiDict([("Host", "evil"), ("Content-Length", "5"), ("Transfer-Encoding", "chunked"),
                                     ("Accept", "a"), ("Accept", "b")]), None, False)
    assert head == (b"GET /api/v1/namespaces/t/pods?watch=1 HTTP/1.1\r\nHost: 10.0.0.1:6443\r\n"
                    b"Accept: a\r\nAccept: b\r\n\r\n")


@pytest.mark.parametrize("length, framing", [(12, b"Content-Length: 12"), (None, b"Transfer-Encoding: chunked")])
def test_a_body_is_framed_by_us(length: int | None, framing: bytes) -> None:
    head = request_head("POST", "/api", "h", CIMultiDict([("Content-Length", "999")]), length, True)
    assert head == b"POST /api HTTP/1.1\r\nHost: h\r\n" + framing + b"\r\n\r\n"


@pytest.mark.parametrize("name, value", [("X-A", "1\r\nX-Injected: 1"), ("X-A", "1\n"), ("X-A", "1\r"), ("X-A", "1\0"),
                                         ("X-A\r\nX-B", "1")])
def test_a_line_break_anywhere_is_refused(name: str, value: str) -> None:
    with pytest.raises(ValueError):
        request_head("GET", "/", "h", CIMultiDict([(name, value)]), None, False)


def test_header_bytes_cross_unchanged() -> None:
    # aiohttp's parser decodes header bytes as UTF-8 with surrogateescape.
    value = b"caf\xc3\xa9 \xff".decode("utf-8", "surrogateescape")
    assert b"X-A: caf\xc3\xa9 \xff\r\n" in request_head("GET", "/", "h", CIMultiDict([("X-A", value)]), None, False)


# -- answers and connection reuse ----------------------------------------------

async def test_a_kept_alive_connection_carries_the_next_request(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    peer.scripts = [answering(OK, OK)(peer)]
    assert await get(pool) == (200, b"{}")
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 1


async def test_a_server_behind_a_path_gets_it_before_every_target() -> None:
    peer = FakePeer()
    peer.scripts = [answering(OK)(peer)]
    base = await peer.start()
    pool = Pool(base + "/k8s/clusters/c-1/", None)
    try:
        assert await get(pool, "/api/v1/namespaces?limit=1") == (200, b"{}")
        assert peer.heads[0].startswith(b"GET /k8s/clusters/c-1/api/v1/namespaces?limit=1 HTTP/1.1\r\n")
    finally:
        pool.close()
        assert peer.server is not None
        peer.server.close()


async def test_status_reason_and_repeated_headers_arrive_as_sent(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 404 Not Here\r\nWarning: a\r\nWarning: b\r\nContent-Length: 0\r\n\r\n")(peer)]
    answer = await pool.request("GET", "/x", CIMultiDict(), timeout=5)
    assert (answer.status, answer.reason, answer.headers.getall("Warning")) == (404, "Not Here", ["a", "b"])
    assert await answer.read_chunk() == b""


@pytest.mark.parametrize("reason", [b"Not\x01Here", b"Nicht gefunden \xfc", b"Not\x7fHere"])
async def test_a_reason_with_a_control_or_non_ascii_byte_becomes_the_standard_one(  # type: ignore[no-untyped-def]
        peer_pool, reason: bytes) -> None:
    """aiohttp's writer refuses such a status line (a 500 on the full path);
    no client needs the server's own words for a status it names."""
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 404 " + reason + b"\r\nContent-Length: 0\r\n\r\n")(peer)]
    answer = await pool.request("GET", "/x", CIMultiDict(), timeout=5)
    assert (answer.status, answer.reason) == (404, "Not Found")


async def test_a_chunked_answer_is_read_whole_and_the_connection_kept(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"".join(b"4\r\nabcd\r\n" for _ in range(100)) + b"0\r\n\r\n")
    peer.scripts = [answering(chunked, OK)(peer)]
    assert await get(pool) == (200, b"abcd" * 100)
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 1


async def test_an_answer_ended_by_close_is_read_to_the_end_and_not_reused(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end", then_close=True)(peer),
                    answering(OK)(peer)]
    assert await get(pool) == (200, b"until the end")
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2


async def test_connection_close_from_the_server_is_honoured(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    peer.scripts = [answering(closing)(peer), answering(OK)(peer)]
    assert await get(pool) == (200, b"{}")
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2


async def test_bytes_that_belong_to_no_request_end_the_connection(peer_pool) -> None:  # type: ignore[no-untyped-def]
    # Given an answer followed by a second, unasked-for one, when the next
    # request is sent, then it never receives the stray answer.
    peer, pool = await peer_pool()
    stray = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsomeone's"
    peer.scripts = [answering(OK + stray)(peer), answering(OK)(peer)]
    assert await get(pool) == (200, b"{}")
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2


async def test_a_malformed_answer_is_an_error_and_ends_the_connection(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}")(peer),
                    answering(OK)(peer)]
    with pytest.raises(UpstreamProtocolError):
        await get(pool)
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2


async def test_an_oversized_header_section_is_an_error(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"x" * 100_000 + b"\r\n\r\n")(peer)]
    with pytest.raises(UpstreamProtocolError):
        await get(pool)


async def test_a_header_section_that_never_ends_is_an_error(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()

    async def drips(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nX-Filler: ")
        for _ in range(100):
            writer.write(b"x" * 4096)
            await writer.drain()
            await asyncio.sleep(0.005)
        await reader.read()

    peer.scripts = [drips]
    with pytest.raises(UpstreamProtocolError):
        await get(pool, timeout=10)


async def test_an_unasked_for_switch_of_protocols_is_an_error(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n")(peer)]
    with pytest.raises(UpstreamProtocolError):
        await get(pool)


async def test_informational_answers_are_skipped(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 100 Continue\r\nX-Early: 1\r\n\r\n" + OK)(peer)]
    answer = await pool.request("GET", "/", CIMultiDict(), timeout=5)
    assert answer.status == 200 and "X-Early" not in answer.headers
    assert await answer.read_chunk() == b"{}"


async def test_an_answer_to_head_has_no_body_and_ends_its_connection(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n")(peer), answering(OK)(peer)]
    answer = await pool.request("HEAD", "/", CIMultiDict(), timeout=5)
    assert answer.headers["Content-Length"] == "5000"
    assert await asyncio.wait_for(answer.read_chunk(), 1) == b""
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2


# -- failures --------------------------------------------------------------------

async def test_a_stale_kept_alive_connection_is_retried_once_for_a_bodyless_request(peer_pool) -> None:  # type: ignore[no-untyped-def]
    # Given the server closed a kept-alive connection just as it was reused
    # (it read the request, answered nothing), then the request goes again.
    peer, pool = await peer_pool()

    peer.scripts = [answering_once_then_dropping(peer), answering(OK)(peer)]
    assert await get(pool) == (200, b"{}")
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2


async def test_a_request_with_a_body_is_never_sent_twice(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()

    peer.scripts = [answering_once_then_dropping(peer)]
    assert await get(pool) == (200, b"{}")

    async def body() -> AsyncIterator[bytes]:
        yield b"{}"

    with pytest.raises(UpstreamConnectionLost):
        await pool.request("POST", "/", CIMultiDict(), body=body(), content_length=2, timeout=5)
    assert peer.connections == 1


async def test_an_answer_cut_short_is_an_error_not_an_end(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this", then_close=True)(peer)]
    answer = await pool.request("GET", "/", CIMultiDict(), timeout=5)
    received = b""
    with pytest.raises(UpstreamConnectionLost):
        while chunk := await answer.read_chunk():
            received += chunk
    assert received == b"only this"


async def test_silence_before_the_answer_times_out(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        await reader.read()

    peer.scripts = [silent]
    with pytest.raises(TimeoutError):
        await pool.request("GET", "/", CIMultiDict(), timeout=0.2)


async def test_the_deadline_covers_the_body_too(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()

    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nsome")
        await reader.read()

    peer.scripts = [stalls]
    answer = await pool.request("GET", "/", CIMultiDict(), timeout=0.3)
    assert await answer.read_chunk() == b"some"
    with pytest.raises(TimeoutError):
        await answer.read_chunk()


async def test_a_request_body_still_awaited_at_the_deadline_is_the_clients_delay(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()

    async def waits_for_the_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        await reader.read()

    async def trickle() -> AsyncIterator[bytes]:
        yield b"{"
        await asyncio.sleep(3600)  # the client sends nothing more
        yield b"}"

    peer.scripts = [waits_for_the_body, waits_for_the_body]
    with pytest.raises(RequestBodyStalled):
        await pool.request("POST", "/", CIMultiDict(), body=trickle(), content_length=2, timeout=0.2)

    async def whole() -> AsyncIterator[bytes]:
        yield b"{}"

    # The body went out whole, and the API server is the one that is silent.
    with pytest.raises(TimeoutError) as silent:
        await pool.request("POST", "/", CIMultiDict(), body=whole(), content_length=2, timeout=0.2)
    assert not isinstance(silent.value, RequestBodyStalled)


async def test_a_connection_refused_is_an_os_error() -> None:
    pool = Pool("http://127.0.0.1:9", None)  # discard port: nothing listens
    with pytest.raises(OSError):
        await pool.request("GET", "/", CIMultiDict(), timeout=1)


async def test_cancelling_a_request_ends_its_connection(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    closed = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        await reader.read()  # returns at the client's close
        closed.set()

    peer.scripts = [silent]
    waiting = asyncio.create_task(pool.request("GET", "/", CIMultiDict(), timeout=None))
    await asyncio.sleep(0.1)
    waiting.cancel()
    await asyncio.wait_for(closed.wait(), 2)


async def test_an_answer_abandoned_midway_ends_its_connection(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    watch = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nevent\r\n"
    peer.scripts = [answering(watch)(peer), answering(OK)(peer)]
    answer = await pool.request("GET", "/", CIMultiDict(), timeout=None)
    assert await answer.read_chunk() == b"event"
    answer.close()
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2


# -- bodies and backpressure -------------------------------------------------------

async def test_a_request_body_is_sent_with_our_framing(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()
    received: list[bytes] = []

    async def echo_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await peer.read_head(reader)
        assert b"Transfer-Encoding: chunked" in head
        received.append(await reader.readuntil(b"0\r\n\r\n"))
        writer.write(OK)
        await reader.read()

    peer.scripts = [echo_chunked]

    async def body() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b""
        yield b"cde"

    answer = await pool.request("PUT", "/", CIMultiDict(), body=body(), timeout=5)
    assert answer.status == 200
    assert received == [b"2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n"]


async def test_a_body_that_breaks_off_fails_the_request_and_its_connection(peer_pool) -> None:  # type: ignore[no-untyped-def]
    peer, pool = await peer_pool()

    async def waits(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        await reader.read()

    peer.scripts = [waits]

    async def body() -> AsyncIterator[bytes]:
        yield b"ab"
        raise ConnectionResetError("the browser went away")

    with pytest.raises(UpstreamConnectionLost):
        await pool.request("POST", "/", CIMultiDict(), body=body(), content_length=10, timeout=5)


@pytest.mark.parametrize("pieces", [[b"abc", b"GET /smuggled HTTP/1.1\r\n\r\n"], [b"ab"]],
                         ids=["longer", "shorter"])
async def test_a_body_that_is_not_its_content_length_never_goes_out_past_it(peer_pool, pieces) -> None:  # type: ignore[no-untyped-def]
    # Framed by its Content-Length, a longer body's rest would be read by
    # the server as the next request on the connection, a shorter one would
    # take the next request as its rest: neither is sent on, nor reused.
    peer, pool = await peer_pool()
    received: list[bytes] = []

    async def reads_three(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        received.append(await reader.read(3))
        writer.write(OK)
        received.append(await reader.read())  # what follows, until the client closes

    peer.scripts = [reads_three, answering(OK)(peer)]

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async def exchange() -> None:  # fails as it is sent, or as its answer is read
        answer = await pool.request("POST", "/", CIMultiDict(), body=body(), content_length=3, timeout=5)
        while await answer.read_chunk():
            pass

    with pytest.raises(UpstreamConnectionLost):
        await exchange()
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2
    assert b"".join(received) == b"".join(pieces)[:3]


@pytest.mark.parametrize("upload", ["still going when the answer is done", "broken off before the answer is done"])
async def test_an_early_answer_with_its_upload_unfinished_ends_the_connection(peer_pool, upload: str) -> None:  # type: ignore[no-untyped-def]
    # The server answers before reading the body: unless the body then went
    # out whole, the server would read the next request as the rest of it.
    peer, pool = await peer_pool()
    gate = asyncio.Event()

    async def refuses_early(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        writer.write(b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n")
        await reader.read()

    peer.scripts = [refuses_early, answering(OK)(peer)]

    async def body() -> AsyncIterator[bytes]:
        yield b"x"
        await gate.wait()
        raise ConnectionResetError("the browser went away")

    answer = await pool.request("POST", "/", CIMultiDict(), body=body(), content_length=2, timeout=5)
    assert answer.status == 413
    if upload.startswith("broken"):
        gate.set()
        await asyncio.sleep(0.05)
    assert await answer.read_chunk() == b""
    gate.set()
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2


async def test_a_slow_reader_stops_the_connection_being_read(peer_pool) -> None:  # type: ignore[no-untyped-def]
    # Given a large answer and a reader that does not read, then the client
    # buffers at most a bounded amount and the server feels backpressure.
    peer, pool = await peer_pool()
    stuck = asyncio.Event()

    async def floods(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 33554432\r\n\r\n")
        for _ in range(512):
            writer.write(b"x" * 65536)
        await asyncio.sleep(0.5)
        if writer.transport.get_write_buffer_size() > 16 * 1024 * 1024:
            stuck.set()
        await reader.read()

    peer.scripts = [floods]
    answer = await pool.request("GET", "/", CIMultiDict(), timeout=None)
    await asyncio.sleep(0.7)
    assert stuck.is_set()
    first = await answer.read_chunk()
    assert 0 < len(first) < 2 * 1024 * 1024
    answer.close()


async def test_idle_connections_past_keepalive_are_not_reused(peer_pool) -> None:  # type: ignore[no-untyped-def]
    now = [1000.0]
    peer, pool = await peer_pool(keepalive_seconds=60.0, clock=lambda: now[0])
    peer.scripts = [answering(OK, OK)(peer)]
    assert await get(pool) == (200, b"{}")
    now[0] += 61
    assert await get(pool) == (200, b"{}")
    assert peer.connections == 2


# -- upgrades (the WebSocket relay's upstream leg) -----------------------------

SWITCHED = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: x\r\n\r\n")


class Taken(asyncio.Protocol):
    def __init__(self) -> None:
        self.received = bytearray()

    def data_received(self, data: bytes) -> None:
        self.received += data


async def test_an_upgrade_hands_over_the_connection_with_the_bytes_that_came_with_the_101(
        peer_pool: Callable[..., Awaitable[tuple[FakePeer, Pool]]]) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        writer.write(SWITCHED + b"\x82\x01a")  # the new protocol's first frame in the same write
        await writer.drain()
        writer.write(b"\x82\x01b")
        writer.write(await reader.readexactly(3))  # and it echoes what the new owner sends
        await writer.drain()
        await reader.read()

    peer, pool = await peer_pool(lambda r, w: script(r, w))
    upgrade = await pool.upgrade("/api/v1/namespaces/t/pods/p/exec?command=cat", CIMultiDict({"Upgrade": "websocket"}),
                                 timeout=5)
    assert upgrade.status == 101 and upgrade.headers["Sec-WebSocket-Accept"] == "x"
    await asyncio.sleep(0.1)  # the second frame has arrived before the take-over
    taken = Taken()
    transport, early = upgrade.take_over(taken)
    assert early == b"\x82\x01a\x82\x01b"
    transport.write(b"xyz")
    async with asyncio.timeout(5):
        while bytes(taken.received) != b"xyz":
            await asyncio.sleep(0.01)
    transport.close()
    assert peer.heads[0].startswith(b"GET /api/v1/namespaces/t/pods/p/exec?command=cat HTTP/1.1\r\n")
    assert peer.connections == 1 and not pool._idle  # never pooled


async def test_a_refused_upgrade_gives_its_status_and_closes_the_connection(
        peer_pool: Callable[..., Awaitable[tuple[FakePeer, Pool]]]) -> None:
    closed = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 1000\r\n\r\n{\"kind\":")
        await writer.drain()
        await reader.read()
        closed.set()

    peer, pool = await peer_pool(lambda r, w: script(r, w))
    # Its body never ends: the status comes at the deadline, without it.
    upgrade = await pool.upgrade("/x", CIMultiDict(), timeout=1)
    assert upgrade.status == 403 and upgrade.body is None
    async with asyncio.timeout(5):
        await closed.wait()


@pytest.mark.parametrize("body, kept", [(b'{"kind":"Status","message":"container not found"}', True),
                                        (b"x" * (MAX_REFUSAL_BYTES + 1), False)])
async def test_a_refused_upgrade_brings_its_body_when_whole_and_small(
        peer_pool: Callable[..., Awaitable[tuple[FakePeer, Pool]]], body: bytes, kept: bool) -> None:
    peer, pool = await peer_pool()
    peer.scripts = [answering(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body) + body)(peer)]
    upgrade = await pool.upgrade("/x", CIMultiDict(), timeout=5)
    assert upgrade.status == 400 and upgrade.body == (body if kept else None)


@pytest.mark.parametrize("answer", [b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n",  # then nothing
                                    b"SSH-2.0-OpenSSH\r\n\r\n"])
async def test_an_upgrade_answered_by_silence_or_garbage_raises(
        peer_pool: Callable[..., Awaitable[tuple[FakePeer, Pool]]], answer: bytes) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await peer.read_head(reader)
        writer.write(answer)
        await writer.drain()
        await reader.read()

    peer, pool = await peer_pool(lambda r, w: script(r, w))
    with pytest.raises((TimeoutError, UpstreamProtocolError)):
        await pool.upgrade("/x", CIMultiDict(), timeout=0.5)
