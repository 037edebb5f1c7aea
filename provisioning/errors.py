"""The gateway's one exception tree.

Every failure a client can cause or observe is a `GatewayError` carrying a
machine code, an HTTP status and a human message that is safe to show: the
HTTP edge renders it as the contract's `{"error": {"code", "message"}}` and
never looks inside. Messages must not contain tokens, SQL or upstream bodies.
"""

from __future__ import annotations


class GatewayError(Exception):
    status = 500
    code = "internal_error"
    message = "the gateway could not complete the request"
    retry_after: int | None = None
    """Seconds after which a retry may succeed (`Retry-After`), if the error says."""
    closes_connection = False
    """The answer says `Connection: close`: the client's retry comes on a new
    connection, which a load balancer may send to another replica."""

    def __init__(self, message: str | None = None, *, code: str | None = None) -> None:
        self.message = message or self.message
        if code:
            self.code = code
        super().__init__(self.message)


class BadRequest(GatewayError):
    status, code, message = 400, "bad_request", "the request is malformed"


class Unauthenticated(GatewayError):
    status, code, message = 401, "unauthenticated", "authentication required"


class Forbidden(GatewayError):
    status, code, message = 403, "forbidden", "not allowed"


class NotFound(GatewayError):
    status, code, message = 404, "not_found", "no such resource"


class RequestTimeout(GatewayError):
    status, code, message = 408, "request_timeout", "the request body did not arrive in time"


class Conflict(GatewayError):
    status, code, message = 409, "conflict", "the request conflicts with the current state"


class PayloadTooLarge(GatewayError):
    status, code, message = 413, "payload_too_large", "the request body is too large"


class UnsupportedMediaType(GatewayError):
    status, code, message = 415, "unsupported_media_type", "the body must be application/json"


class RateLimited(GatewayError):
    status, code, message = 429, "rate_limited", "too many requests; retry later"

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class UpstreamError(GatewayError):
    status, code, message = 502, "upstream_error", "the Kubernetes API server answered unexpectedly"


class ServiceUnavailable(GatewayError):
    status, code, message = 503, "unavailable", "a backing service is unavailable; retry later"


class ClusterUnavailable(ServiceUnavailable):
    code, message = "cluster_unavailable", "the Kubernetes API server is unreachable; retry later"


class DatabaseUnavailable(ServiceUnavailable):
    code, message = "database_unavailable", "the database is unreachable; retry later"


class EventsUnavailable(ServiceUnavailable):
    """This replica cannot hear that a right ended (its event listener is
    reconnecting), so it opens no stream that only such an event would cut.
    The listener retries every second: so may the client."""

    code = "events_unavailable"
    message = ("this gateway replica cannot open watches, log follows or exec, attach and port-forward "
               "sessions while it reconnects to the database's events; retry in a moment")
    retry_after = 1


class ShuttingDown(ServiceUnavailable):
    """This replica is stopping (proxy.http.draining): the answer to a request the
    drain refuses, and to a stream the stop ended before its answer began.
    The retry comes on a new connection, which a load balancer sends to a
    replica that is not stopping."""

    code, message = "shutting_down", "this gateway replica is shutting down; retry"
    retry_after: int | None = 1
    closes_connection = True


class StoppedMidRequest(ShuttingDown):
    """A request still running when the drain time was up, cancelled before
    its answer began (proxy.http.draining): whether it took effect is unknown,
    so no retry is suggested."""

    message = "this gateway replica stopped before the request finished; it may or may not have taken effect"
    retry_after = None


class DatabaseRefused(DatabaseUnavailable):
    """The server answered, and would not let the gateway in: a wrong
    password (a credential rotated), a pg_hba rule, a database that is not
    there; or the URL cannot be read at all, so there is nothing to retry.
    The message says which, and never holds the URL or the password."""

    code, message = "database_refused", "the database refused the gateway's connection"


class DatabaseBusy(DatabaseUnavailable):
    """Every connection the gateway may hold through a long operation is held."""

    code, message = "database_busy", "the database is busy with other long operations; retry shortly"

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class AuditUnavailable(ServiceUnavailable):
    """The audit writer has no room for one more row (it is behind, or the
    database is away) and none came free in time: the action it would
    record is refused before it happens, never done unaudited."""

    code = "audit_unavailable"
    message = "the audit log is not keeping up, so the request was not carried out; retry shortly"

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))
