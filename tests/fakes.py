"""FAKE API servers, for faults a real API server cannot be made to produce
on cue; every test using one says so."""

from __future__ import annotations

from aiohttp import web


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
        request.transport.close()  # type: ignore[union-attr]
        return response
