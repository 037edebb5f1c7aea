"""Paging every workspace (`GET /api/v1/workspaces?all=true&limit=N[&cursor=C]`):
the page size allowed, and the cursor, opaque to clients: the last row's
position (created_at, id) as base64url JSON. A malformed one is 400.

The unpaged `?all=true` answers every workspace at once, as it always has;
with thousands of tenants an answer that size is built in one event-loop turn,
so clients that list everything should page."""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import uuid

from provisioning.db.repositories import WorkspacePosition
from provisioning.errors import BadRequest
from provisioning.models import Workspace

DEFAULT_PAGE = 100
MAX_PAGE = 500
_MAX_CURSOR = 200


def page_limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_PAGE
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PAGE:
        raise BadRequest(f"limit must be a whole number from 1 to {MAX_PAGE}", code="invalid_limit")
    return int(text)


def encode_page_cursor(last: Workspace) -> str:
    text = json.dumps([last.created_at.isoformat(), str(last.id)], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_page_cursor(cursor: str) -> WorkspacePosition:
    """The position a cursor names; BadRequest when it is not one we made."""
    try:
        if len(cursor) > _MAX_CURSOR:
            raise ValueError
        created, workspace_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(created, str) or not isinstance(workspace_id, str) or len(created) > 64:
            raise ValueError
        when = datetime.datetime.fromisoformat(created)
        if when.tzinfo is None:
            raise ValueError
        return when, uuid.UUID(workspace_id)
    except (ValueError, TypeError, binascii.Error):
        raise BadRequest("cursor is not one this gateway gave", code="invalid_cursor") from None
