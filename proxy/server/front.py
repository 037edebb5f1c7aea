"""What every request and every response goes through, whatever its route:
the front middleware (drain, request id, CORS preflight, the error
rendering) and the response hook (request id, security headers, CORS,
metrics), which proxy.app installs. What aiohttp cannot parse as a request
at all is answered by the connection handler (proxy.server.connection).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from aiohttp import HttpVersion11, hdrs, web

from provisioning.errors import ShuttingDown, StoppedMidRequest
from proxy import keys
from proxy.http import logs
from proxy.http.answer_headers import new_request_id, stamp
from proxy.http.draining import Drain
from proxy.http.errors import error_response, failure_answer, render
from proxy.http.metrics import Metrics
from proxy.settings import Settings

log = logging.getLogger(__name__)

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
    every failure rendered as the contract's error (proxy.http.errors)."""

    @web.middleware
    async def front(request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if drain.refuses(request.path):
            return render(request, ShuttingDown())
        task = asyncio.current_task()
        assert task is not None
        drain.enter(task)
        try:
            request_id = new_request_id()
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
            if not drain.owes_refusal(task, began=request.writer.output_size > 0):
                raise
            return render(request, StoppedMidRequest())
        finally:
            drain.leave(task)

    return front


async def answer_expect(request: web.Request) -> web.StreamResponse | None:
    """The answer to an `Expect` header, which aiohttp asks each route for
    before any middleware runs. Its default answers an expectation other
    than 100-continue with a text/plain 417 that skips the contract's
    error shape; this one answers in it. 100-continue is met as aiohttp
    meets it: the client may send its body."""
    if request.headers.get(hdrs.EXPECT, "").lower() == "100-continue":
        if request.version == HttpVersion11:
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the answer itself is yet to start
        return None
    return error_response(request, 417, "expectation_failed", "the only expectation met here is 100-continue")


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
        stamp(headers, context[0] if context is not None else None)
        origin = request.headers.get(hdrs.ORIGIN)
        if origin and origin in cors_origins:
            headers["Access-Control-Allow-Origin"] = origin
            headers["Access-Control-Allow-Credentials"] = "true"
            headers["Access-Control-Expose-Headers"] = _CORS_EXPOSED
            headers.add("Vary", "Origin")
        observe(_route_label(request, route_labels), response.status,
                time.perf_counter() - context[1] if context is not None else None)

    return on_response_prepare
