"""Device sign-in for the command line (`tenant-gateway login`), RFC 8628 in shape.

The command line asks for a code pair, naming itself, shows the user code
and a link, and polls with the device code; a signed-in browser (password or
SSO) types the user code, is shown what asked for it (the name the client
gave itself, the address it came from, when) and approves; the next poll
gets a session of the approving user that can only mint credentials for
that user's own workspaces (proxy.auth.scopes), revocable like any other.

Made so that it cannot be phished (RFC 8628 section 5.4): anyone can start
a flow and send its link and code to someone signed in here, and the link
leads to the real console. So the link carries no code
(`verification_uri_complete` is not offered, and the page fills in no code
from its address: opening a link approves nothing and fills in nothing);
the person must type the code, and before approving sees that the request
came from an address and a time that are not theirs; and what a phished
approval hands over is bounded: no administrator's rights, no proxy, no
writes but credentials, whoever approved.

Both codes are stored hashed, work once and expire; the user code is drawn
from 20 consonants (8 of them: ~35 bits) and looked up by its digest, so
the look-up's timing says nothing about how much of a guess was right.
Each look-up or approval counts against a small limit per session and the
login limit per user, so guessing one is out of reach within its ten minutes.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote

from aiohttp import web

from provisioning.db import repositories as repo
from provisioning.errors import BadRequest, GatewayError
from provisioning.models import AuditEvent, DeviceRequest
from proxy import keys
from proxy.auth import oidc_flow, scopes, signin
from proxy.auth.authenticating import Principal
from proxy.routes import ratelimit
from proxy.routes.common import client_ip, principal, public_origin, rate_address, read_json
from proxy.routes.sso import login_path
from proxy.settings import RateLimit

routes = web.RouteTableDef()
EXPIRES_IN = 600
INTERVAL = 5
_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
_MAX_CODE = 128
MAX_CLIENT_NAME = 100
ATTEMPTS_PER_SESSION = RateLimit(limit=10, window_seconds=EXPIRES_IN)
"""Codes one browser session may look up or approve per ten minutes: a
person approving a command line needs two (look, approve)."""
_UNKNOWN_CODE = "that code is unknown, used or expired; run `tenant-gateway login` again"


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


def client_name_of(value: object) -> str | None:
    """The name a client gives itself, to be shown as its own claim: at most
    MAX_CLIENT_NAME printable characters (no control, format or bidi
    characters, which could make the page show something else). Pure."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_CLIENT_NAME or not value.isprintable():
        raise BadRequest(f"client_name must be at most {MAX_CLIENT_NAME} printable characters",
                         code="invalid_client_name")
    return value.strip() or None


def verification_uri(base: str, provider: str | None) -> str:
    """Where the person goes to type the code: the console's device page,
    through the provider's sign-in if one was named. Never with the code in
    it (the module's docstring says why). Pure."""
    return base + (f"{login_path(provider)}?next={quote('/device', safe='')}" if provider else "/device")


@routes.post("/api/v1/auth/device")
async def start(request: web.Request) -> web.Response:
    app = request.app
    db, settings = app[keys.DATABASE], app[keys.SETTINGS]
    body = await read_json(request, allow_empty=True)
    provider = body.get("provider")
    if provider is not None and (not isinstance(provider, str) or provider not in app[keys.OIDC].clients):
        raise BadRequest("no such identity provider", code="unknown_provider")
    client_name = client_name_of(body.get("client_name"))
    await ratelimit.enforce(db, app[keys.METRICS], settings.rate_login,
                            {"device": rate_address(request)})
    device_code = secrets.token_urlsafe(32)
    for _ in range(5):
        user_code = _user_code()
        if await repo.create_device_code(db, oidc_flow.digest(device_code), oidc_flow.digest(user_code), EXPIRES_IN,
                                         client_name=client_name, client_address=client_ip(request)):
            break
    else:  # five collisions among live codes: not chance, refuse rather than loop
        raise DeviceError("could not allocate a user code; retry", code="temporarily_unavailable")
    base = settings.gateway_url or public_origin(request)
    return web.json_response({
        "device_code": device_code, "user_code": user_code, "verification_uri": verification_uri(base, provider),
        "interval": INTERVAL, "expires_in": EXPIRES_IN,
    }, headers={"Cache-Control": "no-store"})


async def _typed_request(request: web.Request, who: Principal) -> tuple[bytes, DeviceRequest]:
    """The typed code's digest and what asked for it, counting the attempt
    (per session, and per user on the login limit) before the look-up, so a
    guess past the limit learns nothing. 400 when no pending code matches."""
    app = request.app
    db = app[keys.DATABASE]
    body = await read_json(request)
    user_code = normalise_user_code(body.get("user_code"))
    await ratelimit.enforce(db, app[keys.METRICS], ATTEMPTS_PER_SESSION,
                            {"device-code-session": str(who.session_id)})
    await ratelimit.enforce(db, app[keys.METRICS], app[keys.SETTINGS].rate_login,
                            {"device-approve": str(who.user.id)})
    code_hash = oidc_flow.digest(user_code)
    pending = await repo.pending_device_request(db, code_hash)
    if pending is None:
        raise BadRequest(_UNKNOWN_CODE, code="invalid_user_code")
    return code_hash, pending


@routes.post("/api/v1/auth/device/lookup")
async def lookup(request: web.Request) -> web.Response:
    """What asked for the typed code, for the person to judge before approving."""
    who = await principal(request)
    _, pending = await _typed_request(request, who)
    return web.json_response(pending.public(), headers={"Cache-Control": "no-store"})


@routes.post("/api/v1/auth/device/approve")
async def approve(request: web.Request) -> web.Response:
    who = await principal(request)
    code_hash, pending = await _typed_request(request, who)
    # The approval and its audit row in one statement: no device session
    # comes of an approval the audit log does not show, and the row says
    # what was approved.
    event = AuditEvent("ApproveDevice", who.user.id, None, client_ip(request), {
        "client_name": pending.client_name, "client_address": pending.client_address, "scope": scopes.CREDENTIALS})
    if not await repo.approve_device_code(request.app[keys.DATABASE], code_hash, who.user.id, event):
        raise BadRequest(_UNKNOWN_CODE, code="invalid_user_code")
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
        AuditEvent("Login", None, None, client_ip(request),
                   {"result": "success", "method": "device", "scope": scopes.CREDENTIALS}))
    if outcome == "pending":
        raise DeviceError("not approved yet; keep polling", code="authorization_pending")
    if outcome == "expired":
        raise DeviceError("the code expired; run `tenant-gateway login` again", code="expired_token")
    if user is None:
        raise DeviceError("unknown or used device code", code="invalid_grant")
    opened = signin.issue(settings, user.id, planned, scopes.CREDENTIALS)
    return web.json_response({"token": opened.token, "expires_at": opened.expires_at.isoformat()},
                             headers={"Cache-Control": "no-store"})
