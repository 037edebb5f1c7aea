"""FAKE API servers, for faults a real API server cannot be made to produce
on cue; every test using one says so.

`fake_api_server` and `api_server` are fixtures (registered in
tests/component/conftest.py); `FakeUpstream` is a ready-made fault server
for the integration ring, where the real API server still issues tokens."""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.passthrough.upstream import Upstream

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FakeAPIServer = Callable[..., Awaitable[tuple[TestServer, Upstream]]]
"""`fake_api_server(handler, **server_options)`: the FAKE server and the
pass-through upstream to it."""
RecordingAPIServer = tuple[list[dict[str, str]], Upstream]
"""What `api_server` gives: the headers of each request it took, and the upstream to it."""


@pytest.fixture
async def fake_api_server(aiohttp_server: Any) -> AsyncIterator[FakeAPIServer]:
    """Starts a FAKE API server that answers every path with the handler it
    is given (server options such as `ssl` passed on), and the pass-through
    upstream to it; the upstreams are closed at the end."""
    upstreams: list[Upstream] = []

    async def start(handler: Handler, **server_options: Any) -> tuple[TestServer, Upstream]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        server: TestServer = await aiohttp_server(app, **server_options)
        scheme = "https" if "ssl" in server_options else "http"
        upstreams.append(Upstream(f"{scheme}://127.0.0.1:{server.port}", None))
        return server, upstreams[-1]

    yield start
    for upstream in upstreams:
        upstream.close()


@pytest.fixture
async def api_server(fake_api_server: FakeAPIServer) -> RecordingAPIServer:
    """A FAKE API server that answers every request with an empty list and
    keeps the headers it was sent."""
    seen: list[dict[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"kind": "ConfigMapList", "items": []})

    _server, upstream = await fake_api_server(answer)
    return seen, upstream


class FakeUpstream:
    """A FAKE API server for faults only: it redirects, or starts an answer
    (one watch event) and then drops the connection."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.offered_subprotocols: list[str | None] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(request.path)
        self.offered_subprotocols.append(request.headers.get("Sec-WebSocket-Protocol"))
        if request.path.endswith("/redirect-me"):
            raise web.HTTPFound("/api/v1/namespaces/kube-system/secrets")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{}}\n')
        assert request.transport is not None
        request.transport.close()
        return response
