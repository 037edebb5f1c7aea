"""The application factory: wiring only.

`create_app` registers routes and middlewares and owns every long-lived
resource through `cleanup_ctx` (database pool, event listener, the gateway's
Kubernetes client, the pass-through upstream, the heap trimmer, the metrics
listener), so start-up and shutdown order are explicit and tests build the
very same app. Each cleanup step is bounded by what is left of the stop's
deadline (proxy.draining), so a database or API server that is gone cannot
hold the process past GATEWAY_SHUTDOWN_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import secrets
import time
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from aiohttp import hdrs, web
from multidict import istr

from provisioning.db.migrate import migrate
from provisioning.db.pool import Database
from provisioning.events import EventListener
from provisioning.kube.client import KubeClient
from proxy import keys, logs
from proxy.auth.authenticating import Authenticator
from proxy.auth.oidc_registry import OIDCRegistry
from proxy.draining import Drain
from proxy.errors import error_response, failure_answer
from proxy.heap import HeapTrimmer, glibc_malloc_trim
from proxy.metrics import Metrics
from proxy.metrics_listener import metrics_listener
from proxy.passthrough.gate import setup_passthrough
from proxy import openapi
from proxy.routes import accounts, console, device, health, sso, workspaces
from proxy.settings import Settings

# istr names: multidict need not fold their case on every response.
_SECURITY_HEADERS = (
    (hdrs.X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (hdrs.X_FRAME_OPTIONS, "DENY"),
    (istr("Referrer-Policy"), "no-referrer"),
)
_REQUEST_ID = istr("X-Request-Id")
_API_CSP = "default-src 'none'; frame-ancestors 'none'"
# Request ids only need to be unique, not secret: a per-process random prefix
# and a counter cost a fraction of a uuid4 (which reads the OS RNG).
_ID_PREFIX = secrets.token_hex(4) + "-"
_REQUEST_NUMBERS = itertools.count(1)
_CORS_METHODS = "GET, POST, PUT, PATCH, DELETE"
_CORS_HEADERS = "Authorization, Content-Type, X-CSRF-Token"
# What a page may read beyond the CORS-safelisted headers, exactly:
# Retry-After (when to retry a 429 or 503, the gateway's or the API server's),
# Warning (the API server's deprecation and admission warnings, which kubectl
# prints and a UI should show), Audit-Id (the API server's id of the request
# in the cluster's audit log) and X-Request-Id (the gateway's id of it in its
# own log): what a user needs to act on an answer, or to report it.
_CORS_EXPOSED = "Retry-After, Warning, Audit-Id, X-Request-Id"


def _route_label(request: web.Request, known: dict[object, str]) -> str:
    """The metrics label of the request's route; `known` keeps those of the
    app's own routes (each is four property lookups away otherwise)."""
    info = request.match_info
    route = info.route if info is not None else None
    label = known.get(route)
    if label is not None:
        return label
    resource = route.resource if route is not None else None
    if resource is None:
        return "unmatched"  # no route (a 404), or a system route, made anew per request
    label = known[route] = resource.canonical
    return label


def front_middleware(drain: Drain) -> Callable[..., Awaitable[web.StreamResponse]]:
    """What every request goes through, outermost first, as one coroutine
    (three middlewares cost three on every request): the drain (a new
    request during a stop is refused; those in flight are counted, and one
    cancelled at the end of the drain still answers 503), the request id for
    logs and responses, the CORS preflight answered before routing, and
    every failure rendered as the contract's error (proxy.errors)."""
    tasks = drain.tasks

    @web.middleware
    async def front(request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if drain.started_at is not None:
            refused = drain.refusal(request)
            if refused is not None:
                return refused
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)  # drain.enter, without a call
        try:
            request_id = f"{_ID_PREFIX}{next(_REQUEST_NUMBERS):x}"
            request[keys.CONTEXT] = (request_id, time.perf_counter())
            token = logs.request_id.set(request_id)
            try:
                if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
                    return _preflight(request)
                try:
                    return await handler(request)
                except Exception as error:
                    return failure_answer(request, error)
            finally:
                logs.request_id.reset(token)
        except asyncio.CancelledError:
            answer = drain.cancelled(request, task)
            if answer is None:
                raise
            return answer
        finally:
            tasks.discard(task)  # drain.leave, without a call while nothing waits for the drain
            if drain.watched:
                drain.settle(task)

    return front


def _preflight(request: web.Request) -> web.StreamResponse:
    origin = request.headers.get("Origin", "")
    if origin not in request.app[keys.SETTINGS].cors_origins:
        return error_response(request, 403, "cors_origin_refused", "this origin may not call the gateway")
    return web.Response(status=204, headers={
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Credentials": "true",
        "Access-Control-Allow-Methods": _CORS_METHODS,
        "Access-Control-Allow-Headers": _CORS_HEADERS,
        "Access-Control-Max-Age": "600",
        "Vary": "Origin",
    })


def response_hook(settings: Settings, metrics: Metrics) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """What runs for every response, streamed ones included, just before its
    headers go out; bound to the app's settings and metrics once."""
    cors_origins = settings.cors_origins
    observe = metrics.observe_request
    route_labels: dict[object, str] = {}

    async def on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
        headers = response.headers
        # Set by the front middleware (not on a request refused while draining).
        context = request.get(keys.CONTEXT)
        if context is not None:
            headers[_REQUEST_ID] = context[0]
        for name, value in _SECURITY_HEADERS:
            headers.setdefault(name, value)
        # aiohttp has already written "Python/3.x aiohttp/3.x" here: versions help only an attacker.
        headers[hdrs.SERVER] = "tenant-gateway"
        # Every answer is data, never a page: even a pod log opened by navigation
        # runs nothing. The console's own pages bring theirs (proxy.routes.console).
        headers.setdefault(hdrs.CONTENT_SECURITY_POLICY, _API_CSP)
        origin = request.headers.get(hdrs.ORIGIN)
        if origin and origin in cors_origins:
            headers["Access-Control-Allow-Origin"] = origin
            headers["Access-Control-Allow-Credentials"] = "true"
            headers["Access-Control-Expose-Headers"] = _CORS_EXPOSED
            headers.add("Vary", "Origin")
        observe(_route_label(request, route_labels), response.status,
                time.perf_counter() - context[1] if context is not None else None)

    return on_response_prepare


def public_ca_base64(settings: Settings, kube: KubeClient) -> str:
    if settings.public_ca_file is not None:
        return base64.b64encode(Path(settings.public_ca_file).read_bytes()).decode()
    return kube.ca_base64


def create_app(settings: Settings, *, database_dsn: str, apply_migrations: bool = True,
               kube: KubeClient | None = None) -> web.Application:
    """`kube` replaces the gateway's client: tests use it to inject faults a
    real API server cannot be made to produce on cue."""
    drain = Drain(settings.shutdown_drain_seconds, settings.shutdown_timeout_seconds)
    app = web.Application(middlewares=[front_middleware(drain)],
                          client_max_size=settings.max_body_bytes)
    app[keys.SETTINGS] = settings
    app[keys.DRAIN] = drain
    app[keys.METRICS] = metrics = Metrics()
    app.on_response_prepare.append(response_hook(settings, metrics))

    async def identity_providers(app: web.Application) -> AsyncIterator[None]:
        registry = OIDCRegistry(settings.oidc_providers)
        app[keys.OIDC] = registry
        yield
        await registry.close()

    async def database(app: web.Application) -> AsyncIterator[None]:
        db = await Database.connect(database_dsn, on_checkout=app[keys.METRICS].database_checkouts.inc)
        if apply_migrations:
            async with db.connection() as connection:
                await migrate(connection)
        app[keys.DATABASE] = db
        events = EventListener(database_dsn)
        app[keys.EVENTS] = events
        app[keys.AUTHENTICATOR] = Authenticator(db, settings.session_secret_value, events, oidc=app[keys.OIDC])
        await events.start()
        yield
        # Last to stop: everything before may still write (queued audit rows).
        await events.stop(timeout=min(2.0, drain.remaining() / 2))
        await db.close(timeout=max(0.2, drain.remaining() - 0.5))

    async def kubernetes(app: web.Application) -> AsyncIterator[None]:
        client = kube or await KubeClient.from_kubeconfig(settings.kubeconfig)
        app[keys.KUBE] = client
        app[keys.PUBLIC_CA_BASE64] = public_ca_base64(settings, client)
        yield
        if kube is None:
            await client.close()

    async def heap(app: web.Application) -> AsyncIterator[None]:
        trimmer = HeapTrimmer(glibc_malloc_trim())
        await trimmer.start()
        yield
        await trimmer.stop()

    app.cleanup_ctx.extend([identity_providers, database, kubernetes, heap, metrics_listener(settings)])
    for table in (health.routes, accounts.routes, sso.routes, device.routes, workspaces.routes, openapi.routes,
                  console.routes):
        app.router.add_routes(table)
    setup_passthrough(app)
    return app


def handler_args() -> dict[str, Any]:
    """Server knobs for `serve`: no per-request access log (metrics count
    requests; errors are logged with their request id), and header limits
    large enough for kubectl's long Accept headers and big session cookies."""
    return {"access_log": None, "max_field_size": 16 * 1024, "max_line_size": 16 * 1024}
