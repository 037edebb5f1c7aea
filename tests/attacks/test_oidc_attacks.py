"""Hostile sign-ins against the real Keycloak: each is a 4xx with the JSON
error shape, opens no session, and leaves nothing secret in a log line.

Where Keycloak cannot be made to produce the hostile input (a token signed
with `alg: none`, with HMAC over its public key, with a key id it never
published), the test forges it and says so: these are fakes of an attacker,
not of the provider. Expired, future-dated, wrong-nonce and oversized tokens
signed by a fake provider's key are in tests/unit/test_oidc.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
import uuid
import urllib.request
from typing import Any, Callable

import asyncpg
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from devstack.keycloak import AUTOMATION_CLIENT_ID
from proxy import keys
from tests.support.signin_browser import Browser, callback_parameters, new_browser

pytestmark = [pytest.mark.cluster, pytest.mark.keycloak]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


async def refused(answer: Any, status: int = 401, code: str | None = None) -> None:
    assert answer.status == status, await answer.text()
    body = await answer.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    if code is not None:
        assert body["error"]["code"] == code
    assert not any(c.startswith("gw_session=") and not c.startswith('gw_session=""')
                   for c in answer.headers.getall("Set-Cookie", []))


async def tamper(database_url: str, statement: str) -> None:
    """A fault injected in the gateway's database, for what cannot happen on cue (time passing, a lost nonce)."""
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


async def browser_for(make_gateway: Callable[..., Any], keycloak: Any, **extra: Any) -> tuple[Any, Browser]:
    gateway = await make_gateway(oidc_providers=[keycloak.provider_config("org-a", **extra)])
    return gateway, new_browser(gateway, keycloak)


async def test_forged_replayed_foreign_and_expired_states_are_refused(
        make_gateway: Callable[..., Any], keycloak: Any, database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    gateway, browser = await browser_for(make_gateway, keycloak)
    stranger = new_browser(gateway, keycloak)
    try:
        forged = await browser.callback(f"{browser.gateway}/api/v1/auth/oidc/org-a/callback?state=forged&code=x")
        await refused(forged, code="invalid_state")

        callback = await browser.sign_in_at_provider(await browser.start("org-a"), "bob")
        # Another browser brings the victim's callback URL: bound to the victim's cookie, refused (and spent).
        await refused(await stranger.callback(callback), code="invalid_state")
        await refused(await browser.callback(callback), code="invalid_state")

        callback = await browser.sign_in_at_provider(await browser.start("org-a"), "bob")
        assert (await browser.callback(callback)).status == 302
        await refused(await browser.callback(callback), code="invalid_state")  # replayed

        # Expired: ten minutes cannot pass in a test, so the sign-in's row is aged (a fault injected in the database).
        callback = await browser.sign_in_at_provider(await browser.start("org-a"), "bob")
        await tamper(database_url, "UPDATE oidc_logins SET expires_at = now() - interval '1 second'")
        await refused(await browser.callback(callback), code="invalid_state")

        await refused(await browser.callback(f"{browser.gateway}/api/v1/auth/oidc/org-a/callback?error=access_denied"),
                      code="provider_refused")
        unknown = await browser.callback(f"{browser.gateway}/api/v1/auth/oidc/nobody/callback?state=x&code=y")
        await refused(unknown, 404)
        secrets = [callback_parameters(callback)["code"], callback_parameters(callback)["state"],
                   keycloak.secret("org-a")]
    finally:
        await browser.close()
        await stranger.close()
    # aiohttp.access is the test server's access log; `serve` runs without one (proxy.app.handler_args).
    logged = "\n".join(record.getMessage() + str(record.__dict__) for record in caplog.records
                       if record.name != "aiohttp.access")
    assert not [secret for secret in secrets if secret in logged]


async def test_a_code_used_twice_is_refused_by_the_provider_and_so_by_the_gateway(
        make_gateway: Callable[..., Any], keycloak: Any) -> None:
    gateway, browser = await browser_for(make_gateway, keycloak)
    try:
        first = await browser.sign_in_at_provider(await browser.start("org-a"), "bob")
        assert (await browser.callback(first)).status == 302
        # A fresh, valid state of this browser, carrying the spent code.
        second = await browser.sign_in_at_provider(await browser.start("org-a"), "bob")
        replay = second.replace(f"code={callback_parameters(second)['code']}", f"code={callback_parameters(first)['code']}")
        browser.session.cookie_jar.clear(lambda cookie: cookie.key == "gw_session")
        await refused(await browser.callback(replay), code="code_exchange_failed")
    finally:
        await browser.close()


async def test_a_wrong_nonce_is_refused(make_gateway: Callable[..., Any], keycloak: Any, database_url: str) -> None:
    """Keycloak echoes the nonce it was sent, so the stored one is changed (a fault injected in the database)."""
    gateway, browser = await browser_for(make_gateway, keycloak)
    try:
        callback = await browser.sign_in_at_provider(await browser.start("org-a"), "bob")
        await tamper(database_url, "UPDATE oidc_logins SET nonce = 'not-the-nonce-sent'")
        await refused(await browser.callback(callback), code="id_token_nonce")
    finally:
        await browser.close()


async def test_next_pointing_off_site_is_ignored(make_gateway: Callable[..., Any], keycloak: Any) -> None:
    gateway, browser = await browser_for(make_gateway, keycloak)
    try:
        for hostile in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
            landed = await browser.sign_in("org-a", "bob", hostile)
            assert landed.status == 302 and landed.headers["Location"] == "/"
    finally:
        await browser.close()


def _realm_jwk(keycloak: Any, realm: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{keycloak.issuer(realm)}/protocol/openid-connect/certs", timeout=30) as answer:
        return next(k for k in json.loads(answer.read())["keys"] if k.get("use") == "sig" and k["kty"] == "RSA")


def _claims(keycloak: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": keycloak.issuer("org-a"), "aud": "tenant-gateway", "sub": str(uuid.uuid4()), "iat": now,
            "exp": now + 300, "email": "mallory@org-a.example", "email_verified": True, "groups": ["gateway-admins"]}


async def test_alg_none_and_hmac_over_the_providers_public_key_are_refused(
        make_gateway: Callable[..., Any], keycloak: Any) -> None:
    """Forged by the test (an attacker's tokens; Keycloak never signs these)."""
    gateway = await make_gateway(oidc_providers=[keycloak.provider_config("org-a")])
    jwk = _realm_jwk(keycloak, "org-a")
    payload = _b64(json.dumps(_claims(keycloak)).encode())
    unsigned = f"{_b64(json.dumps({'alg': 'none', 'kid': jwk['kid']}).encode())}.{payload}."
    await refused(await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {unsigned}"}),
                  code="id_token_algorithm")
    public_pem = jwt.PyJWK(jwk).key.public_bytes(encoding=serialization.Encoding.PEM,
                                                 format=serialization.PublicFormat.SubjectPublicKeyInfo)
    signing_input = f"{_b64(json.dumps({'alg': 'HS256', 'kid': jwk['kid']}).encode())}.{payload}"
    mac = _b64(hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest())
    await refused(await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {signing_input}.{mac}"}),
                  code="id_token_algorithm")


async def test_an_access_token_with_the_gateways_audience_is_not_an_id_token(
        make_gateway: Callable[..., Any], keycloak: Any) -> None:
    """Given Keycloak's own access token, signed with the realm's key, whose
    `aud` is the gateway's (the automation client's audience mapper puts it
    there), when it is presented on the API or the proxy, then 401
    not_an_id_token: an access token says a client may call an API, not who
    signed in. The same sign-in's ID token is accepted."""
    gateway = await make_gateway(oidc_providers=[keycloak.provider_config("org-a")])
    tokens = keycloak.password_grant("org-a", "bob", AUTOMATION_CLIENT_ID)
    claims = jwt.decode(tokens["access_token"], options={"verify_signature": False})
    assert claims["aud"] == "tenant-gateway" and claims["typ"] == "Bearer"  # Keycloak's, as it is
    access = {"Authorization": f"Bearer {tokens['access_token']}"}
    await refused(await gateway.get("/api/v1/me", headers=access), code="not_an_id_token")
    await refused(await gateway.post("/api/v1/workspaces/init", json={}, headers=access), code="not_an_id_token")
    identified = {"Authorization": f"Bearer {tokens['id_token']}"}
    workspace = await (await gateway.post("/api/v1/workspaces/init", json={}, headers=identified)).json()
    proxied = f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps"
    through_proxy = await gateway.get(proxied, headers=access)  # the proxy's refusals are also a Kubernetes Status
    assert through_proxy.status == 401 and (await through_proxy.json())["error"]["code"] == "not_an_id_token"
    assert (await gateway.get(proxied, headers=identified)).status == 200
    # And the gateway's own client's access token (no audience at all) is refused too.
    own = keycloak.password_grant("org-a", "bob")["access_token"]
    await refused(await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {own}"}))


async def test_a_flood_of_unknown_key_ids_costs_the_provider_one_jwks_fetch(
        make_gateway: Callable[..., Any], keycloak: Any) -> None:
    """Forged by the test: tokens signed by the attacker's key under made-up key ids."""
    gateway = await make_gateway(oidc_providers=[keycloak.provider_config("org-a")])
    attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    client = gateway.server.app[keys.OIDC].clients["org-a"]
    for _ in range(40):
        token = jwt.encode(_claims(keycloak), attacker, algorithm="RS256", headers={"kid": uuid.uuid4().hex})
        await refused(await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"}),
                      code="id_token_signature")
    assert client.jwks_fetches == 1
    # The real key still works: rotation-safe, not wedged.
    real = keycloak.password_grant("org-a", "bob")["id_token"]
    assert (await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {real}"})).status == 200


async def test_an_enormous_claim_is_refused(make_gateway: Callable[..., Any], keycloak: Any) -> None:
    """Forged by the test: seven hundred groups (the size checks on a validly signed
    token are in tests/unit/test_oidc.py, signed by a fake provider)."""
    gateway = await make_gateway(oidc_providers=[keycloak.provider_config("org-a")])
    attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    huge = jwt.encode({**_claims(keycloak), "groups": [str(n) for n in range(700)]}, attacker, algorithm="RS256",
                      headers={"kid": "x"})
    assert 5000 < len(huge) < 8000  # under the HTTP server's header limit: the gateway's own checks answer
    await refused(await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {huge}"}))
