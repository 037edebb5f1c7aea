"""Request -> Principal: session cookie or `Authorization: Bearer`.

Verifying the JWT is local; whether its session row is still live is looked
up in the database and then cached per session id. A bearer ID token of a
configured identity provider (automation without a browser) is verified with
that provider's cached keys once, remembered until its own expiry, and
recorded as a session row of its own on first use: from then on it is a
session like the others (logout and suspension end it, and an ended one is
refused before its claims touch the user's row). The cache is trusted only
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

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Forbidden, Unauthenticated
from provisioning.events import EventListener
from provisioning.models import User
from provisioning.secrets import Secret
from proxy.auth import scopes, sessions
from proxy.auth.oidc_registry import OIDCRegistry, admit
from proxy.auth.oidc_tokens import InvalidIdToken
from proxy.http.expiring import ExpiringMap, GroupIndex

_UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_ID_TOKEN_SESSIONS = uuid.UUID("5b0e1f1c-4a52-4d63-9c55-0e6a2f7b7e01")
"""Namespace of the session ids of bearer ID tokens (see `id_token_session_id`)."""


def id_token_session_id(token: str) -> uuid.UUID:
    """The session a bearer ID token stands for. Pure.

    Named after what the provider signed (header and claims, as sent), never
    after the signature's spelling: base64url lets one signature be written
    several ways (padding, a last character's unused bits), and an ECDSA
    signature has a second valid form anyone can compute. Keyed on the whole
    text, each respelling of a logged-out token would be a new, live session.
    """
    return uuid.uuid5(_ID_TOKEN_SESSIONS, token.rpartition(".")[0])


@dataclass(frozen=True)
class Principal:
    user: User
    """The user as this session acts (`scopes.acting_user`: a credentials-only
    session never carries the administrator flag)."""
    session_id: uuid.UUID
    via_cookie: bool
    session_expires_at: datetime.datetime
    scope: str = scopes.FULL
    """What the session may do (proxy.auth.scopes)."""


def session_principal(user: User, claims: sessions.SessionClaims, via_cookie: bool) -> Principal:
    """The Principal of a gateway session token's claims and its live user."""
    return Principal(scopes.acting_user(user, claims.scope), claims.session_id, via_cookie, claims.expires_at,
                     claims.scope)


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
        # ID token -> (expiry, pseudo-session id): verified once, like session
        # tokens below. The id, a hash of the token made once, names the
        # session row its first use records, so logout ends it like a session.
        self._id_tokens: ExpiringMap[str, tuple[datetime.datetime, uuid.UUID]] = ExpiringMap(100_000, time.time)
        self._secret = secret
        self._events = events
        self._sessions: ExpiringMap[uuid.UUID, User] = ExpiringMap(100_000, clock, cache_seconds)
        # A change of a user (suspension, role) drops their sessions, found
        # by this index rather than a walk over every cached session.
        self._sessions_by_user: GroupIndex[uuid.UUID, uuid.UUID, User] = GroupIndex(
            self._sessions, lambda _, user: user.id)
        # Signature checks are a sixth of a proxied request's CPU; a token
        # verified once is remembered until its own expiry (on the wall clock).
        self._verified: ExpiringMap[str, sessions.SessionClaims] = ExpiringMap(100_000, time.time)
        events.subscribe(self._on_event, on_reset=self._forget_all)

    def _forget_all(self) -> None:
        self._sessions.clear()
        self._sessions_by_user.clear()

    def _on_event(self, message: dict[str, Any]) -> None:
        if message.get("kind") == "session_revoked":
            self._sessions.pop(uuid.UUID(message["id"]), None)
        elif message.get("kind") == "user_changed":
            self._sessions_by_user.drop_group(uuid.UUID(message["id"]))

    def _cached_user(self, session_id: uuid.UUID) -> User | None:
        """What `_live_user` reads first, without its coroutine: the warm path
        of every request, for session tokens and ID tokens alike."""
        return self._sessions.get(session_id) if self._events.connected else None

    async def _live_user(self, session_id: uuid.UUID) -> User:
        """The session's user while the session is live and the user active.
        The cache is trusted only while the event listener is connected, and
        filled only if no event arrived during the read: a logout or
        suspension that committed meanwhile may predate the row read."""
        cached = self._cached_user(session_id)
        if cached is not None:
            return cached
        generation = self._events.generation
        user = await repo.active_session_user(self._db, session_id)
        if user is None:
            raise Unauthenticated("the session has ended; log in again", code="session_ended")
        if self._events.may_cache(generation):
            self._sessions[session_id] = user
            self._sessions_by_user.add(session_id, user)
        return user

    async def _id_token_principal(self, token: str) -> Principal:
        assert self._oidc is not None
        known = self._id_tokens.get(token)
        if known is None:
            provider, identity = await self._oidc.bearer_identity(token)
            session_id = id_token_session_id(token)
            # A token logged out (or whose user was suspended) on any replica
            # is refused here, before `admit` writes its claims to the user's
            # row: an ended session must not change anything.
            if await repo.session_ended(self._db, session_id):
                raise Unauthenticated("the session has ended; log in again", code="session_ended")
            user = await admit(self._db, provider, identity, self._oidc.on_admitted)
            # The token's session row, on its first use on any replica: a
            # logout revokes it (every replica hears), a suspension of the
            # user ends it, and the token's own expiry bounds it.
            if not await repo.ensure_session(self._db, session_id, user.id, identity.expires_at):
                raise InvalidIdToken("this account is suspended", code="user_suspended")  # as `admit` says
            known = (identity.expires_at, session_id)
            self._id_tokens.put(token, known, identity.expires_at.timestamp())
        return Principal(await self._live_user(known[1]), known[1], False, known[0])

    def cached_principal(self, token: str) -> Principal | None:
        """`authenticate`'s warm path for a bearer token, without a
        coroutine: a session token verified before, or an ID token admitted
        before, whose session's user is cached. None: `authenticate` decides."""
        claims = self._verified.get(token)
        if claims is None:
            known = self._id_tokens.get(token) if self._oidc is not None else None
            if known is not None and (user := self._cached_user(known[1])) is not None:
                return Principal(user, known[1], False, known[0])
            return None
        user = self._cached_user(claims.session_id)
        return session_principal(user, claims, False) if user is not None else None

    async def authenticate(self, request: web.Request) -> Principal:
        presented = presented_token(request)
        if presented is None:
            raise Unauthenticated("log in, then send the session cookie or 'Authorization: Bearer <token>'")
        token, via_cookie = presented
        if not via_cookie and (principal := self.cached_principal(token)) is not None:
            return principal  # the warm path of every bearer request
        claims = self._verified.get(token)  # a session token verified before and not expired
        if claims is None:
            if not via_cookie and self._oidc is not None and (self._id_tokens.get(token) is not None or self._oidc.issues(token)):
                return await self._id_token_principal(token)
            claims = sessions.verify(self._secret, token)
            self._verified.put(token, claims, claims.expires_at.timestamp())
        user = self._cached_user(claims.session_id) or await self._live_user(claims.session_id)
        if via_cookie and request.method in _UNSAFE_METHODS and not sessions.csrf_valid(
                self._secret, claims.session_id, request.headers.get(sessions.CSRF_HEADER),
                request.cookies.get(sessions.CSRF_COOKIE)):
            raise Forbidden("cookie-authenticated writes need the X-CSRF-Token header", code="csrf_failed")
        return session_principal(user, claims, via_cookie)
