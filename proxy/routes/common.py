"""What every handler needs: who is calling, from where, and with what body."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from aiohttp import web

from provisioning.errors import BadRequest, Forbidden, PayloadTooLarge, RequestTimeout, UnsupportedMediaType
from proxy import keys
from proxy.auth import scopes
from proxy.auth.authenticating import Principal
from proxy.http import requests
from proxy.http.addresses import rate_subject
from proxy.http.bodies import read_at_most

# API bodies are tiny JSON objects; kubeconfig-sized bodies never come this way.
MAX_JSON_BYTES = 64 * 1024

# A path segment that can only be an id: `/api/v1/workspaces/init` then never
# matches `/api/v1/workspaces/{id}`, so GET on it is a 405 naming POST, not a
# lookup of a workspace called "init".
ID_SEGMENT = "{id:[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}}"
_TRUE, _FALSE = frozenset({"1", "true", "yes"}), frozenset({"", "0", "false", "no"})


async def principal(request: web.Request) -> Principal:
    """Who is calling, if their session may call this route: every API
    route that needs a caller asks here, so a narrow session (a device
    sign-in's, proxy.auth.scopes) is held to its routes in this one place."""
    if keys.PRINCIPAL in request:
        return request[keys.PRINCIPAL]
    found = await request.app[keys.AUTHENTICATOR].authenticate(request)
    resource = request.match_info.route.resource
    if not scopes.allows_route(found.scope, request.method, resource.canonical if resource else ""):
        raise Forbidden(scopes.REFUSAL, code=scopes.REFUSAL_CODE)
    request[keys.PRINCIPAL] = found
    return found


async def admin(request: web.Request) -> Principal:
    found = await principal(request)
    if not found.user.is_admin:
        raise Forbidden("administrators only", code="admin_required")
    return found


def client_ip(request: web.Request) -> str | None:
    return requests.client_ip(request, request.app[keys.SETTINGS].trusted_proxies)


def rate_address(request: web.Request) -> str:
    """What every per-address rate limit counts for this request: the client's
    address, an IPv6 /64 as one (proxy.http.addresses.rate_subject)."""
    return rate_subject(client_ip(request))


def public_origin(request: web.Request) -> str:
    return requests.public_origin(request, request.app[keys.SETTINGS].trusted_proxies)


async def read_json(request: web.Request, *, allow_empty: bool = False) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > MAX_JSON_BYTES:
        raise PayloadTooLarge()
    try:
        # A body trickled in, or one whose framing broke after the head
        # (aiohttp then stops feeding it without ending it), would hold the
        # handler for as long as the client keeps the connection.
        async with asyncio.timeout(request.app[keys.SETTINGS].client_idle_seconds):
            raw = await read_at_most(request.content, MAX_JSON_BYTES)
    except TimeoutError:
        raise RequestTimeout() from None
    if len(raw) > MAX_JSON_BYTES:
        raise PayloadTooLarge()
    if not raw.strip():
        if allow_empty:
            return {}
        raise BadRequest("a JSON object body is required", code="invalid_json")
    # A cross-site form can post text/plain (or a form encoding) that parses
    # as JSON without a CORS preflight; application/json cannot be sent so.
    if request.content_type != "application/json" or (request.charset or "utf-8").lower() != "utf-8":
        raise UnsupportedMediaType("the body must be application/json (UTF-8)")
    try:
        body = json.loads(raw)
        # JSON escapes can smuggle lone surrogates (\ud800) that are not
        # text: refused here rather than failing deep in a hash or a driver.
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError):
        raise BadRequest("the body is not valid JSON text", code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_json")
    return body


def bounded_string(value: object, name: str, max_length: int, *, code: str) -> str:
    """A string field of a body or query, at most `max_length` characters:
    anything longer is a client's mistake (400), never a database's error."""
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string", code=code)
    if len(value) > max_length:
        raise BadRequest(f"{name} is longer than {max_length} characters", code=code)
    return value


def query_flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name, "").lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadRequest(f"{name} must be true or false", code="invalid_query")


def query_uuid(request: web.Request, name: str) -> uuid.UUID | None:
    """An optional id used as a filter: malformed is a mistake in the query (400), not an empty result."""
    value = request.query.get(name)
    if not value:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise BadRequest(f"{name} must be a UUID", code="invalid_query") from None
