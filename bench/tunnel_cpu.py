"""What the gateway's WebSocket tunnel costs per byte, against the floor of
any relay that terminates TLS on both legs, without the cluster (no lock).

`python -m bench.tunnel_cpu [ROUNDS]`: three processes on loopback, TLS on
both legs as in the gateway: a source that answers a WebSocket upgrade with
101 and then sends 64 MiB per round in binary frames of 4 KiB, each in a TLS
record of its own, as the API server sends a port-forward's (its gorilla
WebSocket writes frames from net/http's 4 KiB buffer, one write each); a
relay; a sink that reads them. The relay is, in interleaved rounds, either the gateway's
own tunnel (aiohttp on uvloop, `http1.Pool.upgrade`, then
`proxy.passthrough.websockets._Tunnel`, as `relay_websocket` runs it after
the gate and the audit) or the bare floor: an asyncio protocol per leg that
writes what it reads to the other. The relay's CPU seconds per 64 MiB are
read from /proc. Not a target: the port-forward row (`python -m
bench.pods`) is; this says how much of the gateway's share of it the
relay's code could still give back.
"""

from __future__ import annotations

import asyncio
import base64
import multiprocessing
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import psutil
import uvloop
from aiohttp import web
from multidict import CIMultiDict

from devstack import pki
from proxy.passthrough.http1 import Pool
from proxy.passthrough.stream_buffers import StreamBuffers
from proxy.passthrough.websockets import _Tunnel, accept_key

SIZE = 64 << 20
FRAME = 4096 - 4
"""A frame's payload: with its 4-byte header, the API server's 4 KiB write buffer."""
_KEY = base64.b64encode(b"tunnel-cpu-bench").decode()


def _contexts(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context (as the gateway's and the API server's) and a client context trusting it."""
    ca, ca_key = pki.make_ca("tunnel-cpu")
    ca_file, _ = ca.write(folder, "ca")
    cert, key = pki.issue(ca, ca_key, common_name="relay", server_hosts=("127.0.0.1",)).write(folder, "relay")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(ca_file))


def _head(stream: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = stream.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the head ended")
        data += chunk
    return data


def _source(folder: Path, ports: Any) -> None:
    """The API server's part: 101, then SIZE bytes in frames for every small frame it is sent."""
    server, _ = _contexts_from(folder)
    listener = socket.create_server(("127.0.0.1", 0))
    ports.put(listener.getsockname()[1])
    frame = bytes((0x82, 126)) + FRAME.to_bytes(2, "big") + b"x" * FRAME
    while True:
        connection, _ = listener.accept()
        stream = server.wrap_socket(connection, server_side=True)
        _head(stream)
        stream.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       b"Sec-WebSocket-Accept: " + accept_key(_KEY).encode() + b"\r\n\r\n")
        while stream.recv(64):
            for _ in range(SIZE // FRAME):
                stream.sendall(frame)
        stream.close()


def _contexts_from(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(folder / "relay.crt", folder / "relay.key")
    return server, ssl.create_default_context(cafile=str(folder / "ca.crt"))


def _sink(folder: Path, port: int, rounds: int, times: Any) -> None:
    """The client's part: the handshake, then per round a masked frame and SIZE bytes of frames read."""
    _, client = _contexts_from(folder)
    stream = client.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
    stream.sendall(f"GET /tunnel HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {_KEY}\r\n\r\n".encode())
    head = _head(stream)
    assert b" 101 " in head.split(b"\r\n", 1)[0], head
    carried = head.split(b"\r\n\r\n", 1)[1]
    expected = (SIZE // FRAME) * (FRAME + 4)  # what the source sends per round
    buffer = bytearray(1 << 20)
    for _ in range(rounds):
        began = time.perf_counter()
        stream.sendall(bytes((0x82, 0x82)) + b"\0\0\0\0" + b"go")
        received, carried = len(carried), b""
        while received < expected:
            count = stream.recv_into(buffer)
            if not count:
                raise ConnectionError("the relay closed the stream")
            received += count
        times.put(time.perf_counter() - began)
    stream.close()


class _Bare(asyncio.Protocol):
    """The floor: what one leg reads is written to the other, nothing else
    (what the client sends before the upstream leg is open waits for it)."""

    def __init__(self, other: asyncio.Transport | None = None) -> None:
        self.other = other
        self.early: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        if self.other is None:
            self.early.append(data)
        else:
            self.other.write(data)


class _BareDownstream(_Bare):
    def __init__(self, upstream_port: int, client: ssl.SSLContext) -> None:
        super().__init__()
        self._upstream_port, self._client_context = upstream_port, client
        self._opening: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TLS transport is not an asyncio.Transport subclass, though it is one.
        self._opening = asyncio.get_running_loop().create_task(self._open(cast(asyncio.Transport, transport)))

    async def _open(self, client: asyncio.Transport) -> None:
        upstream, _ = await asyncio.get_running_loop().create_connection(
            lambda: _Bare(client), "127.0.0.1", self._upstream_port, ssl=self._client_context,
            server_hostname="127.0.0.1")
        self.other = upstream
        for data in self.early:
            upstream.write(data)


def _relay(folder: Path, kind: str, upstream_port: int, ports: Any) -> None:
    server, client = _contexts_from(folder)
    uvloop.install()

    async def tunnel(request: web.Request) -> web.StreamResponse:
        pool = Pool(f"https://127.0.0.1:{upstream_port}", client)
        upgrade = await pool.upgrade("/tunnel", CIMultiDict({
            "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": request.headers["Sec-WebSocket-Key"]}), timeout=10)
        response = web.StreamResponse(status=101, reason="Switching Protocols", headers={
            "Upgrade": "websocket", "Connection": "Upgrade",
            "Sec-WebSocket-Accept": accept_key(request.headers["Sec-WebSocket-Key"])})
        await response.prepare(request)
        assert isinstance(request.protocol, web.RequestHandler)
        request.protocol.keep_alive(False)
        relay = _Tunnel(request, upgrade, StreamBuffers())
        await relay.ended.wait()
        relay.close(cut=False)
        return response

    async def main() -> None:
        if kind == "tunnel":
            app = web.Application()
            app.router.add_get("/tunnel", tunnel)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server)
            await site.start()
            ports.put(cast(asyncio.Server, site._server).sockets[0].getsockname()[1])
        else:
            listening = await asyncio.get_running_loop().create_server(
                lambda: _BareDownstream(upstream_port, client), "127.0.0.1", 0, ssl=server)
            ports.put(listening.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


def _one(folder: Path, kind: str, upstream_port: int, rounds: int) -> tuple[float, list[float]]:
    """The relay's CPU seconds per SIZE, and the rounds' MiB/s."""
    ports: Any = multiprocessing.Queue()
    relay = multiprocessing.Process(target=_relay, args=(folder, kind, upstream_port, ports), daemon=True)
    relay.start()
    try:
        port = ports.get(timeout=30)
        assert relay.pid is not None
        process = psutil.Process(relay.pid)
        before = process.cpu_times()
        times: Any = multiprocessing.Queue()
        sink = multiprocessing.Process(target=_sink, args=(folder, port, rounds, times))
        sink.start()
        speeds = [SIZE / 2**20 / times.get(timeout=120) for _ in range(rounds)]
        sink.join(30)
        after = process.cpu_times()
    finally:
        relay.kill()
    return (after.user + after.system - before.user - before.system) / rounds, speeds


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        _contexts(folder)
        ports: Any = multiprocessing.Queue()
        source = multiprocessing.Process(target=_source, args=(folder, ports), daemon=True)
        source.start()
        upstream_port = ports.get(timeout=30)
        cpu: dict[str, list[float]] = {"tunnel": [], "bare": []}
        try:
            for _ in range(3):
                for kind in cpu:
                    seconds, speeds = _one(folder, kind, upstream_port, rounds)
                    cpu[kind].append(seconds)
                    print(f"{kind:<7} {seconds:.3f} CPU s per 64 MiB  "
                          f"(MiB/s {', '.join(f'{speed:.0f}' for speed in speeds)})", flush=True)
        finally:
            source.kill()
    tunnel, bare = statistics.median(cpu["tunnel"]), statistics.median(cpu["bare"])
    print(f"\nmedian CPU s per 64 MiB: the gateway's tunnel {tunnel:.3f}, the bare floor {bare:.3f} "
          f"({tunnel / bare:.2f}x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
