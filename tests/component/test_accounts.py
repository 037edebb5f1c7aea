"""Accounts and sessions: registration, login, logout and their rate limits,
against the gateway and a real PostgreSQL (no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.gatewayclient import PASSWORD, error_of, register_and_login, unique_email


@pytest.mark.parametrize("body, status, code", [
    ({"email": "not-an-email", "password": PASSWORD}, 400, "invalid_email"),
    ({"email": "a@b", "password": PASSWORD}, 400, "invalid_email"),
    ({"email": ["x@example.test"], "password": PASSWORD}, 400, "invalid_email"),
    ({"email": "ok@example.test", "password": "short"}, 400, "weak_password"),
    ({"email": "ok@example.test", "password": "aaaaaaaaaaaa"}, 400, "weak_password"),
    ({"email": "ok@example.test", "password": 12345678901}, 400, "invalid_password"),
    ({"email": "ok@example.test"}, 400, "invalid_password"),
])
async def test_register_rejects_bad_input(gateway: Any, body: dict[str, Any], status: int, code: str) -> None:
    assert await error_of(await gateway.post("/api/v1/auth/register", json=body)) == (status, code)


async def test_duplicate_email_is_409_case_insensitively(gateway: Any) -> None:
    email = unique_email()
    await register_and_login(gateway, email)
    again = await gateway.post("/api/v1/auth/register", json={"email": email.upper(), "password": PASSWORD})
    assert await error_of(again) == (409, "email_taken")


async def test_login_answers_unknown_email_and_wrong_password_identically(gateway: Any) -> None:
    known = await register_and_login(gateway)
    wrong = await gateway.post("/api/v1/auth/login", json={"email": known.email, "password": "wrong password!!"})
    unknown = await gateway.post("/api/v1/auth/login", json={"email": unique_email(), "password": "wrong password!!"})
    assert wrong.status == unknown.status == 401
    assert await wrong.json() == await unknown.json()


async def test_login_sets_hardened_cookies_and_logout_ends_the_session_at_once(gateway: Any) -> None:
    email = unique_email()
    await register_and_login(gateway, email)
    response = await gateway.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    cookies = {c.split("=", 1)[0]: c for c in response.headers.getall("Set-Cookie")}
    session_cookie, csrf_cookie = cookies["gw_session"], cookies["gw_csrf"]
    for attribute in ("HttpOnly", "Secure", "SameSite=Strict", "Path=/"):
        assert attribute in session_cookie
    assert "HttpOnly" not in csrf_cookie and "Secure" in csrf_cookie and "SameSite=Strict" in csrf_cookie
    body = await response.json()
    token = body["token"]
    assert session_cookie.startswith(f"gw_session={token}")
    me = await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert (await me.json())["email"] == email
    out = await gateway.post("/api/v1/auth/logout", headers={"Authorization": f"Bearer {token}"})
    assert out.status == 204
    after = await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert await error_of(after) == (401, "session_ended")


@pytest.mark.parametrize("authorization", [
    "Bearer nonsense", "Basic dXNlcjpwYXNz", "Bearer ", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
])
async def test_bad_credentials_are_401(gateway: Any, authorization: str) -> None:
    response = await gateway.get("/api/v1/me", headers={"Authorization": authorization})
    assert (await error_of(response))[0] == 401


async def test_login_is_rate_limited(make_gateway: Any) -> None:
    client = await make_gateway(GATEWAY_RATE_LOGIN="3/60")
    email = unique_email()
    for _ in range(3):
        await client.post("/api/v1/auth/login", json={"email": email, "password": "wrong password!!"})
    limited = await client.post("/api/v1/auth/login", json={"email": email, "password": "wrong password!!"})
    assert limited.status == 429 and "Retry-After" in limited.headers


async def test_login_is_limited_per_address_as_well_as_per_email(make_gateway: Any) -> None:
    """Both keys are counted by one statement: new emails from one address run out too."""
    client = await make_gateway(GATEWAY_RATE_LOGIN="3/60")
    for _ in range(3):
        answer = await client.post("/api/v1/auth/login", json={"email": unique_email(), "password": "wrong password!!"})
        assert answer.status == 401
    limited = await client.post("/api/v1/auth/login", json={"email": unique_email(), "password": "wrong password!!"})
    assert await error_of(limited) == (429, "rate_limited")


async def test_rate_limits_hold_across_replicas(make_gateway: Any) -> None:
    """Two gateway apps on one database share one counter."""
    first = await make_gateway(GATEWAY_RATE_REGISTER="2/3600")
    second = await make_gateway(GATEWAY_RATE_REGISTER="2/3600")
    answers = [await c.post("/api/v1/auth/register", json={"email": unique_email(), "password": PASSWORD})
               for c in (first, second, first)]
    assert [a.status for a in answers] == [201, 201, 429]


async def test_registration_can_be_turned_off(make_gateway: Any) -> None:
    client = await make_gateway(GATEWAY_REGISTRATION="false")
    answer = await client.post("/api/v1/auth/register", json={"email": unique_email(), "password": PASSWORD})
    assert await error_of(answer) == (403, "registration_disabled")
