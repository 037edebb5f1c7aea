"""A user's suspension or resume and a device approval are one transaction
with their audit row, against PostgreSQL: both land, or neither.

The audit write is made to fail for real: PostgreSQL's jsonb refuses the
escape \\u0000, so an event whose details hold a NUL character is one the
database will not store (as in tests/integration/test_database.py; the pool
reports it as BadRequest `invalid_text`). Given
such an event, when the change is attempted, then it raises and nothing of
it is left; given a good one, both the change and its row are there.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any, AsyncIterator

import pytest

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import BadRequest
from provisioning.models import AuditEvent
from tests.gatewayclient import admin_session, register_and_login

UNSTORABLE = {"note": "\x00"}


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = await Database.connect(database_url, min_size=1, max_size=2)
    yield database
    await database.close()


async def new_user(db: Database) -> Any:
    user = await repo.create_user(db, f"{uuid.uuid4().hex}@example.test", "not-a-real-hash")
    session_id = uuid.uuid4()
    await repo.create_session(db, session_id, user.id,
                              datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    return user, session_id


async def test_a_suspension_whose_audit_row_fails_does_not_happen(db: Database) -> None:
    (user, session_id), (admin, _) = await new_user(db), await new_user(db)
    with pytest.raises(BadRequest):
        await repo.set_user_status(db, user.id, "suspended", AuditEvent("SuspendUser", admin.id, None, None,
                                                                          UNSTORABLE))
    assert (await repo.get_user(db, user.id)).status == "active"
    assert await repo.active_session_user(db, session_id) is not None
    assert await repo.query_audit(db, user_id=admin.id) == []

    event = AuditEvent("SuspendUser", admin.id, None, None, {"target_user": str(user.id)})
    suspended = await repo.set_user_status(db, user.id, "suspended", event)
    assert suspended is not None and suspended.status == "suspended"
    assert await repo.active_session_user(db, session_id) is None
    assert [row["action"] for row in await repo.query_audit(db, user_id=admin.id)] == ["SuspendUser"]


async def test_no_such_user_writes_no_audit_row(db: Database) -> None:
    admin, _ = await new_user(db)
    assert await repo.set_user_status(db, uuid.uuid4(), "suspended",
                                      AuditEvent("SuspendUser", admin.id, None, None, {})) is None
    assert await repo.query_audit(db, user_id=admin.id) == []


async def test_an_approval_whose_audit_row_fails_does_not_happen(db: Database) -> None:
    approver, _ = await new_user(db)
    device_hash = uuid.uuid4().bytes
    assert await repo.create_device_code(db, device_hash, "BCDF-GHJK", 600)
    with pytest.raises(BadRequest):
        await repo.approve_device_code(db, "BCDF-GHJK", approver.id,
                                       AuditEvent("ApproveDevice", approver.id, None, None, UNSTORABLE))
    assert await repo.consume_device_code(db, device_hash) == ("pending", None)
    assert await repo.query_audit(db, user_id=approver.id) == []

    assert await repo.approve_device_code(db, "BCDF-GHJK", approver.id,
                                          AuditEvent("ApproveDevice", approver.id, None, None, {}))
    assert [row["action"] for row in await repo.query_audit(db, user_id=approver.id)] == ["ApproveDevice"]
    # Used: a second approval is refused, and writes no second row.
    assert not await repo.approve_device_code(db, "BCDF-GHJK", approver.id,
                                              AuditEvent("ApproveDevice", approver.id, None, None, {}))
    assert len(await repo.query_audit(db, user_id=approver.id)) == 1
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
