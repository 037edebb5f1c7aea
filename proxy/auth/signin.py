"""Opening a gateway session, whichever way the user proved who they are.

Password login, the SSO callback and device sign-in all end here, so every
session has the same shape: a server-side row (logout and suspension end it
at once) written together with its `Login` audit row and only while the
user is active, a signed token naming it, the CSRF token derived from it,
and the same cookies.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from aiohttp import web

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.models import AuditEvent, User
from proxy.auth import scopes, sessions
from proxy.settings import Settings


@dataclass(frozen=True)
class OpenedSession:
    token: str
    expires_at: datetime.datetime
    csrf: str
    max_age: int


@dataclass(frozen=True)
class PlannedSession:
    """A session's id and lifetime, chosen before its row is written (the
    row and the token must agree on both)."""

    id: uuid.UUID
    started_at: datetime.datetime
    expires_at: datetime.datetime


def plan_session(settings: Settings) -> PlannedSession:
    now = datetime.datetime.now(datetime.timezone.utc)
    return PlannedSession(uuid.uuid4(), now, now + datetime.timedelta(seconds=settings.session_ttl_seconds))


def issue(settings: Settings, user_id: uuid.UUID, planned: PlannedSession,
          scope: str = scopes.FULL) -> OpenedSession:
    """The token, CSRF token and cookie lifetime of a session whose row is
    written; `scope` narrows what it may do (proxy.auth.scopes)."""
    token, expires_at = sessions.mint(settings.session_secret_value, user_id, planned.id, planned.started_at,
                                      settings.session_ttl_seconds, scope)
    assert expires_at == planned.expires_at
    return OpenedSession(token, expires_at, sessions.csrf_token(settings.session_secret_value, planned.id),
                         settings.session_ttl_seconds)


async def open_session(db: Database, settings: Settings, user_id: uuid.UUID,
                       event: AuditEvent) -> tuple[User, OpenedSession] | None:
    """A session of the user, written with its audit row `event` (both or
    neither), and the user as the database has them now; None (nothing
    written) if the user is not active any more, whatever the caller read
    before: the caller refuses as it refuses a suspended user."""
    planned = plan_session(settings)
    user = await repo.create_session(db, planned.id, user_id, planned.expires_at, event)
    if user is None:
        return None
    return user, issue(settings, user.id, planned)


def set_session_cookies(response: web.StreamResponse, opened: OpenedSession) -> None:
    response.set_cookie(sessions.SESSION_COOKIE, opened.token, max_age=opened.max_age, path="/", secure=True,
                        httponly=True, samesite="Strict")
    # Readable by the page's script, which echoes it in X-CSRF-Token.
    response.set_cookie(sessions.CSRF_COOKIE, opened.csrf, max_age=opened.max_age, path="/", secure=True,
                        httponly=False, samesite="Strict")
