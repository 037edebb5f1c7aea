"""What a device sign-in's session may do, and how its token says so. Pure."""

from __future__ import annotations

import datetime
import uuid

import jwt
import pytest

from provisioning.errors import BadRequest, Unauthenticated
from provisioning.models import User
from provisioning.secrets import Secret
from proxy.auth import scopes, sessions
from proxy.routes.device import client_name_of, verification_uri

SECRET = Secret("s" * 64)
ADMIN = User(id=uuid.uuid4(), email="root@example.test", is_admin=True)


@pytest.mark.parametrize(("method", "route", "allowed"), [
    ("GET", "/api/v1/workspaces/credentials/kubeconfig", True),
    ("GET", "/api/v1/workspaces/credentials/token", True),
    ("POST", "/api/v1/auth/logout", True),
    ("HEAD", "/api/v1/workspaces/credentials/token", False),
    ("POST", "/api/v1/workspaces/credentials/token", False),
    ("GET", "/api/v1/me", False),
    ("GET", "/api/v1/workspaces", False),
    ("POST", "/api/v1/workspaces/init", False),
    ("POST", "/api/v1/auth/device/approve", False),
    ("POST", "/api/v1/auth/device/lookup", False),
    ("GET", "/api/v1/audit", False),
    ("POST", "/api/v1/users/{id:[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}}/suspend", False),
    ("GET", "", False),
])
def test_a_credentials_session_reaches_only_the_credential_routes(method: str, route: str, allowed: bool) -> None:
    assert scopes.allows_route(scopes.CREDENTIALS, method, route) is allowed
    assert scopes.allows_route(scopes.FULL, method, route)
    assert not scopes.allows_route("something-else", "GET", "/api/v1/workspaces/credentials/token")


def test_only_a_full_session_may_proxy() -> None:
    assert scopes.allows_proxy(scopes.FULL)
    assert not scopes.allows_proxy(scopes.CREDENTIALS)
    assert not scopes.allows_proxy("something-else")


def test_a_credentials_session_never_acts_as_an_admin() -> None:
    assert scopes.acting_user(ADMIN, scopes.FULL) is ADMIN
    demoted = scopes.acting_user(ADMIN, scopes.CREDENTIALS)
    assert not demoted.is_admin and (demoted.id, demoted.email) == (ADMIN.id, ADMIN.email)


def test_the_scope_is_a_signed_claim_and_an_unknown_one_is_refused() -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    user, session = uuid.uuid4(), uuid.uuid4()
    full, _ = sessions.mint(SECRET, user, session, now, 3600)
    assert "scope" not in jwt.decode(full, options={"verify_signature": False})
    assert sessions.verify(SECRET, full).scope == scopes.FULL
    narrow, _ = sessions.mint(SECRET, user, session, now, 3600, scopes.CREDENTIALS)
    assert sessions.verify(SECRET, narrow).scope == scopes.CREDENTIALS
    claims = jwt.decode(narrow, options={"verify_signature": False})
    for scope in ("admin", "", ["full"], None):
        with pytest.raises(Unauthenticated):
            sessions.verify(SECRET, jwt.encode({**claims, "scope": scope}, SECRET.reveal(), algorithm="HS256"))
    # Widening it needs the secret: the claim is signed with the rest.
    widened = jwt.encode({k: v for k, v in claims.items() if k != "scope"}, "not the secret, long enough!!!!!",
                         algorithm="HS256")
    with pytest.raises(Unauthenticated):
        sessions.verify(SECRET, widened)


@pytest.mark.parametrize("name", [None, "", "  ", "tenant-gateway CLI on laptop", "x" * 100])
def test_a_client_name_is_printable_text_or_none(name: str | None) -> None:
    assert client_name_of(name) == ((name or "").strip() or None)


@pytest.mark.parametrize("name", [
    "x" * 101, 42, ["cli"], "line\nbreak", "bell\x07", "\u202eevil", "zero\u200bwidth", "esc\x1b[2J"])
def test_a_client_name_that_could_dress_up_as_something_else_is_refused(name: object) -> None:
    with pytest.raises(BadRequest) as refused:
        client_name_of(name)
    assert refused.value.code == "invalid_client_name"


def test_the_verification_uri_carries_no_code() -> None:
    assert verification_uri("https://gw.example", None) == "https://gw.example/device"
    assert verification_uri("https://gw.example", "org") == \
        "https://gw.example/api/v1/auth/oidc/org/login?next=%2Fdevice"
