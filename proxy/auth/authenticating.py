"""Request -> Principal: session cookie or `Authorization: Bearer`.

Verifying the JWT is local; whether its session row is still live is looked
up in the database and then cached per session id. The cache is trusted only
while the cross-replica event listener is connected (logout and suspension
publish an event that evicts the entry on every replica); otherwise every
request asks the database, and a database outage answers 503: fail closed.
"""

from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web
from cachetools import LRUCache, TTLCache

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Forbidden, Unauthenticated
from provisioning.events import EventListener
from provisioning.models import User
from provisioning.secrets import Secret
from proxy.auth import sessions

_UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Principal:
    user: User
    session_id: uuid.UUID
    via_cookie: bool
    session_expires_at: datetime.datetime


def presented_token(request: web.Request) -> tuple[str, bool] | None:
    """The session token and whether it came from the cookie."""
    authorization = request.headers.get("Authorization")
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("Authorization must be 'Bearer <token>'", code="invalid_authorization")
        return token.strip(), False
    cookie = request.cookies.get(sessions.SESSION_COOKIE)
    return (cookie, True) if cookie else None


class Authenticator:
    def __init__(self, db: Database, secret: Secret, events: EventListener, *,
                 cache_seconds: float = 60, clock: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self._secret = secret
        self._events = events
        self._sessions: TTLCache[uuid.UUID, User] = TTLCache(maxsize=100_000, ttl=cache_seconds, timer=clock)
        # Signature checks are a sixth of a proxied request's CPU; a token
        # verified once is remembered until its own expiry.
        self._verified: LRUCache[str, sessions.SessionClaims] = LRUCache(maxsize=100_000)
        events.subscribe(self._on_event, on_reset=self._sessions.clear)

    def _on_event(self, message: dict[str, Any]) -> None:
        if message.get("kind") == "session_revoked":
            self._sessions.pop(uuid.UUID(message["id"]), None)
        elif message.get("kind") == "user_changed":
            user_id = uuid.UUID(message["id"])
            for session_id in [s for s, u in self._sessions.items() if u.id == user_id]:
                self._sessions.pop(session_id, None)

    async def _live_user(self, session_id: uuid.UUID) -> User:
        if self._events.connected:
            cached = self._sessions.get(session_id)
            if cached is not None:
                return cached
        generation = self._events.generation
        user = await repo.active_session_user(self._db, session_id)
        if user is None:
            raise Unauthenticated("the session has ended; log in again", code="session_ended")
        # A logout or suspension that committed during the read may predate it.
        if self._events.may_cache(generation):
            self._sessions[session_id] = user
        return user

    async def authenticate(self, request: web.Request) -> Principal:
        presented = presented_token(request)
        if presented is None:
            raise Unauthenticated("log in, then send the session cookie or 'Authorization: Bearer <token>'")
        token, via_cookie = presented
        claims = self._verified.get(token)
        if claims is None or claims.expires_at <= datetime.datetime.now(datetime.timezone.utc):
            claims = sessions.verify(self._secret, token)
            self._verified[token] = claims
        user = await self._live_user(claims.session_id)
        if via_cookie and request.method in _UNSAFE_METHODS and not sessions.csrf_valid(
                self._secret, claims.session_id, request.headers.get(sessions.CSRF_HEADER),
                request.cookies.get(sessions.CSRF_COOKIE)):
            raise Forbidden("cookie-authenticated writes need the X-CSRF-Token header", code="csrf_failed")
        return Principal(user, claims.session_id, via_cookie, claims.expires_at)
