"""After a burst of streams ends, the heap trimmer runs a full collection
(proxy.server.heap): CPython's free lists, emptied by it, hold the last
objects the burst freed, and keep pymalloc's arenas resident
(bench/watch_close_probe.py measures how much). Real watches through the
gateway, against a FAKE API server (a real one needs the cluster) that
holds each watch open after one event."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from aiohttp import web

from proxy import keys
from proxy.server.heap import HeapTrimmer
from tests.component.test_stream_ends import ADDED, raw_get
from tests.fakes.apiserver import FakeAPIServer
from tests.fakes.kube import FakeTokenIssuer
from tests.support.gatewayclient import provisioned_workspace

WATCHES = 8


async def until(condition: Any) -> None:
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0.01)


async def test_a_full_collection_follows_the_end_of_a_burst_of_streams_and_not_before(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    async def one_event_then_hold(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(ADDED)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    _server, upstream = await fake_api_server(one_event_then_hold)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    streams = gateway.server.app[keys.STREAMS]
    user, path = await provisioned_workspace(gateway)
    # The gateway's own trimmer, with a burst as small as this test's.
    trimmer = HeapTrimmer(None, streams=streams.take_high_water, least=WATCHES // 2)
    opened = [await raw_get(gateway, f"{path}?watch=true", user.token) for _ in range(WATCHES)]
    assert all(head.startswith(b"HTTP/1.1 200 ") for _, _, head in opened)
    assert streams.count == WATCHES

    assert not trimmer.collect_after_burst(), "no full collection while the streams are open"
    for _, writer, _ in opened[1:]:
        writer.close()
    await until(lambda: streams.count == 1)
    full_before = gc.get_stats()[2]["collections"]
    assert trimmer.collect_after_burst()
    assert gc.get_stats()[2]["collections"] > full_before and trimmer.collections == 1
    assert not trimmer.collect_after_burst(), "one collection per burst"

    opened[0][1].close()
    await until(lambda: streams.count == 0)
    assert not trimmer.collect_after_burst(), "one stream ending is no burst"
