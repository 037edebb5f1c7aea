"""Where a stalled stream's memory goes: the gateway's stream relay alone,
without a cluster (`python -m bench.stalled_probe`; no lock needed).

Three processes, as in the stalled-readers row (workloads/stalled.py): an
"API server" (a TLS server answering every watch with two events of 512
KiB as fast as its socket takes them, then keeping the stream open), the
relay (aiohttp over TLS on uvloop, the real http1.Pool and
relaying._relay_stream with the request options a watch gets), and
clients with 4 KiB receive buffers that read the answer's head and nothing
more. At N and 10N stalled readers the relay's RSS is read from /proc, and
the relay reports glibc's mallinfo2 (bytes in use and free in the heap) and
what tracemalloc sees Python and uvloop allocate (`--trace`: tracemalloc
inflates RSS, so those runs give the breakdown, not the RSS). The
difference between the two steps, per added reader, is the cost of one
stalled stream; what is in the heap and not traced is OpenSSL's (its
connection state and memory BIOs).

Not a row: the relay is not the whole gateway (no gate, no audit, no
slots), and the "API server" is not Go's. It isolates what the relay and its
TLS layers keep per stream. Results are printed, not recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import tracemalloc
import types
import urllib.request
from pathlib import Path
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from bench.heap_view import mallinfo2
from devstack import pki
from proxy.passthrough.backpressure import STREAM_READ_AHEAD
from proxy.passthrough.http1 import Pool
from proxy.passthrough.relaying import _relay_stream
from proxy.passthrough.stream_buffers import StreamBuffers


def _event(size: int) -> bytes:
    """A watch event of about `size` bytes, one JSON line."""
    return b'{"type":"ADDED","object":{"data":"' + b"x" * max(size - 40, 1) + b'"}}\n'

_SETTLE_SECONDS = 10


def _heap() -> dict[str, int]:
    info = mallinfo2()
    return {"in_use": info["heap_in_use"] + info["mapped_apart"], "free": info["heap_free"]}


async def _api_server(port: int, folder: Path, event_bytes: int) -> None:
    event = _event(event_bytes)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(2):
            writer.write(b"%x\r\n" % len(event) + event + b"\r\n")
            await writer.drain()
        await asyncio.sleep(3600)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "server.crt", folder / "server.key")
    server = await asyncio.start_server(serve, "127.0.0.1", port, ssl=context, backlog=1024)
    async with server:
        await server.serve_forever()


async def _relay(port: int, upstream_port: int, folder: Path) -> None:
    pool = Pool(f"https://127.0.0.1:{upstream_port}", ssl.create_default_context(cafile=str(folder / "ca.crt")))
    relay: Any = types.SimpleNamespace(streams=types.SimpleNamespace(buffers=StreamBuffers()))
    ended: Any = types.SimpleNamespace(take_end=lambda: None)

    async def watch(request: web.Request) -> web.StreamResponse:
        # As relaying._request asks for a long-running request.
        answer = await pool.request("GET", "/watch", CIMultiDict(), timeout=None, read_ahead=STREAM_READ_AHEAD)
        return await _relay_stream(request, answer, ended, relay)

    async def report(request: web.Request) -> web.Response:
        traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else None
        return web.json_response({**_heap(), "traced": traced, "held": relay.streams.buffers.total})

    app = web.Application()
    app.router.add_get("/watch", watch)
    app.router.add_get("/report", report)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "server.crt", folder / "server.key")
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context, backlog=1024).start()
    await asyncio.sleep(3600)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def _stalled(port: int, context: ssl.SSLContext) -> asyncio.StreamWriter:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, ssl=context, server_hostname="127.0.0.1")
    writer.write(b"GET /watch HTTP/1.1\r\nHost: relay\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    return writer


def _report(port: int, context: ssl.SSLContext) -> dict[str, Any]:
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/report", context=context) as answer:
        return dict(json.load(answer))


async def _drive(relay_pid: int, port: int, folder: Path, first: int) -> list[dict[str, Any]]:
    context = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    writers: list[asyncio.StreamWriter] = []
    samples = []
    for step in (first, 10 * first):
        while len(writers) < step:
            writers += await asyncio.gather(*(_stalled(port, context) for _ in range(min(10, step - len(writers)))))
        await asyncio.sleep(_SETTLE_SECONDS)
        report = await asyncio.to_thread(_report, port, context)
        samples.append({"stalled": step, "rss_kib": _rss_kib(relay_pid), **report})
    for writer in writers:
        writer.close()
    return samples


def _per_reader(samples: list[dict[str, Any]]) -> dict[str, float]:
    first, last = samples
    added = last["stalled"] - first["stalled"]
    result = {"rss_kib": (last["rss_kib"] - first["rss_kib"]) / added,
              "heap_in_use_kib": (last["in_use"] - first["in_use"]) / 1024 / added,
              "heap_free_kib": (last["free"] - first["free"]) / 1024 / added}
    if first["traced"] is not None:
        result["traced_kib"] = (last["traced"] - first["traced"]) / 1024 / added
        result["heap_untraced_kib"] = result["heap_in_use_kib"] - result["traced_kib"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("api", "relay"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ports", type=int, nargs=2, default=(18543, 18544), help="the API server's, the relay's")
    parser.add_argument("--first", type=int, default=20, help="N: the first step (the second is 10N)")
    parser.add_argument("--event-kib", type=int, default=512,
                        help="each of the two initial events (512: the row's; 0: an idle watch's cost)")
    parser.add_argument("--trace", action="store_true", help="tracemalloc in the relay (the breakdown, not the RSS)")
    options = parser.parse_args()
    api_port, relay_port = options.ports
    if options.role is not None:
        import uvloop

        if options.trace:
            tracemalloc.start()
        serve = (_api_server(api_port, options.folder, options.event_kib * 1024) if options.role == "api"
                 else _relay(relay_port, api_port, options.folder))
        uvloop.run(serve)
        return
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        ca, ca_key = pki.make_ca("stalled-probe-ca")
        ca.write(folder, "ca")
        pki.issue(ca, ca_key, common_name="probe", server_hosts=("127.0.0.1",)).write(folder, "server")
        command = [sys.executable, "-m", "bench.stalled_probe", "--folder", str(folder), "--ports", *map(str, options.ports),
                   "--event-kib", str(options.event_kib)]
        extra = ["--trace"] if options.trace else []
        processes = [subprocess.Popen([*command, "--role", "api"]),
                     subprocess.Popen([*command, "--role", "relay", *extra], env={**os.environ})]
        try:
            time.sleep(2)
            samples = asyncio.run(_drive(processes[1].pid, relay_port, folder, options.first))
        finally:
            for process in processes:
                process.terminate()
                process.wait()
    print(json.dumps({"samples": samples, "per_added_reader": _per_reader(samples)}, indent=2))


if __name__ == "__main__":
    main()
