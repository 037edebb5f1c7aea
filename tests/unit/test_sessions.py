"""Session tokens and CSRF tokens: pinned algorithm, every claim required,
CSRF bound to its session. Pure."""

from __future__ import annotations

import datetime
import uuid

import jwt
import pytest

from provisioning.errors import Unauthenticated
from provisioning.secrets import Secret
from proxy.auth import sessions

SECRET = Secret("s" * 64)  # long enough that the HS512 forgery below draws no key-length warning


def test_sessions_pin_the_algorithm_and_require_every_claim() -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    user, session = uuid.uuid4(), uuid.uuid4()
    token, _ = sessions.mint(SECRET, user, session, now, 3600)
    assert sessions.verify(SECRET, token).session_id == session
    claims = {"iss": sessions.ISSUER, "aud": sessions.AUDIENCE, "sub": str(user), "jti": str(session),
              "iat": int(now.timestamp()), "exp": int(now.timestamp()) + 60}
    forgeries = [
        jwt.encode(claims, SECRET.reveal(), algorithm="HS512"),
        jwt.encode(claims, None, algorithm="none"),
        jwt.encode(claims, "another secret of sufficient length!!", algorithm="HS256"),
        jwt.encode({**claims, "aud": "someone-else"}, SECRET.reveal(), algorithm="HS256"),
        jwt.encode({**claims, "iss": "someone-else"}, SECRET.reveal(), algorithm="HS256"),
        jwt.encode({k: v for k, v in claims.items() if k != "exp"}, SECRET.reveal(), algorithm="HS256"),
        jwt.encode({k: v for k, v in claims.items() if k != "jti"}, SECRET.reveal(), algorithm="HS256"),
        jwt.encode({**claims, "exp": int(now.timestamp()) - 60}, SECRET.reveal(), algorithm="HS256"),
        "x" * 5000,
    ]
    for forged in forgeries:
        with pytest.raises(Unauthenticated):
            sessions.verify(SECRET, forged)


def test_csrf_is_bound_to_the_session() -> None:
    session = uuid.uuid4()
    good = sessions.csrf_token(SECRET, session)
    assert sessions.csrf_valid(SECRET, session, good, good)
    assert not sessions.csrf_valid(SECRET, session, good, None)
    assert not sessions.csrf_valid(SECRET, session, "x", "x")
    # aiohttp hands non-UTF-8 header bytes over as surrogates: unequal, never an exception.
    assert not sessions.csrf_valid(SECRET, session, "\udcff", good)
    assert not sessions.csrf_valid(SECRET, uuid.uuid4(), good, good)
