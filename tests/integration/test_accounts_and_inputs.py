"""Accounts, sessions, CSRF, rate limits and bad input where a workspace on
the cluster is involved; what needs no cluster is in tests/component."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.gatewayclient import PASSWORD, admin_session, error_of, register_and_login, unique_email

pytestmark = pytest.mark.cluster


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
