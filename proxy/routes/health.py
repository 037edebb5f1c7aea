"""Liveness and readiness: unauthenticated, and cheap. (Metrics have a
listener of their own: proxy/server/metrics_listener.py.)"""

from __future__ import annotations

import asyncio

from aiohttp import web

from proxy import keys

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """Ready when the database and the API server answer (the contract's
    readiness): a replica that cannot reach either would answer every
    request with 503. The event listener is reported, not required: while
    it is away the replica serves short requests from the database and
    refuses only streams (proxy.passthrough.gate), and behind a pooler
    that never delivers notifications, requiring it would leave the
    Service with no endpoint at all."""
    database, cluster = await asyncio.gather(
        request.app[keys.DATABASE].ping(), request.app[keys.KUBE].reachable())
    events = request.app[keys.EVENTS].connected
    checks = {"database": "ok" if database else "unavailable", "kubernetes": "ok" if cluster else "unavailable",
              "events": "ok" if events else "unavailable"}
    ready = database and cluster
    return web.json_response({"status": "ok" if ready else "unavailable", "checks": checks},
                             status=200 if ready else 503)

