"""Request -> Principal: session cookie or `Authorization: Bearer`.

Verifying the JWT is local; whether its session row is still live is looked
up in the database and then cached per session id. A bearer ID token of a
configured identity provider (automation without a browser) is verified with
that provider's cached keys once, remembered until its own expiry, and then
costs what a session does: a cached lookup of its user, who must be active. The cache is trusted only
while the cross-replica event listener is connected (logout and suspension
publish an event that evicts the entry on every replica); otherwise every
request asks the database, and a database outage answers 503: fail closed.
"""

from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from aiohttp import web
from cachetools import LRUCache

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Forbidden, Unauthenticated
from provisioning.events import EventListener
from provisioning.models import User
from provisioning.secrets import Secret
from proxy.auth import sessions
from proxy.auth.oidc_registry import OIDCRegistry, admit
from proxy.expiring import ExpiringMap

_UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_ID_TOKEN_SESSIONS = uuid.UUID("5b0e1f1c-4a52-4d63-9c55-0e6a2f7b7e01")
"""Namespace of the pseudo-session ids of bearer ID tokens (they have no session row)."""


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
                 cache_seconds: float = 60, clock: Callable[[], float] = time.monotonic,
                 oidc: OIDCRegistry | None = None) -> None:
        self._db = db
        self._oidc = oidc
        # ID token -> (user id, expiry): verified once, like session tokens below.
        self._id_tokens: LRUCache[str, tuple[uuid.UUID, datetime.datetime]] = LRUCache(maxsize=100_000)
        self._users: ExpiringMap[uuid.UUID, User] = ExpiringMap(100_000, clock, cache_seconds)
        self._secret = secret
        self._events = events
        self._sessions: ExpiringMap[uuid.UUID, User] = ExpiringMap(100_000, clock, cache_seconds)
        # Signature checks are a sixth of a proxied request's CPU; a token
        # verified once is remembered until its own expiry (on the wall clock).
        self._verified: ExpiringMap[str, sessions.SessionClaims] = ExpiringMap(100_000, time.time)
        events.subscribe(self._on_event, on_reset=self._forget_all)

    def _forget_all(self) -> None:
        self._sessions.clear()
        self._users.clear()

    def _on_event(self, message: dict[str, Any]) -> None:
        if message.get("kind") == "session_revoked":
            self._sessions.pop(uuid.UUID(message["id"]), None)
        elif message.get("kind") == "user_changed":
            user_id = uuid.UUID(message["id"])
            self._users.pop(user_id, None)
            for session_id in [s for s, u in self._sessions.items() if u.id == user_id]:
                self._sessions.pop(session_id, None)

    async def _cached_user(self, cache: ExpiringMap[uuid.UUID, User], key: uuid.UUID,
                           fetch: Callable[[], Awaitable[User | None]], refusal: Unauthenticated) -> User:
        """The cache is trusted only while the event listener is connected, and
        filled only if no event arrived during the read: a logout or suspension
        that committed meanwhile may predate the row read."""
        if self._events.connected:
            cached = cache.get(key)
            if cached is not None:
                return cached
        generation = self._events.generation
        user = await fetch()
        if user is None:
            raise refusal
        if self._events.may_cache(generation):
            cache[key] = user
        return user

    async def _live_user(self, session_id: uuid.UUID) -> User:
        return await self._cached_user(
            self._sessions, session_id, lambda: repo.active_session_user(self._db, session_id),
            Unauthenticated("the session has ended; log in again", code="session_ended"))

    async def _active_user(self, user_id: uuid.UUID) -> User:
        """The user behind a bearer ID token, while active (no session row to check)."""
        async def fetch() -> User | None:
            user = await repo.get_user(self._db, user_id)
            return user if user is not None and user.status == "active" else None

        return await self._cached_user(self._users, user_id, fetch,
                                       Unauthenticated("this account is suspended", code="user_suspended"))

    async def _id_token_principal(self, token: str) -> Principal:
        assert self._oidc is not None
        now = datetime.datetime.now(datetime.timezone.utc)
        known = self._id_tokens.get(token)
        if known is None or known[1] <= now:
            provider, identity = await self._oidc.bearer_identity(token)
            user = await admit(self._db, provider, identity)
            known = (user.id, identity.expires_at)
            self._id_tokens[token] = known
        # No session row: the ID token's own expiry bounds it (and the streams
        # it opens), suspension ends it.
        return Principal(await self._active_user(known[0]), uuid.uuid5(_ID_TOKEN_SESSIONS, token), False, known[1])

    async def authenticate(self, request: web.Request) -> Principal:
        presented = presented_token(request)
        if presented is None:
            raise Unauthenticated("log in, then send the session cookie or 'Authorization: Bearer <token>'")
        token, via_cookie = presented
        claims = self._verified.get(token)  # a session token verified before and not expired
        if claims is None:
            if not via_cookie and self._oidc is not None and (token in self._id_tokens or self._oidc.issues(token)):
                return await self._id_token_principal(token)
            claims = sessions.verify(self._secret, token)
            self._verified.put(token, claims, claims.expires_at.timestamp())
        # The session's user, cached: what `_live_user` reads first, without
        # its coroutine (the warm path of every request).
        user = self._sessions.get(claims.session_id) if self._events.connected else None
        if user is None:
            user = await self._live_user(claims.session_id)
        if via_cookie and request.method in _UNSAFE_METHODS and not sessions.csrf_valid(
                self._secret, claims.session_id, request.headers.get(sessions.CSRF_HEADER),
                request.cookies.get(sessions.CSRF_COOKIE)):
            raise Forbidden("cookie-authenticated writes need the X-CSRF-Token header", code="csrf_failed")
        return Principal(user, claims.session_id, via_cookie, claims.expires_at)
