"""Single sign-on against a real Keycloak with two organisations (seed 004).

Given the gateway configured with one provider per organisation's realm,
when a user signs in through Keycloak's own login form (plain HTTP: follow
the redirect, post the form, follow back), then the gateway opens the same
session a password login does, keyed by (issuer, subject), with admin rights
from the provider's groups at this sign-in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any, Callable

import pytest

from devstack.cluster import LocalCluster
from devstack.keycloak import ADMIN_GROUP, AUTOMATION_CLIENT_ID, OTHER_CLIENT_ID
from provisioning.db.pool import Database
from proxy import keys
from tests.support.signin_browser import new_browser
from tests.support.gatewayclient import PASSWORD, Session, admin_session, register_and_login
from tests.support.watches import open_watch, until_closed

pytestmark = [pytest.mark.cluster, pytest.mark.keycloak]


def both(keycloak: Any, **extra: Any) -> list[dict[str, Any]]:
    return [keycloak.provider_config("org-a", **extra), keycloak.provider_config("org-b", **extra)]


async def me(client: Any, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    answer = await client.get("/api/v1/me", headers=headers)
    return answer.status, await answer.json()


async def test_providers_are_listed_with_their_login_links(make_gateway: Callable[..., Any], keycloak: Any) -> None:
    gateway = await make_gateway(oidc_providers=both(keycloak))
    answer = await gateway.get("/api/v1/auth/providers")
    assert answer.status == 200
    assert await answer.json() == [
        {"name": "org-a", "display_name": "Organisation A", "login_url": "/api/v1/auth/oidc/org-a/login"},
        {"name": "org-b", "display_name": "Organisation B", "login_url": "/api/v1/auth/oidc/org-b/login"},
    ]


async def test_browser_sign_in_through_keycloaks_login_form_opens_a_session(
        make_gateway: Callable[..., Any], keycloak: Any, database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    gateway = await make_gateway(oidc_providers=both(keycloak))
    browser = new_browser(gateway, keycloak)
    try:
        authorization = await browser.start("org-a", "/workspaces?tab=mine")
        assert authorization.startswith(keycloak.issuer("org-a") + "/protocol/openid-connect/auth?")
        assert "code_challenge_method=S256" in authorization and "nonce=" in authorization
        landed = await browser.callback(await browser.sign_in_at_provider(authorization, "alice"))
        assert landed.status == 302 and landed.headers["Location"] == "/workspaces?tab=mine"
        session, csrf = browser.cookie("gw_session"), browser.cookie("gw_csrf")
        assert session and csrf
        set_cookies = landed.headers.getall("Set-Cookie")
        assert any(c.startswith("gw_session=") and "HttpOnly" in c and "SameSite=Strict" in c and "Secure" in c
                   for c in set_cookies)
        status, body = await me(gateway, {"Cookie": f"gw_session={session}"})
        assert status == 200
        assert body["email"] == "alice@shared.example" and body["is_admin"] is True and body["provider"] == "org-a"
        # The same CSRF discipline as password login.
        refused = await gateway.post("/api/v1/workspaces/init", json={}, headers={"Cookie": f"gw_session={session}"})
        assert refused.status == 403
    finally:
        await browser.close()
    root = await admin_session(gateway, database_url)
    rows = await (await root.call("GET", f"/api/v1/audit?user_id={body['id']}&action=Login")).json()
    assert rows[0]["details"]["provider"] == "org-a" and rows[0]["details"]["result"] == "success"
    logged = "\n".join(record.getMessage() + str(record.__dict__) for record in caplog.records)
    assert session not in logged and keycloak.secret("org-a") not in logged


async def test_the_same_email_at_two_organisations_is_two_users_and_never_takes_over_a_password_account(
        make_gateway: Callable[..., Any], keycloak: Any) -> None:
    gateway = await make_gateway(oidc_providers=both(keycloak))
    local = await register_and_login(gateway, "alice@shared.example")
    ids = {local.user_id}
    for realm in ("org-a", "org-b"):
        browser = new_browser(gateway, keycloak)
        try:
            assert (await browser.sign_in(realm, "alice")).status == 302
            # As a bearer: the test client's own jar holds the password account's cookie.
            status, body = await me(gateway, {"Authorization": f"Bearer {browser.cookie('gw_session')}"})
            assert status == 200 and body["provider"] == realm
            ids.add(body["id"])
        finally:
            await browser.close()
    assert len(ids) == 3
    # The password account still signs in with its password, and only it does.
    answer = await gateway.post("/api/v1/auth/login", json={"email": "alice@shared.example", "password": PASSWORD})
    assert answer.status == 200 and (await answer.json())["user"]["id"] == local.user_id


async def test_admin_rights_are_read_from_the_groups_at_every_sign_in(
        make_gateway: Callable[..., Any], keycloak: Any) -> None:
    first = await make_gateway(oidc_providers=[keycloak.provider_config("org-a")])
    later = await make_gateway(oidc_providers=[keycloak.provider_config("org-a", admin_groups=["nobody"])])
    seen = []
    for gateway in (first, later):
        browser = new_browser(gateway, keycloak)
        try:
            await browser.sign_in("org-a", "alice")
            seen.append((await me(gateway, {"Cookie": f"gw_session={browser.cookie('gw_session')}"}))[1])
        finally:
            await browser.close()
    assert seen[0]["id"] == seen[1]["id"]
    assert [body["is_admin"] for body in seen] == [True, False]


async def test_an_older_or_logged_out_id_token_does_not_give_back_admin_rights(
        make_gateway: Callable[..., Any], keycloak: Any, database_url: str) -> None:
    """Given alice holding an ID token from while she was an admin, when the
    provider's word changes and a newer token says she is not, then her old
    token, shown to a replica that has not seen it, does not make her one
    again; and a token that was logged out is refused before its claims
    touch her row. (The realm's groups are fixed for the whole session, so
    the provider's word changes by the gateway reading it differently:
    admin_groups. The tokens and their issue times are Keycloak's own.)"""
    reads_admin = [keycloak.provider_config("org-a")]
    reads_not_admin = [keycloak.provider_config("org-a", admin_groups=["nobody"])]

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    old = keycloak.password_grant("org-a", "alice")["id_token"]
    status, body = await me(await make_gateway(oidc_providers=reads_admin), bearer(old))
    assert status == 200 and body["is_admin"] is True
    await asyncio.sleep(1.1)  # issue times are whole seconds
    newer = keycloak.password_grant("org-a", "alice")["id_token"]
    status, body = await me(await make_gateway(oidc_providers=reads_not_admin), bearer(newer))
    assert status == 200 and body["is_admin"] is False

    fresh_replica = await make_gateway(oidc_providers=reads_admin)
    status, body = await me(fresh_replica, bearer(old))
    assert status == 200 and body["is_admin"] is False
    refused = await fresh_replica.get("/api/v1/audit", headers=bearer(old))
    assert refused.status == 403 and (await refused.json())["error"]["code"] == "admin_required"

    # Forward in time it still follows the provider; then that token is logged out.
    await asyncio.sleep(1.1)
    newest = keycloak.password_grant("org-a", "alice")["id_token"]
    status, body = await me(fresh_replica, bearer(newest))
    assert status == 200 and body["is_admin"] is True
    assert (await fresh_replica.post("/api/v1/auth/logout", headers=bearer(newest))).status == 204
    # Another replica, reading alice as no admin, has not seen it: refused
    # before admit, which would otherwise have written its reading.
    answer = await (await make_gateway(oidc_providers=reads_not_admin)).get("/api/v1/me", headers=bearer(newest))
    assert answer.status == 401 and (await answer.json())["error"]["code"] == "session_ended"
    db = await Database.connect(database_url, min_size=1, max_size=1)
    try:
        row = await db.fetchrow("SELECT is_admin FROM users WHERE id = $1", uuid.UUID(body["id"]))
    finally:
        await db.close()
    assert row is not None and row["is_admin"] is True


async def test_signing_in_again_cuts_no_open_stream_and_a_suspension_still_does(
        make_gateway: Callable[..., Any], keycloak: Any, database_url: str) -> None:
    """Given bob's watch open through the gateway on his ID token, when he
    signs in again (Keycloak's login form, and a newer ID token on the API),
    then the watch stays open: his row took the new token's issue time, and
    nothing the replicas act on changed. When an admin suspends him, it ends
    within 5 s."""
    gateway = await make_gateway(oidc_providers=[keycloak.provider_config("org-a")])
    bob = Session(gateway, "", "bob@org-a.example", keycloak.password_grant("org-a", "bob")["id_token"], "")
    created = await bob.call("POST", "/api/v1/workspaces/init", json={})
    assert created.status == 201, await created.text()
    workspace = await created.json()
    bob.user_id = (await me(gateway, bob.bearer))[1]["id"]
    watch = asyncio.create_task(until_closed(await open_watch(gateway, bob, workspace), 60))
    await asyncio.sleep(1.1)  # issue times are whole seconds: the next tokens are newer
    browser = new_browser(gateway, keycloak)
    try:
        assert (await browser.sign_in("org-a", "bob")).status == 302
    finally:
        await browser.close()
    newer = keycloak.password_grant("org-a", "bob")["id_token"]
    assert (await me(gateway, {"Authorization": f"Bearer {newer}"}))[0] == 200
    await asyncio.sleep(2)  # an event would have reached the replica in milliseconds
    assert not watch.done()
    root = await admin_session(gateway, database_url)
    suspended_at = time.monotonic()
    assert (await root.call("POST", f"/api/v1/users/{bob.user_id}/suspend")).status == 200
    await watch
    assert time.monotonic() - suspended_at < 5


@pytest.mark.parametrize("username, code, extra", [
    ("carol", "email_not_verified", {}),
    ("dave", "group_not_allowed", {"allowed_groups": ["developers"]}),
])
async def test_an_unverified_email_or_a_user_outside_allowed_groups_gets_no_session(
        make_gateway: Callable[..., Any], keycloak: Any, username: str, code: str, extra: dict[str, Any]) -> None:
    gateway = await make_gateway(oidc_providers=[keycloak.provider_config("org-a", **extra)])
    browser = new_browser(gateway, keycloak)
    try:
        landed = await browser.sign_in("org-a", username)
        assert landed.status == 401
        assert (await landed.json())["error"]["code"] == code
        assert browser.cookie("gw_session") is None
    finally:
        await browser.close()


async def test_password_login_can_be_turned_off_while_sso_works(make_gateway: Callable[..., Any], keycloak: Any) -> None:
    gateway = await make_gateway(oidc_providers=[keycloak.provider_config("org-a")], GATEWAY_PASSWORD_LOGIN="false")
    for path in ("/api/v1/auth/register", "/api/v1/auth/login"):
        answer = await gateway.post(path, json={"email": "x@example.test", "password": PASSWORD})
        assert answer.status == 403 and (await answer.json())["error"]["code"] == "password_login_disabled"
    browser = new_browser(gateway, keycloak)
    try:
        assert (await browser.sign_in("org-a", "bob")).status == 302
    finally:
        await browser.close()


async def test_a_bearer_id_token_works_on_the_api_and_the_proxy_and_is_audited_with_its_provider(
        make_gateway: Callable[..., Any], keycloak: Any, database_url: str) -> None:
    gateway = await make_gateway(oidc_providers=both(keycloak))
    bearer = {"Authorization": "Bearer " + keycloak.password_grant("org-b", "erin")["id_token"]}
    status, body = await me(gateway, bearer)
    assert status == 200 and body["provider"] == "org-b" and body["is_admin"] is True
    created = await gateway.post("/api/v1/workspaces/init", json={}, headers=bearer)
    assert created.status == 201, await created.text()
    workspace = await created.json()
    listed = await gateway.get(f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps",
                               headers=bearer)
    assert listed.status == 200
    # Warm: verified once, the provider is not asked again.
    fetches = gateway.server.app[keys.OIDC].clients["org-b"].jwks_fetches
    for _ in range(5):
        assert (await me(gateway, bearer))[0] == 200
    assert gateway.server.app[keys.OIDC].clients["org-b"].jwks_fetches == fetches
    root = await admin_session(gateway, database_url)
    rows = await (await root.call("GET", f"/api/v1/audit?user_id={body['id']}")).json()
    assert {row["action"] for row in rows} >= {"InitWorkspace"}
    assert all(row["details"].get("provider") == "org-b" for row in rows)
    # Logout ends it like a session, for the proxy too, on this replica and any other.
    assert (await gateway.post("/api/v1/auth/logout", headers=bearer)).status == 204
    assert (await me(gateway, bearer))[0] == 401
    refused = await gateway.get(f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps",
                                headers=bearer)
    assert refused.status == 401
    other = await make_gateway(oidc_providers=both(keycloak))
    assert (await me(other, bearer))[0] == 401
    # Respelled, it is the same signed token, and stays logged out: padding
    # the signature (which the JWT library accepts) makes no new session.
    padded = {"Authorization": bearer["Authorization"] + "=="}
    assert (await me(other, padded))[0] == 401


async def test_a_ci_identitys_id_token_from_its_own_client_drives_real_kubectl_through_the_proxy(
        make_gateway: Callable[..., Any], keycloak: Any, cluster: LocalCluster, tmp_path: Any) -> None:
    """Given an automation client of the organisation (its own client id, an
    audience mapper adding the gateway's audience), when CI signs in through it,
    then its ID token (aud [ci-robot, tenant-gateway], azp ci-robot) is a bearer
    credential for the API and for real kubectl through /k8s/; a provider whose
    `authorized_parties` leaves that client out refuses it."""
    gateway = await make_gateway(oidc_providers=both(keycloak))
    id_token = keycloak.password_grant("org-a", "bob", AUTOMATION_CLIENT_ID)["id_token"]
    bearer = {"Authorization": f"Bearer {id_token}"}
    status, body = await me(gateway, bearer)
    assert status == 200 and body["provider"] == "org-a", body
    created = await gateway.post("/api/v1/workspaces/init", json={}, headers=bearer)
    assert created.status == 201, await created.text()
    workspace = await created.json()
    kubectl = [str(cluster.kubectl), f"--server={str(gateway.make_url('')).rstrip('/')}/k8s/{workspace['id']}",
               f"--certificate-authority={gateway.ca_file}", f"--token={id_token}", "-n", workspace["namespace"]]
    env = {"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}

    async def run(*argv: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(*kubectl, *argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.PIPE)
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    code, _, err = await run("create", "configmap", "from-ci", "--from-literal=built=yes")
    assert code == 0, err
    code, out, err = await run("get", "configmap", "from-ci", "-o", "json")
    assert code == 0 and json.loads(out)["data"] == {"built": "yes"}, err

    only_others = await make_gateway(oidc_providers=[keycloak.provider_config(
        "org-a", authorized_parties=["deploy-bot"])])
    status, body = await me(only_others, bearer)
    assert status == 401 and body["error"]["code"] == "id_token_audience"
    listed = await make_gateway(oidc_providers=[keycloak.provider_config(
        "org-a", authorized_parties=[AUTOMATION_CLIENT_ID])])
    assert (await me(listed, bearer))[0] == 200


async def test_cross_realm_replay_is_refused(make_gateway: Callable[..., Any], keycloak: Any) -> None:
    """Given org-a's ID token, when it is presented where only org-b is trusted,
    or with the audience of another client of org-a, then 401 and no user."""
    only_b = await make_gateway(oidc_providers=[keycloak.provider_config("org-b")])
    token_a = keycloak.password_grant("org-a", "alice")["id_token"]
    status, body = await me(only_b, {"Authorization": f"Bearer {token_a}"})
    assert status == 401 and set(body) == {"error"}
    trusting_both = await make_gateway(oidc_providers=both(keycloak))
    other_audience = keycloak.password_grant("org-a", "bob", OTHER_CLIENT_ID)["id_token"]
    status, body = await me(trusting_both, {"Authorization": f"Bearer {other_audience}"})
    assert status == 401 and body["error"]["code"] == "id_token_audience"
    # A code from org-a's sign-in brought to org-b's callback: org-b's state
    # does not know it, and org-b's token endpoint would not either.
    browser = new_browser(trusting_both, keycloak)
    try:
        callback_a = await browser.sign_in_at_provider(await browser.start("org-a"), "alice")
        landed = await browser.callback(callback_a.replace("/oidc/org-a/", "/oidc/org-b/"))
        assert landed.status == 401 and browser.cookie("gw_session") is None
    finally:
        await browser.close()


async def test_an_admin_group_name_is_only_as_good_as_its_issuer(make_gateway: Callable[..., Any], keycloak: Any) -> None:
    """org-b's admins are not admins of a gateway that trusts org-a's admin group only."""
    gateway = await make_gateway(oidc_providers=[keycloak.provider_config("org-a"),
                                                 keycloak.provider_config("org-b", admin_groups=[])])
    status, body = await me(gateway, {"Authorization": "Bearer " + keycloak.password_grant("org-b", "erin")["id_token"]})
    assert status == 200 and body["is_admin"] is False
    assert ADMIN_GROUP in keycloak.provider_config("org-a")["admin_groups"]
    assert uuid.UUID(body["id"])
