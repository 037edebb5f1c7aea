"""What every request and every response goes through, whatever its route:
the front middleware (drain, request id, CORS preflight, the error
rendering) and the response hook (request id, security headers, CORS,
metrics), which proxy.app installs; and, for what aiohttp cannot parse as a
request at all, the answer `GatewayRunner` gives in their place.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from typing import Awaitable, Callable

from aiohttp import HttpVersion11, hdrs, web
from aiohttp.web_protocol import RequestHandler
from multidict import istr

from proxy import keys, logs
from proxy.draining import Drain
from proxy.errors import error_body, error_response, failure_answer
from proxy.metrics import Metrics
from proxy.settings import Settings

log = logging.getLogger(__name__)

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


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_REQUEST_NUMBERS):x}"


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
        tasks.add(task)  # in flight, for the drain
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
            answer = drain.cancelled(request, task)
            if answer is None:
                raise
            return answer
        finally:
            tasks.discard(task)
            # Only while a stop waits for the drain: was this the last?
            if drain.watched:
                drain.settle(task)

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


class _RequestHandler(RequestHandler):
    """aiohttp's connection handler, but for what it answers itself: a
    request it cannot parse (a header line over the limit, a control byte
    in a header, a broken chunk size), answered before any route,
    middleware or response hook runs. aiohttp's own answer is a text/plain
    page quoting the offending bytes, with its version in Server and none
    of the security headers, and it logs an ERROR with a traceback: client
    input would fill the error log. Here the answer is the contract's error
    with the headers every answer carries, logged as one INFO line naming
    the kind of fault, never its bytes (a header line may hold a token). A
    failure past the front middleware (a bug) is still logged with its
    traceback."""

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # an answer is under way: aiohttp breaks the connection
            return super().handle_error(request, status, exc, message)
        request_id = new_request_id()
        if status >= 500:
            if exc is not None:  # a bug
                self.log_exception("unhandled error", exc_info=exc, extra={"request_id": request_id})
            else:  # aiohttp's own (a handler past its time): no traceback to give
                log.warning("request not answered", extra={"request_id": request_id, "status": status})
            code, text = "internal_error", "the gateway failed to handle the request"
        else:
            log.info("request not understood", extra={
                "request_id": request_id, "status": status, "fault": type(exc).__name__ if exc else None})
            code, text = "bad_request", "the request is not well-formed HTTP/1.1"
        response = web.json_response(error_body(status, code, text, kubernetes=False), status=status)
        response.headers.update({_REQUEST_ID: request_id, hdrs.SERVER: "tenant-gateway",
                                 hdrs.CONTENT_SECURITY_POLICY: _API_CSP, **dict(_SECURITY_HEADERS)})
        response.force_close()
        return response


class _Server(web.Server):
    def __call__(self) -> RequestHandler:
        return _RequestHandler(self, loop=self._loop, **self._kwargs)


class GatewayRunner(web.AppRunner):
    """aiohttp's AppRunner, whose connections answer what aiohttp cannot
    parse in the contract's shape (_RequestHandler). `serve` and the tests
    run the app with it."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # The same object, one method more (_Server keeps no state of its
        # own): the app built it with every argument it needs.
        server.__class__ = _Server
        return server
