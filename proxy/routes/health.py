"""Liveness and readiness: unauthenticated, and cheap. (Metrics have a
listener of their own: proxy/server/metrics_listener.py.)"""

from __future__ import annotations

import asyncio

from aiohttp import web

from provisioning.kube.client import KubeApi
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
    Service with no endpoint at all.

    With several clusters, one that is down affects only its workspaces
    (their requests answer 503 naming it): the replica stays ready while
    the database answers, and names the unreachable clusters in
    `degraded` (status `degraded`, still 200). Each cluster gets
    CLUSTER_CHECK_SECONDS: one that hangs must not hold the probe."""
    fleet = request.app[keys.FLEET]
    database, *reachable = await asyncio.gather(
        request.app[keys.DATABASE].ping(),
        *(_reachable(cluster.kube, several=len(fleet) > 1) for cluster in fleet.values()))
    events = request.app[keys.EVENTS].connected
    clusters = dict(zip(fleet, reachable))
    down = [name for name, up in clusters.items() if not up]
    checks: dict[str, object] = {"database": "ok" if database else "unavailable",
                                 "kubernetes": "ok" if not down else "unavailable",
                                 "events": "ok" if events else "unavailable"}
    if len(fleet) == 1:
        ready = database and not down
        return web.json_response({"status": "ok" if ready else "unavailable", "checks": checks},
                                 status=200 if ready else 503)
    checks["kubernetes"] = "ok" if not down else ("degraded" if len(down) < len(fleet) else "unavailable")
    checks["clusters"] = {name: "ok" if up else "unavailable" for name, up in clusters.items()}
    status = "unavailable" if not database else ("degraded" if down else "ok")
    return web.json_response({"status": status, "checks": checks, "degraded": down},
                             status=200 if database else 503)


CLUSTER_CHECK_SECONDS = 3.0


async def _reachable(kube: KubeApi, *, several: bool) -> bool:
    if not several:
        return await kube.reachable()
    try:
        return await asyncio.wait_for(kube.reachable(), CLUSTER_CHECK_SECONDS)
    except TimeoutError:
        return False

