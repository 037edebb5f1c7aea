"""A sign-in racing an administrator's suspension of the same user never
leaves a session behind, against PostgreSQL.

A password login reads the user as active, hashes in a thread, then writes
the session; a device poll finds the approving user, then writes it; a
bearer ID token is admitted, then gets its row. A suspension revokes the
sessions that exist when it runs: one written just after it would be
unrevoked, and would work again the day the user is resumed.

The window is made real with PostgreSQL's own locks, not by patching the
gateway: the test's connection suspends the user (the statements of
repositories.set_user_status) and keeps its transaction open while the
sign-in runs. Given that, when the sign-in is attempted and the suspension
then commits, then the sign-in is refused as for a suspended user, and once
the user is resumed they have no live session.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any, Awaitable, TypeVar

import asyncpg

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.models import AuditEvent
from tests.support.gatewayclient import PASSWORD, error_of, register_and_login, unique_email

T = TypeVar("T")


async def during_suspension(database_url: str, user_id: uuid.UUID, sign_in: Awaitable[T]) -> T:
    """Run `sign_in` while a suspension of the user is made but not
    committed; commit it once the sign-in has finished or waits on a lock."""
    suspender, watcher = await asyncpg.connect(database_url), await asyncpg.connect(database_url)
    try:
        transaction = suspender.transaction()
        await transaction.start()
        await suspender.execute("UPDATE users SET status = 'suspended' WHERE id = $1", user_id)
        await suspender.execute(
            "UPDATE sessions SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL", user_id)
        attempt = asyncio.ensure_future(sign_in)
        for _ in range(250):
            if attempt.done() or await watcher.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"):
                break
            await asyncio.sleep(0.02)
        await transaction.commit()
        return await attempt
    finally:
        await suspender.close()
        await watcher.close()


async def resume_and_count_live_sessions(db: Database, user_id: uuid.UUID) -> int:
    await repo.set_user_status(db, user_id, "active", AuditEvent("ResumeUser", None, None, None, {}))
    row = await db.fetchrow("SELECT count(*) AS live FROM sessions WHERE user_id = $1 AND revoked_at IS NULL",
                            user_id)
    assert row is not None
    return int(row["live"])


async def test_a_login_racing_a_suspension_gets_no_session(gateway: Any, database_url: str, db: Database) -> None:
    email = unique_email()
    registered = await gateway.post("/api/v1/auth/register", json={"email": email, "password": PASSWORD})
    user_id = uuid.UUID((await registered.json())["id"])

    answer = await during_suspension(database_url, user_id, gateway.post(
        "/api/v1/auth/login", json={"email": email, "password": PASSWORD}))
    assert answer.status == 401, "signed in while being suspended"
    assert await error_of(answer) == (401, "invalid_credentials")  # as for any suspended user
    assert await resume_and_count_live_sessions(db, user_id) == 0
    outcomes = [row["details"]["result"] for row in await repo.query_audit(db, user_id=user_id, action="Login")]
    assert outcomes == ["failure"]


async def test_a_device_poll_racing_a_suspension_gets_no_session(gateway: Any, database_url: str,
                                                                 db: Database) -> None:
    user = await register_and_login(gateway)
    started = await (await gateway.post("/api/v1/auth/device", json={})).json()
    approved = await user.call("POST", "/api/v1/auth/device/approve", json={"user_code": started["user_code"]})
    assert approved.status == 204

    answer = await during_suspension(database_url, uuid.UUID(user.user_id), gateway.post(
        "/api/v1/auth/device/token", json={"device_code": started["device_code"]}))
    assert answer.status == 400, "signed in while being suspended"
    assert await error_of(answer) == (400, "invalid_grant")
    assert await resume_and_count_live_sessions(db, uuid.UUID(user.user_id)) == 0
    # The code is used up all the same: a later poll cannot have the session either.
    again = await gateway.post("/api/v1/auth/device/token", json={"device_code": started["device_code"]})
    assert await error_of(again) == (400, "invalid_grant")


async def test_a_bearer_id_tokens_first_use_racing_a_suspension_gets_no_session_row(database_url: str,
                                                                                    db: Database) -> None:
    user = await repo.create_user(db, unique_email(), "not-a-real-hash")
    session_id = uuid.uuid4()
    expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)

    made = await during_suspension(database_url, user.id, repo.ensure_session(db, session_id, user.id, expires))
    assert made is False
    assert await resume_and_count_live_sessions(db, user.id) == 0
    # Once active again, the token's first use makes its row as usual.
    assert await repo.ensure_session(db, session_id, user.id, expires) is True
    assert await repo.active_session_user(db, session_id) is not None
