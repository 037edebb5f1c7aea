"""Stalled readers: watches whose clients stop reading while the API server
has megabytes to send each (the initial events of large ConfigMaps). The
gateway should hold them by TCP back-pressure, not buffer for them: its RSS
as the stalled readers grow from N to 10N stays flat within the replica's
ceiling (GATEWAY_STREAM_BUFFER_BYTES) and the per-connection cost of an
open watch.

Standalone: `python -m bench.workloads.stalled` (starts its own stack)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

from bench.stack import Stack, Tenant
from bench.workloads.common import QUICK, create_configmaps

STALLED = 10 if QUICK else 20
"""N: the first step; the second is 10N."""
_OBJECTS, _OBJECT_BYTES = 2, 512 * 1024
"""1 MiB of initial events per watch. The API server holds a watch's APF seat
until its initial events are written; 12 MiB to a reader that never reads
never are, and a handful of such watches held the tenants' every seat (the
next ones 429, for good). 1 MiB fits the sockets' buffers, so the seat comes
free, and is still eight times what the gateway may hold for one stream."""
_SETTLE_SECONDS = 10
_RECEIVE_BUFFER = 4096
_OPENED_AT_ONCE = 10
"""Watches opened together: the API server's own fairness (APF) answers 429
to a crowd of large initial lists on 2 cores, and the row measures the
gateway, not that."""
_TRIES = 20


class _Refused(Exception):
    def __init__(self, status_line: bytes, retry_after: float) -> None:
        super().__init__(status_line)
        self.status_line, self.retry_after = status_line, retry_after


async def _stalled_watch(stack: Stack, tenant: Tenant, context: ssl.SSLContext) -> asyncio.StreamWriter:
    """A watch through the gateway whose client reads its head and nothing more."""
    url = urlsplit(stack.gateway_url)
    host, port = url.hostname or "127.0.0.1", url.port or 443
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    reader, writer = await asyncio.open_connection(sock=sock, ssl=context, server_hostname=host)
    path = f"/k8s/{tenant.workspace_id}/api/v1/namespaces/{tenant.namespace}/configmaps?watch=1&labelSelector=bench%3Dstalled"
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {tenant.session_token}\r\n\r\n"
                 .encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200 "):
        writer.close()
        retry = next((line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                      if line.lower().startswith(b"retry-after:")), b"1")
        raise _Refused(head.splitlines()[0], float(retry) if retry.isdigit() else 1.0)
    return writer


async def _opened(stack: Stack, tenant: Tenant, context: ssl.SSLContext) -> asyncio.StreamWriter:
    """A stalled watch, its 429 (the API server's APF) retried as it asks."""
    for _ in range(_TRIES - 1):
        try:
            return await _stalled_watch(stack, tenant, context)
        except _Refused as refused:
            if not refused.status_line.startswith(b"HTTP/1.1 429 "):
                raise RuntimeError(f"a stalled watch was refused: {refused.status_line!r}") from None
            await asyncio.sleep(refused.retry_after)
    return await _stalled_watch(stack, tenant, context)


async def stalled_readers(stack: Stack, tenant: Tenant) -> dict[str, Any]:
    await create_configmaps_labelled(stack, tenant)
    context = stack.ssl_context()
    writers: list[asyncio.StreamWriter] = []
    samples = [{"stalled": 0, "rss_mib": stack.gateway_rss_mib()}]
    try:
        for step in (STALLED, 10 * STALLED):
            while len(writers) < step:
                writers += await asyncio.gather(*(_opened(stack, tenant, context)
                                                  for _ in range(min(_OPENED_AT_ONCE, step - len(writers)))))
            await asyncio.sleep(_SETTLE_SECONDS)  # the API server's events fill every buffer that takes them
            async with stack.session() as session:
                held = await stack.metric(session, "tenant_gateway_proxy_stream_buffered_bytes")
                waiting = await stack.metric(session, "tenant_gateway_proxy_streams_waiting_for_clients")
            samples.append({"stalled": step, "rss_mib": stack.gateway_rss_mib(),
                            "held_mib": held / 2**20, "waiting": waiting})
    finally:
        for writer in writers:
            writer.close()
    first, last = samples[1], samples[2]
    return {"samples": samples, "rss_growth_mib": last["rss_mib"] - first["rss_mib"],
            "kib_per_added_stalled_reader": (last["rss_mib"] - first["rss_mib"]) * 1024 / (last["stalled"] - first["stalled"])}


PER_ADDED_READER_KIB = 256
"""The target: what an open watch costs (the watches row holds it to 100 KiB)
plus what one stream may hold for its client (about 130 KiB: a 64 KiB write
mark, 32 KiB read ahead, one piece), and no more: before the marks, a stalled
reader held about 1 MiB per direction."""


def stalled_verdicts(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    per_reader = r["kib_per_added_stalled_reader"]
    steps = " -> ".join(f"{s['rss_mib']:.0f}" for s in r["samples"][1:])
    return [(f"stalled readers N -> 10N: <= {PER_ADDED_READER_KIB} KiB each",
             f"{per_reader:.0f} KiB ({steps} MiB)", per_reader <= PER_ADDED_READER_KIB)]


async def create_configmaps_labelled(stack: Stack, tenant: Tenant) -> None:
    """Large ConfigMaps labelled bench=stalled: what every stalled watch is sent first."""
    await create_configmaps(stack, tenant, "stalled", _OBJECTS, _OBJECT_BYTES)
    assert stack.cluster is not None
    await asyncio.to_thread(stack.cluster.kubectl_run, "-n", tenant.namespace, "label", "--overwrite", "configmap",
                            *(f"stalled-{i}" for i in range(_OBJECTS)), "bench=stalled")


def print_stalled(r: dict[str, Any]) -> None:
    for sample in r["samples"]:
        print(sample)
    print(f"RSS growth {STALLED} -> {10 * STALLED} stalled readers: {r['rss_growth_mib']:.1f} MiB "
          f"({r['kib_per_added_stalled_reader']:.0f} KiB per added reader)")


if __name__ == "__main__":
    from bench.alone import run_alone, with_tenant

    run_alone("stalled-readers", with_tenant(stalled_readers), stalled_verdicts, print_stalled)
