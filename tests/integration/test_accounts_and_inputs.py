"""Accounts, sessions, CSRF, rate limits and the contract's bad-input answers."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.gatewayclient import PASSWORD, admin_session, register_and_login, unique_email

pytestmark = pytest.mark.cluster


async def error_of(response: Any) -> tuple[int, str]:
    body = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return response.status, body["error"]["code"]


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


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'"x"', b"\xff\xfe"])
async def test_malformed_json_is_400(gateway: Any, raw: bytes) -> None:
    response = await gateway.post("/api/v1/auth/register", data=raw, headers={"Content-Type": "application/json"})
    assert await error_of(response) == (400, "invalid_json")


async def test_oversized_body_is_413(gateway: Any) -> None:
    response = await gateway.post("/api/v1/auth/login", data=b"{" + b" " * 70_000 + b"}")
    assert (await error_of(response))[0] == 413


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


async def test_cookie_writes_need_the_csrf_header(gateway: Any) -> None:
    user = await register_and_login(gateway)
    cookies = f"gw_session={user.token}; gw_csrf={user.csrf}"
    read = await gateway.get("/api/v1/me", headers={"Cookie": cookies})
    assert read.status == 200
    missing = await gateway.post("/api/v1/workspaces/init", json={}, headers={"Cookie": cookies})
    assert await error_of(missing) == (403, "csrf_failed")
    forged = await gateway.post("/api/v1/workspaces/init", json={},
                                headers={"Cookie": f"gw_session={user.token}; gw_csrf=forged", "X-CSRF-Token": "forged"})
    assert await error_of(forged) == (403, "csrf_failed")
    ok = await gateway.post("/api/v1/workspaces/init", json={}, headers={"Cookie": cookies, "X-CSRF-Token": user.csrf})
    assert ok.status == 201


@pytest.mark.parametrize("authorization", [
    "Bearer nonsense", "Basic dXNlcjpwYXNz", "Bearer ", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
])
async def test_bad_credentials_are_401(gateway: Any, authorization: str) -> None:
    response = await gateway.get("/api/v1/me", headers={"Authorization": authorization})
    assert (await error_of(response))[0] == 401


async def test_workspace_routes_bad_input(gateway: Any, database_url: str) -> None:
    user = await register_and_login(gateway)
    assert await error_of(await user.call("POST", "/api/v1/workspaces/init", json={"tier": "platinum"})) == (400, "unknown_tier")
    assert await error_of(await user.call("POST", "/api/v1/workspaces/init", json={"tier": 7})) == (400, "unknown_tier")
    assert await error_of(await user.call("GET", "/api/v1/workspaces/credentials/kubeconfig")) == (404, "no_workspace")
    assert (await error_of(await user.call("GET", "/api/v1/workspaces/credentials/kubeconfig?workspace_id=nope")))[0] == 404
    assert (await error_of(await user.call("GET", f"/api/v1/workspaces/{uuid.uuid4()}")))[0] == 404
    assert (await error_of(await user.call("GET", "/api/v1/workspaces/../../etc/passwd")))[0] == 404
    assert await error_of(await user.call("GET", "/api/v1/workspaces?all=true")) == (403, "admin_required")
    assert await error_of(await user.call("GET", "/api/v1/audit")) == (403, "admin_required")
    mine = await user.init()
    assert await error_of(await user.call("POST", f"/api/v1/workspaces/{mine['id']}/suspend")) == (403, "admin_required")
    # Someone else's workspace is 404, not 403: ids cannot be probed.
    other = await register_and_login(gateway)
    assert (await error_of(await other.call("GET", f"/api/v1/workspaces/{mine['id']}")))[0] == 404
    assert (await error_of(await other.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={mine['id']}")))[0] == 404
    root = await admin_session(gateway, database_url)
    assert (await error_of(await root.call("POST", f"/api/v1/workspaces/{uuid.uuid4()}/suspend")))[0] == 404
    assert (await root.call("GET", f"/api/v1/workspaces/{mine['id']}")).status == 200
    every = await (await root.call("GET", "/api/v1/workspaces?all=true")).json()
    assert mine["id"] in {w["id"] for w in every}
    assert (await error_of(await gateway.get("/no/such/route")))[0] == 404
    assert (await error_of(await gateway.delete("/api/v1/me")))[0] == 405


async def test_malformed_queries_are_400_and_literal_paths_are_not_ids(gateway: Any, database_url: str) -> None:
    """Found by schemathesis against the OpenAPI document: a filter that is not
    what it claims to be is a mistake to report, not a value to guess at."""
    user = await register_and_login(gateway)
    root = await admin_session(gateway, database_url)
    assert await error_of(await user.call("GET", "/api/v1/workspaces?all=maybe")) == (400, "invalid_query")
    assert (await user.call("GET", "/api/v1/workspaces?all=false")).status == 200
    for query in ("workspace_id=nope", "user_id=1", f"user_id={uuid.uuid4()}x"):
        assert await error_of(await root.call("GET", f"/api/v1/audit?{query}")) == (400, "invalid_query"), query
    assert (await root.call("GET", f"/api/v1/audit?user_id={root.user_id}")).status == 200
    # `init` and `credentials` are literal segments, never looked up as workspace ids.
    wrong_method = await user.call("GET", "/api/v1/workspaces/init")
    assert (await error_of(wrong_method))[0] == 405 and wrong_method.headers["Allow"] == "POST"
    assert (await error_of(await user.call("GET", "/api/v1/workspaces/credentials")))[0] == 404


async def test_init_is_rate_limited_but_a_repeat_never_is(make_gateway: Any) -> None:
    """Onboardings count against the limit (per user and per address); a
    repeat for a workspace that needs no work makes nothing and is always 200."""
    client = await make_gateway(GATEWAY_RATE_INIT="2/3600")
    first = await register_and_login(client)
    made = await first.call("POST", "/api/v1/workspaces/init", json={})
    assert made.status == 201
    for _ in range(4):
        again = await first.call("POST", "/api/v1/workspaces/init", json={})
        assert again.status == 200 and (await again.json())["id"] == (await made.json())["id"]
    second = await register_and_login(client)
    assert (await second.call("POST", "/api/v1/workspaces/init", json={})).status == 201
    third = await register_and_login(client)  # a third onboarding from the same address
    limited = await third.call("POST", "/api/v1/workspaces/init", json={})
    assert await error_of(limited) == (429, "rate_limited")
    assert 3000 < int(limited.headers["Retry-After"]) <= 3600


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


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/healthz", 200),
    ("GET", "/api/v1/workspaces", 401),
    ("GET", "/no/such/route", 404),
    ("GET", f"/k8s/{uuid.UUID(int=1)}/api/v1/namespaces", 401),
])
async def test_every_answer_is_hardened_and_names_no_versions(gateway: Any, method: str, path: str,
                                                              status: int) -> None:
    answer = await gateway.request(method, path)
    assert answer.status == status
    assert answer.headers["Server"] == "tenant-gateway"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["Referrer-Policy"] == "no-referrer"
    assert answer.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert answer.headers["X-Request-Id"]


async def test_cors_allows_exact_origins_only(make_gateway: Any) -> None:
    client = await make_gateway(GATEWAY_CORS_ORIGINS="https://ui.example.test")
    allowed = await client.options("/api/v1/me", headers={"Origin": "https://ui.example.test",
                                                            "Access-Control-Request-Method": "POST"})
    assert allowed.status == 204
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://ui.example.test"
    assert allowed.headers["Access-Control-Allow-Credentials"] == "true"
    refused = await client.options("/api/v1/me", headers={"Origin": "https://evil.example.test",
                                                            "Access-Control-Request-Method": "POST"})
    assert refused.status == 403 and "Access-Control-Allow-Origin" not in refused.headers
    plain = await client.get("/healthz", headers={"Origin": "https://evil.example.test"})
    assert "Access-Control-Allow-Origin" not in plain.headers


async def test_an_allowed_origin_may_read_retry_after_and_the_ids_to_report(make_gateway: Any) -> None:
    """A page on an allowed origin sees only CORS-safelisted headers unless
    they are exposed: without Retry-After it cannot tell when to retry a
    429. The list is exact; other origins get no CORS headers at all."""
    client = await make_gateway(GATEWAY_CORS_ORIGINS="https://ui.example.test", GATEWAY_RATE_LOGIN="2/3600")
    exposed = {"Retry-After", "Warning", "Audit-Id", "X-Request-Id"}
    origin = {"Origin": "https://ui.example.test"}
    user = await register_and_login(client)  # the first of two logins this address may make
    workspace = await user.init()
    # A relayed answer from the API server: its own Audit-Id, readable by the page.
    relayed = await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps",
                              headers=origin)
    wrong = {"email": unique_email(), "password": "not the password at all"}
    first = await client.post("/api/v1/auth/login", json=wrong, headers=origin)
    limited = await client.post("/api/v1/auth/login", json=wrong, headers=origin)
    assert (relayed.status, first.status, limited.status) == (200, 401, 429)
    assert int(limited.headers["Retry-After"]) > 0 and relayed.headers["Audit-Id"]
    for answer in (relayed, first, limited):
        assert answer.headers["Access-Control-Allow-Origin"] == "https://ui.example.test"
        assert {h.strip() for h in answer.headers["Access-Control-Expose-Headers"].split(",")} == exposed
    elsewhere = await client.post("/api/v1/auth/login", json=wrong, headers={"Origin": "https://evil.example.test"})
    assert elsewhere.status == 429 and not {"Access-Control-Allow-Origin", "Access-Control-Expose-Headers"} & set(
        elsewhere.headers)


async def test_suspending_a_user_ends_their_sessions_at_once(gateway: Any, database_url: str) -> None:
    user = await register_and_login(gateway)
    workspace = await user.init()
    proxied = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"
    assert (await user.call("GET", proxied)).status == 200  # warms the proxy's session cache
    root = await admin_session(gateway, database_url)
    assert (await user.call("POST", f"/api/v1/users/{user.user_id}/suspend")).status == 403
    answer = await root.call("POST", f"/api/v1/users/{user.user_id}/suspend")
    assert await answer.json() == {"id": user.user_id, "status": "suspended"}
    assert (await user.call("GET", "/api/v1/me")).status == 401
    assert (await user.call("GET", proxied)).status == 401
    again = await gateway.post("/api/v1/auth/login", json={"email": user.email, "password": PASSWORD})
    assert again.status == 401
    await root.call("POST", f"/api/v1/users/{user.user_id}/resume")
    assert (await gateway.post("/api/v1/auth/login", json={"email": user.email, "password": PASSWORD})).status == 200
    assert (await root.call("POST", f"/api/v1/users/{root.user_id}/suspend")).status == 403
