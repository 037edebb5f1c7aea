"""What a stream's upstream connection (proxy.passthrough.http1, a request
with `read_ahead`) holds for a client that stopped reading, against a real
TLS server on this machine sending far more than is taken.

Given a watch's answer nobody reads, then its connection holds about its
read-ahead (the body's pieces and the ciphertext the TLS layer read and has
not decrypted) and the rest waits in the server, on asyncio's TLS transport
and on uvloop's (what the gateway serves with). Each buffer a read fills
keeps its largest size for the connection's life (OpenSSL's memory BIO,
uvloop's read buffer), so the bound is also what a stalled stream keeps
resident (bench/README.md, "Stalled readers").
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Callable, Coroutine

import pytest
import uvloop
from multidict import CIMultiDict

from proxy.passthrough.backpressure import ONE_PIECE, STREAM_PIECE, STREAM_READ_AHEAD
from proxy.passthrough.http1 import Answer, Pool

_BODY = 64 * 1024 * 1024
"""More than every buffer between the two ends can take (loopback's socket buffers reach several MiB)."""
_WRITE = 64 * 1024

LOOPS = pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop],
                                ids=["asyncio", "uvloop"])


class FloodingServer:
    """A TLS server answering every GET with a body of `_BODY` bytes, written
    as fast as its connection takes them; `blocked` while a write waits."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        self.blocked = False
        self.served = asyncio.Event()
        """Its answer has ended (the client went away)."""
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._context)
        return f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {_BODY}\r\n\r\n".encode())
            piece = b"x" * _WRITE
            for _ in range(_BODY // _WRITE):
                writer.write(piece)
                self.blocked = True
                await writer.drain()
                self.blocked = False
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            self.served.set()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


async def _settled(server: FloodingServer, answer: Answer) -> int:
    """What the answer holds once nothing moves: the server's write waits,
    and the answer's count has not changed for a while."""
    async with asyncio.timeout(30):
        unchanged, last = 0, -1
        while unchanged < 10:
            await asyncio.sleep(0.05)
            held = answer.buffered
            unchanged = unchanged + 1 if server.blocked and held == last else 0
            last = held
        return last


def _run(loop_factory: Callable[[], asyncio.AbstractEventLoop], scenario: Coroutine[None, None, int]) -> int:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(scenario)


async def _stalled_answer(tls: tuple[ssl.SSLContext, Path], read_ahead: int | None) -> int:
    """What an answer nobody reads holds once everything stops."""
    context, ca = tls
    server = FloodingServer(context)
    pool = Pool(await server.start(), ssl.create_default_context(cafile=str(ca)))
    try:
        answer = await pool.request("GET", "/api/v1/configmaps?watch=1", CIMultiDict(), timeout=None,
                                    read_ahead=read_ahead)
        held = await _settled(server, answer)
        answer.close()
        async with asyncio.timeout(30):
            await server.served.wait()
        return held
    finally:
        pool.close()
        server.close()


@LOOPS
def test_a_stalled_streams_tls_connection_holds_about_its_read_ahead(
        gateway_tls: tuple[ssl.SSLContext, Path], loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
    held = _run(loop_factory, _stalled_answer(gateway_tls, STREAM_READ_AHEAD))
    assert 0 < held <= ONE_PIECE, held


@LOOPS
def test_an_ordinary_answer_unread_holds_more_than_a_stream_may(
        gateway_tls: tuple[ssl.SSLContext, Path], loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
    """The bound above is not met by accident: without `read_ahead`, the TLS
    layer alone reads 256 KiB ahead of an answer nobody reads (the ordinary
    answer's own pause is 256 KiB more), and that is counted as held."""
    held = _run(loop_factory, _stalled_answer(gateway_tls, None))
    assert held > 2 * ONE_PIECE, held


async def test_a_stream_is_taken_in_pieces_no_larger_than_asked(gateway_tls: tuple[ssl.SSLContext, Path]) -> None:
    """Pieces of at most `STREAM_PIECE` (each becomes one write to the
    client, encrypted whole into a buffer that keeps its size), the body
    whole and in order, and the connection read on once all is taken."""
    context, ca = gateway_tls
    body = bytes(range(256)) * (3 * 1024)  # 768 KiB, arriving in reads far larger than a piece

    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        await reader.read()
        writer.close()

    server = await asyncio.start_server(answer_once, "127.0.0.1", 0, ssl=context)
    pool = Pool(f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}", ssl.create_default_context(cafile=str(ca)))
    try:
        answer = await pool.request("GET", "/", CIMultiDict(), timeout=None)
        pieces = []
        async with asyncio.timeout(30):
            while piece := await answer.read_chunk(STREAM_PIECE):
                pieces.append(piece)
        assert max(map(len, pieces)) <= STREAM_PIECE
        assert b"".join(pieces) == body
    finally:
        pool.close()
        server.close()
