"""Single sign-on: the provider list, and the browser's login and callback.

Every failure of the callback is a 401 with the contract's error shape and
no session; it is audited as a failed `Login` naming the provider and the
check that failed, never the code, state or token. Callbacks are
rate-limited per address (GATEWAY_RATE_LOGIN, like the starts) before any of
that: 429 with `Retry-After`, and no audit row.
"""

from __future__ import annotations

import hmac

from aiohttp import web

from provisioning.db import repositories as repo
from provisioning.errors import GatewayError, Unauthenticated
from provisioning.models import AuditEvent
from proxy import keys
from proxy.auth import oidc_flow, signin
from proxy.auth.oidc_registry import admit
from proxy.auth.oidc_tokens import InvalidIdToken
from proxy.routes import ratelimit
from proxy.routes.common import client_ip, public_origin, rate_address

routes = web.RouteTableDef()
_PREFIX = "/api/v1/auth/oidc"


def login_path(name: str) -> str:
    return f"{_PREFIX}/{name}/login"


@routes.get("/api/v1/auth/providers")
async def providers(request: web.Request) -> web.Response:
    return web.json_response([
        {"name": p.name, "display_name": p.label, "login_url": login_path(p.name)}
        for p in request.app[keys.SETTINGS].oidc_providers
    ])


def _redirect_uri(request: web.Request, name: str) -> str:
    base = request.app[keys.SETTINGS].gateway_url or public_origin(request)
    return f"{base}{_PREFIX}/{name}/callback"


@routes.get(_PREFIX + "/{name}/login")
async def login(request: web.Request) -> web.Response:
    app = request.app
    client = app[keys.OIDC].client(request.match_info["name"])
    await ratelimit.enforce(app[keys.DATABASE], app[keys.METRICS], app[keys.SETTINGS].rate_login,
                            {"oidc-login": rate_address(request)})
    discovery = await client.discovery()
    start = oidc_flow.new_login()
    redirect_uri = _redirect_uri(request, client.provider.name)
    await repo.start_oidc_login(
        app[keys.DATABASE], state_hash=oidc_flow.digest(start.state), provider=client.provider.name,
        nonce=start.nonce, code_verifier=start.code_verifier, redirect_uri=redirect_uri,
        next_path=oidc_flow.safe_next(request.query.get("next")), browser_hash=oidc_flow.digest(start.browser),
        ttl_seconds=oidc_flow.LOGIN_TTL_SECONDS)
    response = web.Response(status=302, headers={
        "Location": oidc_flow.authorization_url(discovery.authorization_endpoint, client.provider, start, redirect_uri),
        "Cache-Control": "no-store"})
    # Lax, not Strict: the provider sends the browser back with a cross-site navigation.
    response.set_cookie(oidc_flow.BROWSER_COOKIE, start.browser, max_age=oidc_flow.LOGIN_TTL_SECONDS,
                        path=_PREFIX + "/", secure=True, httponly=True, samesite="Lax")
    return response


def _parameter(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if not value or len(value) > oidc_flow.MAX_PARAMETER_LENGTH:
        raise Unauthenticated(f"the sign-in answer has no valid {name}", code="invalid_state" if name == "state"
                              else "invalid_callback")
    return value


@routes.get(_PREFIX + "/{name}/callback")
async def callback(request: web.Request) -> web.Response:
    app, ip = request.app, client_ip(request)
    db, settings = app[keys.DATABASE], app[keys.SETTINGS]
    client = app[keys.OIDC].client(request.match_info["name"])
    provider = client.provider
    # Before anything is written: every failure below leaves an audit row,
    # and audit_logs is append-only, so an unlimited stream of forged
    # callbacks would grow it for ever. One address gets as many callbacks
    # as sign-in starts.
    await ratelimit.enforce(db, app[keys.METRICS], settings.rate_login, {"oidc-callback": rate_address(request)})
    try:
        if "error" in request.query:
            raise Unauthenticated("the identity provider did not sign you in", code="provider_refused")
        state, code = _parameter(request, "state"), _parameter(request, "code")
        record = await repo.consume_oidc_login(db, oidc_flow.digest(state), provider.name)
        browser = request.cookies.get(oidc_flow.BROWSER_COOKIE, "")
        if record is None or not hmac.compare_digest(oidc_flow.digest(browser), bytes(record["browser_hash"])):
            raise Unauthenticated("this sign-in is unknown, used, expired or from another browser; start again",
                                  code="invalid_state")
        id_token = await client.exchange_code(code, record["code_verifier"], record["redirect_uri"])
        # The token endpoint answered this client: its ID token is issued to this client alone.
        identity = await client.verify(id_token, audiences=(provider.client_id,),
                                       authorized_parties=(provider.client_id,), nonce=record["nonce"])
        user = await admit(db, provider, identity, app[keys.OIDC].on_admitted)
        # With its audit row, and only if the user is still active (a
        # suspension may have come since `admit` read the row).
        signed_in = await signin.open_session(db, settings, user.id, AuditEvent(
            "Login", user.id, None, ip, {"result": "success", "method": "oidc"}))
        if signed_in is None:
            raise InvalidIdToken("this account is suspended", code="user_suspended")
    except GatewayError as error:
        if error.status == 401:
            await repo.record_audit(db, AuditEvent("Login", None, None, ip, {
                "result": "failure", "provider": provider.name, "reason": error.code}))
        raise
    _, opened = signed_in
    response = web.Response(status=302, headers={"Location": record["next_path"], "Cache-Control": "no-store"})
    signin.set_session_cookies(response, opened)
    response.del_cookie(oidc_flow.BROWSER_COOKIE, path=_PREFIX + "/", secure=True, samesite="Lax")
    return response
