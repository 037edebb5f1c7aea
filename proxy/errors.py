"""Rendering every failure as the contract's JSON error, in one place.

GatewayError subclasses carry their own status, code and safe message.
aiohttp's own HTTP exceptions (unknown route, wrong method, body too large)
are translated to the same shape. Anything else is a bug: it is logged with
the request id (exception type only, no values that could hold secrets) and
answered as a bare 500 without details.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from provisioning.errors import GatewayError, RateLimited

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 406: "not_acceptable", 408: "request_timeout", 411: "length_required",
    413: "payload_too_large", 414: "uri_too_long", 415: "unsupported_media_type", 431: "headers_too_large",
}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status, headers=headers)


def render(error: GatewayError) -> web.Response:
    headers = {"Retry-After": str(error.retry_after)} if isinstance(error, RateLimited) else None
    return error_response(error.status, error.code, error.message, headers)


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except GatewayError as error:
        if error.status >= 500:
            log.warning("request failed", extra={"code": error.code, "status": error.status,
                                                 "cause": type(error.__cause__).__name__ if error.__cause__ else None})
        return render(error)
    except web.HTTPException as error:
        if error.status < 400:
            raise  # redirects and 2xx raised by aiohttp itself pass through
        code = _HTTP_CODES.get(error.status, "http_error")
        return error_response(error.status, code, error.reason, {k: v for k, v in error.headers.items()
                                                                   if k.lower() == "allow"})
    except ConnectionResetError:
        raise  # the client went away; nobody is left to answer
    except Exception:
        log.exception("unhandled error")
        return error_response(500, "internal_error", "the gateway failed to handle the request")
