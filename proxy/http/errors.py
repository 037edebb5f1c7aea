"""Rendering every failure as the contract's JSON error, in one place.

GatewayError subclasses carry their own status, code and safe message.
aiohttp's own HTTP exceptions (unknown route, wrong method, body too large)
are translated to the same shape. Anything else is a bug: it is logged with
the request id (exception type only, no values that could hold secrets) and
answered as a bare 500 without details.

On `/k8s/...` the same body is also a Kubernetes `Status`: kubectl and the
client libraries read every error body there as one (client-go's REST
client, its SPDY and WebSocket dialers, the Python client's `ApiException`),
and a body without `kind: Status` reaches their users as an empty message.
The two shapes share one object: `error` is the contract's, the top-level
keys are Kubernetes'. Which shape a request gets is decided here, by its
path, and nowhere else.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from provisioning.errors import GatewayError, ShuttingDown

log = logging.getLogger(__name__)

KUBERNETES_PREFIX = "/k8s/"
"""Requests under this prefix are answered as the Kubernetes API would be."""

_HTTP_CODES = {
    400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 406: "not_acceptable", 408: "request_timeout", 411: "length_required",
    413: "payload_too_large", 414: "uri_too_long", 415: "unsupported_media_type", 431: "headers_too_large",
}

# metav1.StatusReason per HTTP status, as apimachinery's
# NewGenericServerResponse reads them back (k8s.io/apimachinery/pkg/api/errors).
# Other 4xx have no reason (StatusReasonUnknown, ""); other 5xx are InternalError.
_STATUS_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    406: "NotAcceptable", 409: "Conflict", 410: "Gone", 413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests", 503: "ServiceUnavailable",
    504: "Timeout",
}


def status_reason(status: int) -> str:
    return _STATUS_REASONS.get(status, "InternalError" if status >= 500 else "")


def error_body(status: int, code: str, message: str, *, kubernetes: bool,
               retry_after: int | None = None) -> dict[str, Any]:
    """The contract's error, and with `kubernetes` also a `Status` with the
    same message. Pure. `retry_after` becomes `details.retryAfterSeconds`,
    which client-go reads as the server's suggested delay."""
    body: dict[str, Any] = {"error": {"code": code, "message": message}}
    if kubernetes:
        body.update({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": message, "reason": status_reason(status), "code": status})
        if retry_after is not None:
            body["details"] = {"retryAfterSeconds": retry_after}
    return body


def is_kubernetes_request(request: web.BaseRequest) -> bool:
    return request.path.startswith(KUBERNETES_PREFIX)


def error_response(request: web.BaseRequest, status: int, code: str, message: str, *,
                   headers: dict[str, str] | None = None, retry_after: int | None = None) -> web.Response:
    if retry_after is not None:
        headers = {**(headers or {}), "Retry-After": str(retry_after)}
    body = error_body(status, code, message, kubernetes=is_kubernetes_request(request), retry_after=retry_after)
    return web.json_response(body, status=status, headers=headers)


def render(request: web.BaseRequest, error: GatewayError) -> web.Response:
    return error_response(request, error.status, error.code, error.message, retry_after=error.retry_after,
                          headers={"Connection": "close"} if error.closes_connection else None)


def note_failure(error: GatewayError) -> None:
    """Log a 5xx the gateway answers (never its values: the code, the status
    and the kind of cause). A stop is no failure: the drain's own refusals
    are not logged either."""
    if error.status >= 500 and not isinstance(error, ShuttingDown):
        log.warning("request failed", extra={"code": error.code, "status": error.status,
                                             "cause": type(error.__cause__).__name__ if error.__cause__ else None})


def failure_answer(request: web.BaseRequest, error: Exception) -> web.Response:
    """The answer to what a handler raised; re-raises what is not ours to
    answer. Called from an `except` block (the front middleware's, in
    proxy.server.front), so a bug is logged with its traceback."""
    if isinstance(error, GatewayError):
        note_failure(error)
        return render(request, error)
    if isinstance(error, web.HTTPException):
        if error.status < 400:
            raise error  # redirects and 2xx raised by aiohttp itself pass through
        code = _HTTP_CODES.get(error.status, "http_error")
        return error_response(request, error.status, code, error.reason,
                              headers={k: v for k, v in error.headers.items() if k.lower() == "allow"})
    if isinstance(error, ConnectionResetError):
        raise error  # the client went away; nobody is left to answer
    log.exception("unhandled error")
    return error_response(request, 500, "internal_error", "the gateway failed to handle the request")
