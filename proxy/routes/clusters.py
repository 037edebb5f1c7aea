"""The gateway admins' view of the fleet: each configured cluster, whether
it answers now and with which version, and what it holds."""

from __future__ import annotations

import asyncio

from aiohttp import web

from provisioning.db import repositories as repo
from provisioning.errors import GatewayError
from provisioning.fleet import Cluster
from proxy import keys
from proxy.routes.common import admin

routes = web.RouteTableDef()
CLUSTER_CHECK_SECONDS = 3.0
"""Each cluster's answer is waited for this long: one that hangs shows as unreachable, the others still show."""


async def _version(cluster: Cluster) -> str | None:
    """The API server's version (`gitVersion`), None if it does not answer in time."""
    try:
        answer = await asyncio.wait_for(cluster.kube.get("/version"), CLUSTER_CHECK_SECONDS)
    except (GatewayError, TimeoutError):
        return None
    version = answer.get("gitVersion")
    return str(version) if version else ""


@routes.get("/api/v1/clusters")
async def list_clusters(request: web.Request) -> web.Response:
    await admin(request)
    fleet = request.app[keys.FLEET]
    occupancy = await repo.cluster_occupancy(request.app[keys.DATABASE])
    versions = await asyncio.gather(*(_version(cluster) for cluster in fleet.values()))
    answer = []
    for cluster, version in zip(fleet.values(), versions):
        workspaces, dedicated_to = occupancy.get(cluster.name, (0, None))
        answer.append({"name": cluster.name, "labels": dict(cluster.settings.labels), "kind": cluster.settings.kind,
                       "reachable": version is not None, "version": version or None, "workspaces": workspaces,
                       "dedicated_to": str(dedicated_to) if dedicated_to is not None else None})
    return web.json_response(answer)
