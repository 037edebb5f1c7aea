"""FAKE API servers, for faults a real API server cannot be made to produce
on cue; every test using one says so."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from provisioning.kube.client import ClusterEndpoint, KubeClient


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


class RealTokensFakeUpstream:
    """The real client for TokenRequests; the fake server as proxy upstream."""

    def __init__(self, real: KubeClient, upstream: str) -> None:
        self._real = real
        self.endpoint = ClusterEndpoint(upstream, None)
        self.ca_base64 = real.ca_base64

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
