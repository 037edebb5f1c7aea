"""A TLS connection's read buffer (uvloop's 256 KiB) is resident only where
its reads wrote (proxy.http.tls_buffers), on both legs of the gateway: the
upstream connections its pool makes (proxy.passthrough.http1) and the
client connections its server accepts (proxy.server.connection), on uvloop
as `serve` runs them, against real TLS peers on this machine.

Each test first leaves glibc's heap with a large free block whose pages are
resident (what a burst of traffic leaves behind): a buffer allocated next
lands there, and without the release it would be resident whole.
"""

from __future__ import annotations

import asyncio
import ctypes
import ssl
from pathlib import Path
from typing import Any, Callable, Coroutine

import uvloop
from aiohttp import web
from multidict import CIMultiDict

from bench.heap_view import resident_bytes
from proxy.http.tls_buffers import PAGE, release_read_buffer, uvloop_tls_layer
from proxy.passthrough.http1 import Pool
from proxy.server.connection import GatewayRunner

_LIBC = ctypes.CDLL("libc.so.6")
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.free.argtypes = [ctypes.c_void_p]
_SMALL_READS = 4 * PAGE
"""More than a request head or a short answer takes in one read."""


def _buffer_resident(transport: Any) -> int:
    """The resident bytes of `transport`'s TLS read buffer."""
    layer = uvloop_tls_layer(transport)
    assert layer is not None, "uvloop's TLS layer is no longer found through its transport (tls_buffers)"
    with layer.get_buffer(1) as view:
        assert len(view) >= 256 * 1024
        first = ctypes.c_char.from_buffer(view)
        address = ctypes.addressof(first)
        del first
        return resident_bytes(address, len(view))


def _dirty_heap() -> int:
    """A free block of 8 MiB in glibc's heap, every page of it resident, kept
    from the top of the heap (so from glibc's own trim) by a block after it;
    returns that block, to be freed once the test is done. Blocks of 64 KiB
    come from the heap whatever glibc's mmap threshold is."""
    blocks = [_LIBC.malloc(64 * 1024) for _ in range(128)]
    pin = _LIBC.malloc(64 * 1024)
    for block in blocks:
        ctypes.memset(block, 1, 64 * 1024)
        _LIBC.free(block)
    return int(pin)


def _on_uvloop(scenario: Callable[[], Coroutine[None, None, int]]) -> int:
    pin = _dirty_heap()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(scenario())
    finally:
        _LIBC.free(pin)


def test_an_upstream_connection_keeps_resident_only_what_its_reads_touched(
        gateway_tls: tuple[ssl.SSLContext, Path]) -> None:
    context, ca = gateway_tls

    async def scenario() -> int:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            await reader.read()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
        pool = Pool(f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}",
                    ssl.create_default_context(cafile=str(ca)))
        try:
            answer_ = await pool.request("GET", "/api", CIMultiDict(), timeout=10)
            assert await answer_.read(16) == b"ok"
            resident = _buffer_resident(answer_._connection._transport)
            answer_.close()
            return resident
        finally:
            pool.close()
            server.close()

    resident = _on_uvloop(scenario)
    assert resident <= _SMALL_READS, resident


def test_a_client_connection_keeps_resident_only_what_its_reads_touched(
        gateway_tls: tuple[ssl.SSLContext, Path]) -> None:
    context, ca = gateway_tls

    async def scenario() -> int:
        seen: list[int] = []

        async def handler(request: web.Request) -> web.Response:
            seen.append(_buffer_resident(request.transport))
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_get("/", handler)
        runner = GatewayRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        try:
            port = runner.addresses[0][1]
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=ssl.create_default_context(cafile=str(ca)))
            writer.write(b"GET / HTTP/1.1\r\nHost: gateway\r\n\r\n")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
            writer.close()
            return seen[0]
        finally:
            await runner.cleanup()

    resident = _on_uvloop(scenario)
    assert resident <= _SMALL_READS, resident


async def _read_far(tls: tuple[ssl.SSLContext, Path]) -> tuple[asyncio.StreamWriter, asyncio.Server]:
    """A client TLS connection that has read 100 KiB: far into its buffer."""
    context, ca = tls

    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"x" * 100_000)
        await writer.drain()
        await reader.read()
        writer.close()

    server = await asyncio.start_server(send, "127.0.0.1", 0, ssl=context)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.sockets[0].getsockname()[1], ssl=ssl.create_default_context(cafile=str(ca)))
    await reader.readexactly(100_000)
    return writer, server


def test_the_release_finds_uvloops_buffer_and_gives_back_its_pages(gateway_tls: tuple[ssl.SSLContext, Path]) -> None:
    """uvloop's TLS layer is reached through its transport and its buffer
    through `get_buffer` (neither is its documented API: an upgrade that
    changes them fails here, by name)."""
    async def scenario() -> tuple[int, int, int]:
        writer, server = await _read_far(gateway_tls)
        before = _buffer_resident(writer.transport)
        given_back = release_read_buffer(writer.transport)
        after = _buffer_resident(writer.transport)
        writer.close()
        server.close()
        return before, given_back, after

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        before, given_back, after = runner.run(scenario())
    assert before >= 64 * 1024, before
    assert given_back >= 256 * 1024 - 2 * PAGE, given_back
    assert after <= 2 * PAGE, after  # the partial pages at its two ends stay


async def test_nothing_is_given_back_on_asyncios_own_loop(gateway_tls: tuple[ssl.SSLContext, Path]) -> None:
    writer, server = await _read_far(gateway_tls)
    assert release_read_buffer(writer.transport) == 0
    writer.close()
    server.close()
