"""The contract's error answer, built once for every writer. Pure.

Three places write error answers: aiohttp's response (proxy.http.errors),
the express lane, and the connection handler for what aiohttp cannot parse.
Each takes its status, header fields and body from `error_answer` and only
writes them, so the shape cannot drift between them.

On `/k8s/...` the body is also a Kubernetes `Status`. kubectl and the client
libraries read every error body there as one (client-go's REST client, its
SPDY and WebSocket dialers, the Python client's `ApiException`). A body
without `kind: Status` reaches their users as an empty message. The two
shapes share one object: `error` is the contract's, the top-level keys are
Kubernetes'.
"""

from __future__ import annotations

import json
import logging
from typing import Any, NamedTuple

from provisioning.errors import GatewayError, ShuttingDown

log = logging.getLogger(__name__)

KUBERNETES_PREFIX = "/k8s/"
"""Requests under this prefix are answered as the Kubernetes API would be."""

CONTENT_TYPE = "application/json; charset=utf-8"

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
    same message. `retry_after` becomes `details.retryAfterSeconds`, which
    client-go reads as the server's suggested delay."""
    body: dict[str, Any] = {"error": {"code": code, "message": message}}
    if kubernetes:
        body.update({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": message, "reason": status_reason(status), "code": status})
        if retry_after is not None:
            body["details"] = {"retryAfterSeconds": retry_after}
    return body


class ErrorAnswer(NamedTuple):
    """An error answer: its status, its header fields (framing aside: each
    writer adds Content-Length and the headers every answer carries) and
    its body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def closes_connection(self) -> bool:
        return ("Connection", "close") in self.headers


def error_answer(status: int, code: str, message: str, *, kubernetes: bool, retry_after: int | None = None,
                 closes_connection: bool = False, extra: tuple[tuple[str, str], ...] = ()) -> ErrorAnswer:
    """The one builder of error answers. Retry-After and `Connection: close`
    are set here and nowhere else."""
    headers = [("Content-Type", CONTENT_TYPE), *extra]
    if retry_after is not None:
        headers.append(("Retry-After", str(retry_after)))
    if closes_connection:
        headers.append(("Connection", "close"))
    body = json.dumps(error_body(status, code, message, kubernetes=kubernetes, retry_after=retry_after)).encode()
    return ErrorAnswer(status, tuple(headers), body)


def answer_to(error: GatewayError, *, kubernetes: bool) -> ErrorAnswer:
    """The answer to one of the gateway's own errors, which carry their
    status, code and safe message."""
    return error_answer(error.status, error.code, error.message, kubernetes=kubernetes,
                        retry_after=error.retry_after, closes_connection=error.closes_connection)


def note_failure(error: GatewayError) -> None:
    """Log a 5xx the gateway answers (never its values: the code, the status
    and the kind of cause). A stop is no failure: the drain's own refusals
    are not logged either."""
    if error.status >= 500 and not isinstance(error, ShuttingDown):
        log.warning("request failed", extra={"code": error.code, "status": error.status,
                                             "cause": type(error.__cause__).__name__ if error.__cause__ else None})
