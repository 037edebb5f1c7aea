"""Register, login, logout, me."""

from __future__ import annotations

import re
import uuid
from typing import NoReturn

from aiohttp import web

from provisioning import members
from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import BadRequest, Forbidden, NotFound, Unauthenticated
from provisioning.models import AuditEvent
from proxy import keys
from proxy.auth import passwords, sessions, signin
from proxy.http.requests import uuid_from
from proxy.routes import ratelimit
from proxy.routes.common import ID_SEGMENT, admin, bounded_string, client_ip, principal, rate_address, read_json

routes = web.RouteTableDef()

# Deliberately plain: one @, no spaces, a dotted domain. Deliverability is the
# mail system's business; this only stops garbage at the door.
_EMAIL = re.compile(r"^[^@\s\x00-\x1f]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$")
_INVALID_LOGIN = "invalid email or password"
MAX_EMAIL_LENGTH = 254  # RFC 5321's path limit


def valid_email(value: object) -> str:
    if not isinstance(value, str) or len(value) > MAX_EMAIL_LENGTH or not _EMAIL.match(value.strip()):
        raise BadRequest("email must be a valid address", code="invalid_email")
    return value.strip()


@routes.post("/api/v1/auth/register")
async def register(request: web.Request) -> web.Response:
    app, ip = request.app, client_ip(request)
    settings = app[keys.SETTINGS]
    _password_login_on(request)
    if not settings.registration_enabled:
        raise Forbidden("self-registration is turned off; ask an administrator", code="registration_disabled")
    body = await read_json(request)
    email = valid_email(body.get("email"))
    password = passwords.check_policy(body.get("password"), email)
    await ratelimit.enforce(app[keys.DATABASE], app[keys.METRICS], settings.rate_register,
                            {"register": rate_address(request)})
    password_hash = await passwords.hash_password(password)
    # One transaction: an account whose audit row failed would answer 503 and
    # then 409 on retry, a half-success.
    async with app[keys.DATABASE].transaction() as connection:
        user = await repo.create_user(connection, email, password_hash)
        await repo.record_audit(connection, AuditEvent("Register", user.id, None, ip, {"email": user.email}))
    return web.json_response({"id": str(user.id), "email": user.email}, status=201)


def _password_login_on(request: web.Request) -> None:
    if not request.app[keys.SETTINGS].password_login:
        raise Forbidden("password sign-in is turned off; sign in with your organisation's identity provider",
                        code="password_login_disabled")


@routes.post("/api/v1/auth/login")
async def login(request: web.Request) -> web.Response:
    app, ip = request.app, client_ip(request)
    settings, db = app[keys.SETTINGS], app[keys.DATABASE]
    _password_login_on(request)
    body = await read_json(request)
    # Bounded before anything is keyed on them: an overlong email would
    # otherwise reach the rate-limit table's index and fail there (a 500).
    email = bounded_string(body.get("email"), "email", MAX_EMAIL_LENGTH, code="invalid_credentials_format")
    password = bounded_string(body.get("password"), "password", passwords.MAX_LENGTH, code="invalid_credentials_format")
    found = await repo.user_with_hash_by_email(db, email.strip())
    # The email's count stops once the address is over its limit: an address
    # cycling through emails neither adds a row per email nor uses up
    # someone else's allowance (proxy.routes.ratelimit).
    await ratelimit.enforce(db, app[keys.METRICS], settings.rate_login, {"login": rate_address(request)},
                            gated={"login-email": login_counter(found[0].id if found else None, email)})
    # Verify even for unknown emails: both failures take the same time.
    ok = await passwords.verify_password(found[1] if found else None, password)
    if not ok or found is None or found[0].status != "active":
        await _refuse_login(db, found[0].id if found else None, ip)
    # The session and its audit row together, and only if the user is still
    # active: a suspension may have come while the password was hashed.
    signed_in = await signin.open_session(db, settings, found[0].id,
                                          AuditEvent("Login", found[0].id, None, ip, {"result": "success"}))
    if signed_in is None:
        await _refuse_login(db, found[0].id, ip)
    user, opened = signed_in
    response = web.json_response({
        "token": opened.token, "expires_at": opened.expires_at.isoformat(), "csrf_token": opened.csrf,
        "user": user.public(),
    }, headers={"Cache-Control": "no-store"})
    signin.set_session_cookies(response, opened)
    return response


def login_counter(account: uuid.UUID | None, email: str) -> str:
    """What a login's per-email limit counts against: the account the email
    found, however it was spelled. The lookup compares with PostgreSQL's
    lower(), and Python's differs for some letters (`İ`): keyed by the
    text, each such spelling of one email would get an allowance of its own
    against the same password. An email that finds no account is counted by
    its text; the prefixes keep a text from passing for an account. One
    limit either way: its name is in the 429, which must not say whether
    the email has an account. Pure."""
    return f"account:{account}" if account is not None else f"email:{email.strip().lower()}"


async def _refuse_login(db: Database, user_id: uuid.UUID | None, ip: str | None) -> NoReturn:
    """One answer for an unknown email, a wrong password and a suspended user."""
    await repo.record_audit(db, AuditEvent("Login", user_id, None, ip, {"result": "failure"}))
    raise Unauthenticated(_INVALID_LOGIN, code="invalid_credentials")


@routes.post("/api/v1/auth/logout")
async def logout(request: web.Request) -> web.Response:
    who = await principal(request)
    # One transaction with its audit row (as register): a logout that
    # answered 503 for want of its row has not happened, and can be repeated.
    async with request.app[keys.DATABASE].transaction() as connection:
        await repo.revoke_session(connection, who.session_id)
        await repo.record_audit(connection, AuditEvent("Logout", who.user.id, None, client_ip(request), {}))
    request.app[keys.EVENTS].committed({"kind": "session_revoked", "id": str(who.session_id)})
    response = web.Response(status=204)
    for cookie in (sessions.SESSION_COOKIE, sessions.CSRF_COOKIE):
        response.del_cookie(cookie, path="/", secure=True, samesite="Strict")
    return response


@routes.get("/api/v1/me")
async def me(request: web.Request) -> web.Response:
    who = await principal(request)
    held = await member_rows.memberships_of(request.app[keys.DATABASE], who.user.id)
    return web.json_response({**who.user.public(),
                              "workspaces": [{**w.public(), "role": m.role} for w, m in held]})


async def _set_user_status(request: web.Request, status: str, action: str) -> web.Response:
    who = await admin(request)
    db = request.app[keys.DATABASE]
    user_id = uuid_from(request.match_info["id"], "user")
    if user_id == who.user.id:
        raise Forbidden("administrators cannot suspend themselves", code="self_suspension")
    # One transaction with its audit row (as register): a suspension that
    # answered 503 for want of its row must not have happened.
    user = await repo.set_user_status(db, user_id, status, AuditEvent(
        action, who.user.id, None, client_ip(request), {"target_user": str(user_id)}))
    if user is None:
        raise NotFound("no such user")
    # Ended here before the answer: the user's next request may beat the NOTIFY.
    request.app[keys.EVENTS].committed({"kind": "user_changed", "id": str(user.id)})
    if status != "active":
        # Their downloaded kubeconfigs too, in every workspace they belong
        # to. The user stays suspended if this fails (503): repeating the
        # call finishes it.
        await members.revoke_user(db, request.app[keys.FLEET], user.id, who.user, client_ip(request))
    return web.json_response({"id": str(user.id), "status": user.status})


@routes.post(f"/api/v1/users/{ID_SEGMENT}/suspend")
async def suspend_user(request: web.Request) -> web.Response:
    """Ends every session of the user at once; their workspace is suspended separately."""
    return await _set_user_status(request, "suspended", "SuspendUser")


@routes.post(f"/api/v1/users/{ID_SEGMENT}/resume")
async def resume_user(request: web.Request) -> web.Response:
    return await _set_user_status(request, "active", "ResumeUser")
