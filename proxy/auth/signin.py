"""Opening a gateway session, whichever way the user proved who they are.

Password login, the SSO callback and device sign-in all end here, so every
session has the same shape: a server-side row (logout and suspension end it
at once), a signed token naming it, the CSRF token derived from it, and the
same cookies.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from aiohttp import web

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.models import User
from proxy.auth import sessions
from proxy.settings import Settings


@dataclass(frozen=True)
class OpenedSession:
    token: str
    expires_at: datetime.datetime
    csrf: str
    max_age: int


async def open_session(db: Database, settings: Settings, user: User) -> OpenedSession:
    session_id = uuid.uuid4()
    now = datetime.datetime.now(datetime.timezone.utc)
    token, expires_at = sessions.mint(settings.session_secret_value, user.id, session_id, now,
                                      settings.session_ttl_seconds)
    await repo.create_session(db, session_id, user.id, expires_at)
    return OpenedSession(token, expires_at, sessions.csrf_token(settings.session_secret_value, session_id),
                         settings.session_ttl_seconds)


def set_session_cookies(response: web.StreamResponse, opened: OpenedSession) -> None:
    response.set_cookie(sessions.SESSION_COOKIE, opened.token, max_age=opened.max_age, path="/", secure=True,
                        httponly=True, samesite="Strict")
    # Readable by the page's script, which echoes it in X-CSRF-Token.
    response.set_cookie(sessions.CSRF_COOKIE, opened.csrf, max_age=opened.max_age, path="/", secure=True,
                        httponly=False, samesite="Strict")
