"""Every failure on aiohttp's path, answered as the contract's JSON error.

GatewayError subclasses carry their own status, code and safe message.
aiohttp's own HTTP exceptions (unknown route, wrong method, body too large)
are translated to the same shape. Anything else is a bug: it is logged with
the request id and a traceback summary (proxy.http.logs: frames only, no
values that could hold secrets) and answered as a bare 500 without details.
The answer itself is built by proxy.http.error_answers, as the express lane's
and the connection handler's are; which shape a request gets is decided by
its path (`is_kubernetes_request`).
"""

from __future__ import annotations

import logging

from aiohttp import web

from provisioning.errors import GatewayError
from proxy.http.error_answers import KUBERNETES_PREFIX, ErrorAnswer, answer_to, error_answer, note_failure

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 406: "not_acceptable", 408: "request_timeout", 411: "length_required",
    413: "payload_too_large", 414: "uri_too_long", 415: "unsupported_media_type", 431: "headers_too_large",
}


def is_kubernetes_request(request: web.BaseRequest) -> bool:
    return request.path.startswith(KUBERNETES_PREFIX)


def response(answer: ErrorAnswer) -> web.Response:
    """aiohttp's response carrying `answer`, byte for byte."""
    return web.Response(status=answer.status, body=answer.body, headers=answer.headers)


def error_response(request: web.BaseRequest, status: int, code: str, message: str, *,
                   headers: tuple[tuple[str, str], ...] = (), retry_after: int | None = None) -> web.Response:
    return response(error_answer(status, code, message, kubernetes=is_kubernetes_request(request),
                                 retry_after=retry_after, extra=headers))


def render(request: web.BaseRequest, error: GatewayError) -> web.Response:
    return response(answer_to(error, kubernetes=is_kubernetes_request(request)))


def failure_answer(request: web.BaseRequest, error: Exception) -> web.Response:
    """The answer to what a handler raised; re-raises what is not ours to
    answer. Called from an `except` block (the front middleware's, in
    proxy.server.front), so a bug is logged with its traceback summary."""
    if isinstance(error, GatewayError):
        note_failure(error)
        return render(request, error)
    if isinstance(error, web.HTTPException):
        if error.status < 400:
            raise error  # redirects and 2xx raised by aiohttp itself pass through
        code = _HTTP_CODES.get(error.status, "http_error")
        return error_response(request, error.status, code, error.reason,
                              headers=tuple((k, v) for k, v in error.headers.items() if k.lower() == "allow"))
    if isinstance(error, ConnectionResetError):
        raise error  # the client went away; nobody is left to answer
    log.exception("unhandled error")
    return error_response(request, 500, "internal_error", "the gateway failed to handle the request")
