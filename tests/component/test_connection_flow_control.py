"""Reading paused and resumed on a connection the express lane serves
(proxy.server.connection): a client that pipelines more than a head's
limit of requests behind an answer still under way is stopped reading
from (RequestHandler._pause_reading_for_buffer, one of aiohttp's private
names), read from again once the lane has taken enough of what waits
(_resume_reading_for_buffer), and every request is answered, in order.

These branches run only when a client is far ahead of its answers, which
no other test makes happen; here they run against the aiohttp installed,
so a renamed internal fails on the path that uses it, not only in
tests/unit/test_aiohttp_internals.py."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

import pytest
from aiohttp import web

from proxy.passthrough.express import MAX_HEAD_BYTES
from proxy.server.connection import _RequestHandler
from tests.fakes.apiserver import FakeAPIServer
from tests.support.express import express_answers, warm_gateway


async def read_whole_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One answer's status and body (Content-Length or chunked)."""
    async with asyncio.timeout(10):
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        status = int(head.split(" ", 2)[1])
        fields = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip()
                  for line in head.split("\r\n")[1:] if line}
        if "content-length" in fields:
            return status, await reader.readexactly(int(fields["content-length"]))
        assert fields.get("transfer-encoding") == "chunked", fields
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
        return status, body


async def test_a_client_far_ahead_of_its_answers_waits_and_gets_every_answer_in_order(
        make_gateway: Any, fake_api_server: FakeAPIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    held, release = asyncio.Event(), asyncio.Event()

    async def hold_the_first(request: web.Request) -> web.StreamResponse:
        """Each request's number in its answer; the first answer held until released."""
        number = request.query.get("n")
        if number == "0":
            held.set()
            await release.wait()
        return web.json_response({"kind": "ConfigMapList", "items": [], "n": number})

    targets: list[str] = []
    _seen, gateway, _user, path, auth = await warm_gateway(make_gateway, fake_api_server, hold_the_first, targets)

    # Spies: each call of the connection's pause and resume, with how many
    # bytes were waiting for the lane then (they pass the call on).
    paused_at: list[int] = []
    resumed_at: list[int] = []
    pause, resume = _RequestHandler._pause_reading_for_buffer, _RequestHandler._resume_reading_for_buffer

    def pause_spy(self: _RequestHandler) -> None:
        paused_at.append(len(self._express_waiting))
        pause(self)

    def resume_spy(self: _RequestHandler) -> None:
        resumed_at.append(len(self._express_waiting))
        resume(self)

    monkeypatch.setattr(_RequestHandler, "_pause_reading_for_buffer", pause_spy)
    monkeypatch.setattr(_RequestHandler, "_resume_reading_for_buffer", resume_spy)

    def get(number: int) -> bytes:
        return f"GET {path}?n={number} HTTP/1.1\r\nHost: g\r\n{auth}X-Pad: {'p' * 300}\r\n\r\n".encode()

    behind = b""
    count = 1
    while len(behind) <= 3 * MAX_HEAD_BYTES:  # the limit passed, and room for more than one answer under it
        behind += get(count)
        count += 1
    before = express_answers(gateway)
    context = ssl.create_default_context(cafile=str(gateway.ca_file))
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port, ssl=context)
    try:
        writer.write(get(0))
        await asyncio.wait_for(held.wait(), 10)  # the lane's answer to the first is under way
        writer.write(behind)
        await writer.drain()
        try:
            async with asyncio.timeout(10):
                while not paused_at:
                    await asyncio.sleep(0.01)
        except TimeoutError:
            pytest.fail(f"{len(behind)} bytes behind an answer under way, and reading was never paused")
        assert resumed_at == [] and len(targets) == 1  # nothing more is taken while the first is held
        release.set()
        answers = [await read_whole_answer(reader) for _ in range(count)]
    finally:
        writer.close()

    assert [status for status, _body in answers] == [200] * count
    assert [json.loads(body)["n"] for _status, body in answers] == [str(number) for number in range(count)]
    assert [target.rpartition("?")[2] for target in targets] == [f"n={number}" for number in range(count)]
    assert express_answers(gateway) - before == count  # every one on the lane
    # Paused only past the limit, resumed only under it, as often as paused
    # (more than once if the rest of the bytes arrive after a resume).
    assert paused_at and all(waiting > MAX_HEAD_BYTES for waiting in paused_at)
    assert len(resumed_at) == len(paused_at) and all(waiting <= MAX_HEAD_BYTES for waiting in resumed_at)
