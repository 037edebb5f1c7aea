"""Device sign-in for the command line (`tenant-gateway login`), RFC 8628 in shape.

The command line asks for a code pair, shows the user code and a link, and
polls with the device code; a signed-in browser (password or SSO) approves
the user code; the next poll gets a gateway session of the approving user,
revocable like any other. Both codes are stored hashed or short-lived, work
once and expire; the user code is drawn from 20 consonants (8 of them: ~35
bits) and approval attempts are rate-limited per user, so guessing one is
out of reach within its ten minutes.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote

from aiohttp import web

from provisioning.db import repositories as repo
from provisioning.errors import BadRequest, GatewayError
from provisioning.models import AuditEvent
from proxy import keys
from proxy.auth import oidc_flow, signin
from proxy.routes import ratelimit
from proxy.routes.common import client_ip, principal, public_origin, rate_address, read_json
from proxy.routes.sso import login_path

routes = web.RouteTableDef()
EXPIRES_IN = 600
INTERVAL = 5
_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
_MAX_CODE = 128


class DeviceError(GatewayError):
    """RFC 8628's error codes, with the contract's error shape."""

    status = 400


def _user_code() -> str:
    raw = "".join(secrets.choice(_ALPHABET) for _ in range(8))
    return f"{raw[:4]}-{raw[4:]}"


def normalise_user_code(value: object) -> str:
    if not isinstance(value, str) or len(value) > 32:
        raise BadRequest("user_code must be a code like ABCD-EFGH", code="invalid_user_code")
    letters = "".join(ch for ch in value.upper() if ch.isalnum())
    return f"{letters[:4]}-{letters[4:]}"


@routes.post("/api/v1/auth/device")
async def start(request: web.Request) -> web.Response:
    app = request.app
    db, settings = app[keys.DATABASE], app[keys.SETTINGS]
    body = await read_json(request, allow_empty=True)
    provider = body.get("provider")
    if provider is not None and (not isinstance(provider, str) or provider not in app[keys.OIDC].clients):
        raise BadRequest("no such identity provider", code="unknown_provider")
    await ratelimit.enforce(db, app[keys.METRICS], settings.rate_login,
                            {"device": rate_address(request)})
    device_code = secrets.token_urlsafe(32)
    for _ in range(5):
        user_code = _user_code()
        if await repo.create_device_code(db, oidc_flow.digest(device_code), user_code, EXPIRES_IN):
            break
    else:  # five collisions among live codes: not chance, refuse rather than loop
        raise DeviceError("could not allocate a user code; retry", code="temporarily_unavailable")
    base = settings.gateway_url or public_origin(request)
    page = f"/device?user_code={quote(user_code)}"
    complete = base + (f"{login_path(provider)}?next={quote(page, safe='')}" if provider else page)
    return web.json_response({
        "device_code": device_code, "user_code": user_code, "verification_uri": f"{base}/device",
        "verification_uri_complete": complete, "interval": INTERVAL, "expires_in": EXPIRES_IN,
    }, headers={"Cache-Control": "no-store"})


@routes.post("/api/v1/auth/device/approve")
async def approve(request: web.Request) -> web.Response:
    who = await principal(request)
    app = request.app
    db = app[keys.DATABASE]
    body = await read_json(request)
    user_code = normalise_user_code(body.get("user_code"))
    await ratelimit.enforce(db, app[keys.METRICS], app[keys.SETTINGS].rate_login,
                            {"device-approve": str(who.user.id)})
    # The approval and its audit row in one statement: no device session
    # comes of an approval the audit log does not show.
    if not await repo.approve_device_code(db, user_code, who.user.id,
                                          AuditEvent("ApproveDevice", who.user.id, None, client_ip(request), {})):
        raise BadRequest("that code is unknown, used or expired; run `tenant-gateway login` again",
                         code="invalid_user_code")
    return web.Response(status=204)


@routes.post("/api/v1/auth/device/token")
async def token(request: web.Request) -> web.Response:
    app = request.app
    db, settings = app[keys.DATABASE], app[keys.SETTINGS]
    body = await read_json(request)
    device_code = body.get("device_code")
    if not isinstance(device_code, str) or not device_code or len(device_code) > _MAX_CODE:
        raise DeviceError("device_code is required", code="invalid_request")
    # The code used up, the session and its audit row: one transaction, so
    # a failure part-way leaves the code to the next poll, not spent on a
    # session nobody got. The approving user must still be active.
    planned = signin.plan_session(settings)
    outcome, user = await repo.redeem_device_code(
        db, oidc_flow.digest(device_code), planned.id, planned.expires_at,
        AuditEvent("Login", None, None, client_ip(request), {"result": "success", "method": "device"}))
    if outcome == "pending":
        raise DeviceError("not approved yet; keep polling", code="authorization_pending")
    if outcome == "expired":
        raise DeviceError("the code expired; run `tenant-gateway login` again", code="expired_token")
    if user is None:
        raise DeviceError("unknown or used device code", code="invalid_grant")
    opened = signin.issue(settings, user.id, planned)
    return web.json_response({"token": opened.token, "expires_at": opened.expires_at.isoformat()},
                             headers={"Cache-Control": "no-store"})
