"""Session tokens: HS256 JWTs whose `jti` names a server-side session row.

The signature lets a replica reject forged or expired tokens without a
database trip; the row lets logout and suspension end a session before its
`exp`. The algorithm is pinned and every registered claim is required, so
`alg: none`, algorithm confusion and tokens minted for another audience or
issuer all fail. The CSRF token is derived from the session id, so a cookie
planted by a sibling origin cannot be paired with a guessed header. A
session narrower than its user's rights (a device sign-in's,
proxy.auth.scopes) says so in a signed `scope` claim; a token without one is
a full session, and one with a scope this gateway does not know is refused.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import uuid
from dataclasses import dataclass

import jwt

from provisioning.errors import Unauthenticated
from provisioning.secrets import Secret
from proxy.auth.scopes import FULL, SCOPES

ALGORITHM = "HS256"
ISSUER = "tenant-gateway"
AUDIENCE = "tenant-gateway/session"
SESSION_COOKIE = "gw_session"
CSRF_COOKIE = "gw_csrf"
CSRF_HEADER = "X-CSRF-Token"
# Session tokens are ~300 bytes; anything far larger is not one of ours.
_MAX_TOKEN_LENGTH = 4096


@dataclass(frozen=True)
class SessionClaims:
    session_id: uuid.UUID
    user_id: uuid.UUID
    expires_at: datetime.datetime
    scope: str = FULL


def mint(secret: Secret, user_id: uuid.UUID, session_id: uuid.UUID, now: datetime.datetime,
         ttl_seconds: int, scope: str = FULL) -> tuple[str, datetime.datetime]:
    assert scope in SCOPES
    expires_at = now + datetime.timedelta(seconds=ttl_seconds)
    claims: dict[str, object] = {"iss": ISSUER, "aud": AUDIENCE, "sub": str(user_id), "jti": str(session_id),
                                 "iat": int(now.timestamp()), "exp": int(expires_at.timestamp())}
    if scope != FULL:
        claims["scope"] = scope
    return jwt.encode(claims, secret.reveal(), algorithm=ALGORITHM), expires_at


def verify(secret: Secret, token: str) -> SessionClaims:
    if not token or len(token) > _MAX_TOKEN_LENGTH:
        raise Unauthenticated("invalid session", code="invalid_session")
    try:
        claims = jwt.decode(
            token, secret.reveal(), algorithms=[ALGORITHM], audience=AUDIENCE, issuer=ISSUER,
            options={"require": ["exp", "iat", "iss", "aud", "sub", "jti"]}, leeway=5,
        )
        scope = claims.get("scope", FULL)
        if scope not in SCOPES:  # a narrower scope of a newer gateway must not widen here
            raise ValueError("unknown scope")
        return SessionClaims(
            session_id=uuid.UUID(claims["jti"]),
            user_id=uuid.UUID(claims["sub"]),
            expires_at=datetime.datetime.fromtimestamp(int(claims["exp"]), datetime.timezone.utc),
            scope=scope,
        )
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("the session has expired; log in again", code="session_expired") from None
    except (jwt.PyJWTError, ValueError, TypeError, KeyError):
        raise Unauthenticated("invalid session", code="invalid_session") from None


def csrf_token(secret: Secret, session_id: uuid.UUID) -> str:
    digest = hmac.new(secret.reveal().encode(), b"csrf:" + session_id.bytes, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def csrf_valid(secret: Secret, session_id: uuid.UUID, header: str | None, cookie: str | None) -> bool:
    """Double submit, bound to the session: header == cookie == HMAC(session)."""
    if not header or not cookie:
        return False
    expected = csrf_token(secret, session_id).encode()
    # surrogateescape: aiohttp hands non-UTF-8 header bytes over as surrogates;
    # they must compare unequal, not raise.
    given_header, given_cookie = (value.encode("utf-8", "surrogateescape") for value in (header, cookie))
    # Evaluate both comparisons: no short-circuit timing difference.
    return hmac.compare_digest(given_header, expected) & hmac.compare_digest(given_cookie, expected)
