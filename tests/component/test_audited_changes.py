"""A user's suspension or resume, a device approval, a sign-in (password
or device) and a logout are one transaction with their audit row, against
PostgreSQL: both land, or neither.

The audit write is made to fail for real: PostgreSQL's jsonb refuses the
escape \\u0000, so an event whose details hold a NUL character is one the
database will not store (as in tests/integration/test_database.py; the pool
reports it as BadRequest `invalid_text`). Given
such an event, when the change is attempted, then it raises and nothing of
it is left; given a good one, both the change and its row are there.

Routes write events of their own making, so there the test's database is
made to refuse their rows instead: a trigger raises the error of a full
disk (53100) for the chosen rows, which the gateway answers 503. Given
that, the route answers 503 and nothing of its effect is left; once rows
are stored again, the same request succeeds, and once.
"""

from __future__ import annotations

import contextlib
import datetime
import uuid
from typing import Any, AsyncIterator

import asyncpg
import jwt
import pytest

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import BadRequest
from provisioning.models import AuditEvent
from proxy.auth import oidc_flow
from tests.support.gatewayclient import PASSWORD, admin_session, error_of, login, register_and_login

UNSTORABLE = {"note": "\x00"}


async def new_user(db: Database) -> Any:
    user = await repo.create_user(db, f"{uuid.uuid4().hex}@example.test", "not-a-real-hash")
    session_id = uuid.uuid4()
    await repo.create_session(db, session_id, user.id,
                              datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1),
                              AuditEvent("Login", user.id, None, None, {"result": "success"}))
    return user, session_id


async def test_a_suspension_whose_audit_row_fails_does_not_happen(db: Database) -> None:
    (user, session_id), (admin, _) = await new_user(db), await new_user(db)
    with pytest.raises(BadRequest):
        await repo.set_user_status(db, user.id, "suspended", AuditEvent("SuspendUser", admin.id, None, None,
                                                                          UNSTORABLE))
    assert (await repo.get_user(db, user.id)).status == "active"
    assert await repo.active_session_user(db, session_id) is not None
    assert await repo.query_audit(db, user_id=admin.id, action="SuspendUser") == []

    event = AuditEvent("SuspendUser", admin.id, None, None, {"target_user": str(user.id)})
    suspended = await repo.set_user_status(db, user.id, "suspended", event)
    assert suspended is not None and suspended.status == "suspended"
    assert await repo.active_session_user(db, session_id) is None
    assert [row["action"] for row in await repo.query_audit(db, user_id=admin.id, action="SuspendUser")] == \
        ["SuspendUser"]


async def test_no_such_user_writes_no_audit_row(db: Database) -> None:
    admin, _ = await new_user(db)
    assert await repo.set_user_status(db, uuid.uuid4(), "suspended",
                                      AuditEvent("SuspendUser", admin.id, None, None, {})) is None
    assert await repo.query_audit(db, user_id=admin.id, action="SuspendUser") == []


async def test_an_approval_whose_audit_row_fails_does_not_happen(db: Database) -> None:
    approver, _ = await new_user(db)
    device_hash, code_hash = uuid.uuid4().bytes, oidc_flow.digest("BCDF-GHJK")
    assert await repo.create_device_code(db, device_hash, code_hash, 600)
    with pytest.raises(BadRequest):
        await repo.approve_device_code(db, code_hash, approver.id,
                                       AuditEvent("ApproveDevice", approver.id, None, None, UNSTORABLE))
    assert await repo.consume_device_code(db, device_hash) == ("pending", None)
    assert await repo.query_audit(db, user_id=approver.id, action="ApproveDevice") == []

    assert await repo.approve_device_code(db, code_hash, approver.id,
                                          AuditEvent("ApproveDevice", approver.id, None, None, {}))
    assert [row["action"] for row in await repo.query_audit(db, user_id=approver.id, action="ApproveDevice")] == ["ApproveDevice"]
    # Used: a second approval is refused, and writes no second row.
    assert not await repo.approve_device_code(db, code_hash, approver.id,
                                              AuditEvent("ApproveDevice", approver.id, None, None, {}))
    assert len(await repo.query_audit(db, user_id=approver.id, action="ApproveDevice")) == 1
    assert await repo.consume_device_code(db, device_hash) == ("approved", approver.id)


async def test_the_routes_leave_both_the_change_and_its_row(gateway: Any, database_url: str) -> None:
    user = await register_and_login(gateway)
    root = await admin_session(gateway, database_url)
    started = await (await gateway.post("/api/v1/auth/device", json={})).json()
    approved = await user.call("POST", "/api/v1/auth/device/approve", json={"user_code": started["user_code"]})
    assert approved.status == 204
    assert (await root.call("POST", f"/api/v1/users/{user.user_id}/suspend")).status == 200
    rows = await (await root.call("GET", f"/api/v1/audit?user_id={user.user_id}&action=ApproveDevice")).json()
    assert len(rows) == 1
    rows = await (await root.call("GET", f"/api/v1/audit?user_id={root.user_id}&action=SuspendUser")).json()
    assert [row["details"]["target_user"] for row in rows] == [user.user_id]
    assert (await user.call("GET", "/api/v1/me")).status == 401


@contextlib.asynccontextmanager
async def audit_rows_refused(database_url: str, condition: str) -> AsyncIterator[None]:
    """Within: PostgreSQL refuses audit rows for which `condition` (on NEW)
    holds, as a full disk would."""
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute("""
            CREATE FUNCTION test_refuse_audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'no space left for this row' USING ERRCODE = '53100'; END $$""")
        await connection.execute(f"""
            CREATE TRIGGER test_refuse_audit_row BEFORE INSERT ON audit_logs FOR EACH ROW
            WHEN ({condition}) EXECUTE FUNCTION test_refuse_audit_row()""")
        yield
    finally:
        await connection.execute("DROP TRIGGER IF EXISTS test_refuse_audit_row ON audit_logs")
        await connection.execute("DROP FUNCTION IF EXISTS test_refuse_audit_row()")
        await connection.close()


async def count(db: Database, query: str, *args: Any) -> int:
    row = await db.fetchrow(f"SELECT count(*) AS n FROM {query}", *args)
    assert row is not None
    return int(row["n"])


async def test_a_login_whose_audit_row_fails_leaves_no_session(gateway: Any, database_url: str,
                                                                db: Database) -> None:
    user = await register_and_login(gateway)
    user_id = uuid.UUID(user.user_id)
    async with audit_rows_refused(database_url, "NEW.action = 'Login' AND NEW.details->>'result' = 'success'"):
        refused = await gateway.post("/api/v1/auth/login", json={"email": user.email, "password": PASSWORD})
        assert await error_of(refused) == (503, "database_unavailable")
    assert await count(db, "sessions WHERE user_id = $1", user_id) == 1  # the first login's only

    await login(gateway, user.email)
    assert await count(db, "sessions WHERE user_id = $1", user_id) == 2
    assert len(await repo.query_audit(db, user_id=user_id, action="Login")) == 2


async def test_a_device_sign_in_whose_audit_row_fails_can_be_polled_again(gateway: Any, database_url: str,
                                                                           db: Database) -> None:
    user = await register_and_login(gateway)
    user_id = uuid.UUID(user.user_id)
    started = await (await gateway.post("/api/v1/auth/device", json={})).json()
    approved = await user.call("POST", "/api/v1/auth/device/approve", json={"user_code": started["user_code"]})
    assert approved.status == 204
    poll = {"device_code": started["device_code"]}
    async with audit_rows_refused(database_url, "NEW.details->>'method' = 'device'"):
        assert await error_of(await gateway.post("/api/v1/auth/device/token", json=poll)) == \
            (503, "database_unavailable")
    assert await count(db, "sessions WHERE user_id = $1", user_id) == 1  # no session nobody got

    answer = await gateway.post("/api/v1/auth/device/token", json=poll)
    assert answer.status == 200, await answer.text()
    token = (await answer.json())["token"]
    assert jwt.decode(token, options={"verify_signature": False})["sub"] == user.user_id
    assert await count(db, "sessions WHERE user_id = $1", user_id) == 2
    device_logins = [row for row in await repo.query_audit(db, user_id=user_id, action="Login")
                     if row["details"].get("method") == "device"]
    assert len(device_logins) == 1
    assert await error_of(await gateway.post("/api/v1/auth/device/token", json=poll)) == (400, "invalid_grant")


async def test_a_logout_whose_audit_row_fails_has_not_happened(gateway: Any, database_url: str,
                                                                db: Database) -> None:
    user = await register_and_login(gateway)
    async with audit_rows_refused(database_url, "NEW.action = 'Logout'"):
        assert await error_of(await user.call("POST", "/api/v1/auth/logout")) == (503, "database_unavailable")
        assert (await user.call("GET", "/api/v1/me")).status == 200  # still signed in: it can be repeated

    assert (await user.call("POST", "/api/v1/auth/logout")).status == 204
    assert await error_of(await user.call("GET", "/api/v1/me")) == (401, "session_ended")
    assert len(await repo.query_audit(db, user_id=uuid.UUID(user.user_id), action="Logout")) == 1
