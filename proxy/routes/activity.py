"""The activity timeline: what people did through the gateway (its own
audit rows), straight at the API server with a kubeconfig it issued, and
through its proxy (the cluster's audit events, proxy.server.audit_listener),
merged newest first, each action once (provisioning.db.activity).

Who sees what: everyone their own; a workspace's admins that workspace's
(everyone's, and events of tokens the gateway did not issue); the gateway's
admins all. The cursor is opaque to clients: the last row's position,
base64url JSON, and a malformed one is 400.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import uuid

from aiohttp import web

from provisioning.db import activity as activity_rows
from provisioning.db import members as member_rows
from provisioning.db.activity import MAX_LIMIT, Position
from provisioning.errors import BadRequest, Forbidden
from provisioning.models import User
from proxy import keys
from proxy.routes.common import principal, query_uuid

routes = web.RouteTableDef()

DEFAULT_LIMIT = 100
_MAX_CURSOR = 256


async def administers(request: web.Request, user: User, workspace_id: uuid.UUID) -> bool:
    """Whether `user` sees the whole workspace's activity."""
    if user.is_admin:
        return True
    member = await member_rows.membership(request.app[keys.DATABASE], workspace_id, user.id)
    return member is not None and member.role == "admin"


def encode_cursor(position: Position) -> str:
    text = json.dumps([position.time.isoformat(), position.source, position.key], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """The position a cursor names; BadRequest when it is not one we made."""
    try:
        if len(cursor) > _MAX_CURSOR:
            raise ValueError
        time, source, key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if source not in ("gateway", "cluster") or not isinstance(key, str) or len(key) > 64:
            raise ValueError
        return Position(_timestamp(time), source, key)
    except (ValueError, TypeError, binascii.Error):
        raise BadRequest("cursor is not one this gateway gave", code="invalid_cursor") from None


def _timestamp(text: object) -> datetime.datetime:
    if not isinstance(text, str) or len(text) > 64:
        raise ValueError
    parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.timezone.utc)


def _since(request: web.Request) -> datetime.datetime | None:
    text = request.query.get("since")
    if not text:
        return None
    try:
        return _timestamp(text)
    except ValueError:
        raise BadRequest("since must be an ISO 8601 time, e.g. 2025-01-31T12:00:00Z", code="invalid_query") from None


def _limit(request: web.Request) -> int:
    text = request.query.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_LIMIT:
        raise BadRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}", code="invalid_limit")
    return int(text)


@routes.get("/api/v1/activity")
async def activity(request: web.Request) -> web.Response:
    who = await principal(request)
    workspace_id, user_id = query_uuid(request, "workspace_id"), query_uuid(request, "user_id")
    since, limit = _since(request), _limit(request)
    cursor = request.query.get("cursor")
    after = decode_cursor(cursor) if cursor else None
    sees_all = who.user.is_admin or (workspace_id is not None and await administers(request, who.user, workspace_id))
    if user_id is not None and user_id != who.user.id and not sees_all:
        raise Forbidden("only the workspace's admins see other people's activity", code="workspace_admin_required")
    if not sees_all:
        user_id = who.user.id  # the caller's own
    items, following = await activity_rows.activity(request.app[keys.DATABASE], user_id=user_id,
                                                     workspace_id=workspace_id, since=since, after=after, limit=limit)
    return web.json_response({"items": items, "next": encode_cursor(following) if following else None})
