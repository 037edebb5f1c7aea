"""`/metrics` on a listener of its own (GATEWAY_METRICS_LISTEN).

Tenants' pods can reach the gateway's public listener: it is the API they
use. Request counts per route and status, open-stream gauges and token
results describe every tenant at once, so they are not served there (the
public listener answers 404 for `/metrics`, whatever is configured). The
metrics listener is plain HTTP, loopback by default; a Deployment binds it to
the pod address for Prometheus and keeps everyone else out with a
NetworkPolicy (deploy/kubernetes/networkpolicy.yaml). It is a `cleanup_ctx`
of the main application, so it starts and stops with it and tests get it
from the same factory.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Callable

from aiohttp import web

from proxy import keys
from proxy.http.metrics import CONTENT_TYPE_LATEST
from proxy.server.serving import bind
from proxy.settings import Settings

routes = web.RouteTableDef()


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    metrics = request.app[keys.METRICS]
    metrics.loop_tasks.set(len(asyncio.all_tasks()))
    metrics.requests_in_flight.set(request.app[keys.DRAIN].in_flight)
    audit = request.app[keys.AUDIT]
    metrics.observe_audit(stored=audit.rows_written, logged=audit.rows_logged, waits=audit.queue.waits,
                          refusals=audit.queue.refusals, taken=audit.queue.taken, capacity=audit.queue.capacity)
    body = metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def metrics_listener(settings: Settings) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context serving the app's metrics on the metrics address;
    the address it bound (port 0 picks one) is `app[keys.METRICS_ADDRESS]`."""

    async def listen(app: web.Application) -> AsyncIterator[None]:
        listener = web.Application()
        listener[keys.METRICS] = app[keys.METRICS]
        listener[keys.DRAIN] = app[keys.DRAIN]
        listener[keys.AUDIT] = app[keys.AUDIT]
        listener.router.add_routes(routes)
        runner = web.AppRunner(listener, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, settings.metrics_listen.host, settings.metrics_listen.port)
            await bind(site, "metrics_listen", settings, " (a port of 0 takes any free one)")
            host, port = runner.addresses[0][:2]
            app[keys.METRICS_ADDRESS] = (str(host), int(port))
            yield
        finally:
            await runner.cleanup()

    return listen
