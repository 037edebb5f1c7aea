"""A device sign-in's session can only mint workspace credentials, and its
approval shows what asked and needs the code typed.

Attacks with real credentials: an administrator approves a command line (as
a phished one would), and its session tries every route the gateway
registers, read from the router itself, so a route added later is tried
too. Only the credential routes and logout let it in (403
`credentials_only` everywhere else, the /k8s/ proxy included); the
administrator's own session keeps its rights. The credential routes'
200s, with a real TokenRequest, are in tests/integration/test_device_scope.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from proxy.auth import scopes
from tests.support.gatewayclient import Session, admin_session, error_of, login, register_and_login

# Routes that ask nobody who is calling: a token is not what they look at.
PUBLIC_ROUTES = frozenset({
    ("POST", "/api/v1/auth/register"), ("POST", "/api/v1/auth/login"), ("GET", "/api/v1/auth/providers"),
    ("GET", "/api/v1/auth/oidc/{name}/login"), ("GET", "/api/v1/auth/oidc/{name}/callback"),
    ("POST", "/api/v1/auth/device"), ("POST", "/api/v1/auth/device/token"), ("GET", "/api/v1/openapi.json"),
    ("GET", "/"), ("GET", "/device"), ("GET", "/console/{name}"), ("GET", "/healthz"), ("GET", "/readyz"),
})


def concrete(route: str) -> str:
    """A path the route (as aiohttp names it) matches: ids for ids, a name for a
    name, a pod list for the proxy's tail."""
    for parameter, value in (("{id}", str(uuid.uuid4())), ("{workspace_id}", str(uuid.uuid4())),
                             ("{user_id}", str(uuid.uuid4())), ("{email}", "someone@example.test"),
                             ("{provider}", "x"), ("{group}", "x"), ("{tail}", "api/v1/pods"), ("{name}", "x")):
        route = route.replace(parameter, value)
    assert "{" not in route, route
    return route


async def device_session(gateway: Any, approver: Session, client_name: str = "tenant-gateway CLI on test") -> str:
    started = await (await gateway.post("/api/v1/auth/device", json={"client_name": client_name})).json()
    approved = await approver.call("POST", "/api/v1/auth/device/approve", json={"user_code": started["user_code"]})
    assert approved.status == 204, await approved.text()
    answer = await gateway.post("/api/v1/auth/device/token", json={"device_code": started["device_code"]})
    assert answer.status == 200, await answer.text()
    return str((await answer.json())["token"])


async def test_an_admins_device_session_is_refused_every_route_but_the_credential_routes(
        gateway: Any, database_url: str) -> None:
    root = await admin_session(gateway, database_url)
    token = await device_session(gateway, root)
    bearer = {"Authorization": f"Bearer {token}"}
    routes = {(route.method if route.method != "*" else "GET", route.resource.canonical)
              for route in gateway.server.app.router.routes()
              if route.resource is not None and route.method != "HEAD"}
    assert ("GET", "/k8s/{workspace_id}/{tail}") in routes and len(routes) > 25, routes
    let_in = set()
    for method, route in sorted(routes, key=lambda r: r == ("POST", "/api/v1/auth/logout")):  # logout last
        if (method, route) in PUBLIC_ROUTES:
            continue
        answer = await gateway.request(method, concrete(route), headers=bearer,
                                       json={} if method == "POST" else None)
        body = await answer.json(content_type=None)
        code = body.get("error", {}).get("code") if isinstance(body, dict) else None
        if code == scopes.REFUSAL_CODE:
            assert answer.status == 403, (method, route)
        else:
            let_in.add((method, route))
    assert let_in == set(scopes.CREDENTIAL_ROUTES)


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/v1/audit"),
    ("GET", "/api/v1/workspaces?all=true"),
    ("POST", f"/api/v1/users/{uuid.uuid4()}/suspend"),
    ("POST", f"/api/v1/workspaces/{uuid.uuid4()}/resume"),
    ("GET", "/api/v1/me"),
    ("POST", "/api/v1/workspaces/init"),
    ("POST", "/api/v1/auth/device/approve"),
    ("GET", f"/k8s/{uuid.uuid4()}/api/v1/namespaces/tenant-x/pods"),
])
async def test_the_approvers_admin_rights_never_reach_the_device_session(
        gateway: Any, database_url: str, method: str, path: str) -> None:
    root = await admin_session(gateway, database_url)
    token = await device_session(gateway, root)
    refused = await gateway.request(method, path, headers={"Authorization": f"Bearer {token}"},
                                    json={"user_code": "BCDF-GHJK"} if method == "POST" else None)
    # (on /k8s/ the refusal is also a Kubernetes Status, around the same error)
    assert (refused.status, (await refused.json())["error"]["code"]) == (403, scopes.REFUSAL_CODE)
    assert (await root.call("GET", "/api/v1/audit?limit=1")).status == 200  # the admin's own session still is one


async def test_a_device_session_ends_itself_and_is_refused_after(gateway: Any) -> None:
    user = await register_and_login(gateway)
    token = await device_session(gateway, user)
    bearer = {"Authorization": f"Bearer {token}"}
    assert (await gateway.post("/api/v1/auth/logout", headers=bearer)).status == 204
    answer = await gateway.get("/api/v1/workspaces/credentials/token", headers=bearer)
    assert await error_of(answer) == (401, "session_ended")


async def test_the_approver_sees_what_asked_before_approving(gateway: Any, database_url: str) -> None:
    """The look-up shows the client's name, address and time and approves nothing; the
    approval's audit row says what was approved."""
    user = await register_and_login(gateway)
    started = await (await gateway.post("/api/v1/auth/device", json={"client_name": "laptop of someone"})).json()
    assert "verification_uri_complete" not in started and started["verification_uri"].endswith("/device")
    typed = started["user_code"].lower().replace("-", " ")  # as a person might type it
    looked = await user.call("POST", "/api/v1/auth/device/lookup", json={"user_code": typed})
    assert looked.status == 200, await looked.text()
    asked = await looked.json()
    assert asked["client_name"] == "laptop of someone" and asked["client_address"] == "127.0.0.1"
    assert set(asked) == {"client_name", "client_address", "started_at", "expires_at"}
    poll = {"device_code": started["device_code"]}
    assert await error_of(await gateway.post("/api/v1/auth/device/token", json=poll)) == (400, "authorization_pending")

    assert (await user.call("POST", "/api/v1/auth/device/approve", json={"user_code": typed})).status == 204
    assert (await gateway.post("/api/v1/auth/device/token", json=poll)).status == 200
    root = await admin_session(gateway, database_url)
    rows = await (await root.call("GET", f"/api/v1/audit?user_id={user.user_id}&action=ApproveDevice")).json()
    assert [row["details"] for row in rows] == [
        {"client_name": "laptop of someone", "client_address": "127.0.0.1", "scope": scopes.CREDENTIALS}]
    # Approved: nothing left to look at.
    gone = await user.call("POST", "/api/v1/auth/device/lookup", json={"user_code": typed})
    assert await error_of(gone) == (400, "invalid_user_code")


async def test_a_start_without_a_name_is_shown_as_nameless_and_a_deceptive_name_is_refused(gateway: Any) -> None:
    user = await register_and_login(gateway)
    started = await (await gateway.post("/api/v1/auth/device", json={})).json()
    looked = await user.call("POST", "/api/v1/auth/device/lookup", json={"user_code": started["user_code"]})
    assert (await looked.json())["client_name"] is None
    for name in ("Your IT department\u202e", "x" * 101, 7, "two\nlines"):
        refused = await gateway.post("/api/v1/auth/device", json={"client_name": name})
        assert await error_of(refused) == (400, "invalid_client_name")


async def test_guessing_codes_runs_into_a_small_limit_per_session(gateway: Any) -> None:
    """Ten look-ups or approvals per session in ten minutes; past them even the
    right code is refused, so a guess past the limit learns nothing."""
    user = await register_and_login(gateway)
    started = await (await gateway.post("/api/v1/auth/device", json={})).json()
    for _ in range(10):
        wrong = await user.call("POST", "/api/v1/auth/device/lookup", json={"user_code": "BBBB-BBBB"})
        assert await error_of(wrong) == (400, "invalid_user_code")
    for path in ("/api/v1/auth/device/lookup", "/api/v1/auth/device/approve"):
        limited = await user.call("POST", path, json={"user_code": started["user_code"]})
        assert await error_of(limited) == (429, "rate_limited")
    poll = {"device_code": started["device_code"]}
    assert await error_of(await gateway.post("/api/v1/auth/device/token", json=poll)) == (400, "authorization_pending")
    # The limit is the session's: the same person signed in afresh may approve.
    again = await login(gateway, user.email)
    assert (await again.call("POST", "/api/v1/auth/device/approve", json={"user_code": started["user_code"]})).status == 204
