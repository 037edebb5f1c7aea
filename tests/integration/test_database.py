"""The database pool and migrations against the real PostgreSQL.

The pool releases connections without asyncpg's reset query (one round trip
saved per query), which is only safe while nothing leaves session state on a
pooled connection: these tests hold the two places that could. Events to
the replicas come from table triggers; the last test holds their shape.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import uuid
from typing import AsyncIterator

import asyncpg
import pytest

from provisioning.db import credentials as credential_rows
from provisioning.db import migrate as migrations
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.models import AuditEvent, Credential
from provisioning.spares import CLAIMABLE_SECONDS
from provisioning.tiers import DEFAULT_LIVE_CREDENTIALS
from tests.support.databases import new_database


@pytest.fixture
async def empty_database(postgres_server_url: str) -> AsyncIterator[Database]:
    db = await Database.connect(await new_database(postgres_server_url, template=None), min_size=1, max_size=1)
    yield db
    await db.close()


async def test_migrations_apply_once_and_leave_no_lock_on_the_pooled_connection(empty_database: Database) -> None:
    async with empty_database.connection() as connection:
        applied = await migrations.migrate(connection)
    assert applied == [name for name, _ in migrations._migrations()]
    # max_size=1: this is the very connection the migration ran on.
    async with empty_database.connection() as connection:
        held = await connection.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        assert held == 0
        assert await migrations.migrate(connection) == []


async def test_a_failing_migration_leaves_the_schema_as_it_was(empty_database: Database,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migrations, "_migrations", lambda: [
        ("0001_good", "CREATE TABLE first_table (id int)"),
        ("0002_broken", "CREATE TABLE broken ("),
    ])
    async with empty_database.connection() as connection:
        with pytest.raises(asyncpg.PostgresSyntaxError):
            await migrations.migrate(connection)
    async with empty_database.connection() as connection:
        assert await connection.fetchval("SELECT to_regclass('first_table')") is None
        assert await connection.fetchval("SELECT to_regclass('schema_migrations')") is None


async def test_an_abandoned_transaction_is_rolled_back_before_the_connection_is_reused(
        empty_database: Database) -> None:
    async with empty_database.connection() as connection:
        await connection.execute("BEGIN")
        await connection.execute("CREATE TABLE half_done (id int)")
    async with empty_database.connection() as connection:
        assert not connection.is_in_transaction()
        assert await connection.fetchval("SELECT to_regclass('half_done')") is None


async def test_user_and_session_changes_reach_the_replicas_from_the_database(database_url: str) -> None:
    """Every replica drops cached sessions on these events; they come from the
    tables' triggers, on commit, whichever statement made the change."""
    db = await Database.connect(database_url, min_size=1, max_size=2)
    events: list[dict[str, str]] = []
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(repo.EVENTS_CHANNEL, lambda *args: events.append(json.loads(args[3])))
    try:
        user = await repo.create_user(db, f"{uuid.uuid4().hex}@example.test", "not-a-real-hash")
        first, second = uuid.uuid4(), uuid.uuid4()
        for session_id in (first, second):
            await repo.create_session(db, session_id, user.id, datetime.datetime.now(datetime.timezone.utc)
                                      + datetime.timedelta(hours=1), AuditEvent("Login", user.id, None, None, {}))
        await repo.revoke_session(db, first)
        await repo.revoke_session(db, first)  # already revoked: nothing new to say
        await repo.set_user_status(db, user.id, "suspended", AuditEvent("SuspendUser", None, None, None, {}))
        for _ in range(50):
            if len(events) >= 3:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    finally:
        await listener.close()
        await db.close()
    assert events == [{"kind": "session_revoked", "id": str(first)},
                      {"kind": "user_changed", "id": str(user.id)},
                      {"kind": "session_revoked", "id": str(second)}]


async def test_concurrent_claims_of_one_user_agree_on_one_workspace(database_url: str) -> None:
    """Racing inserts of one user can trip the namespace's unique index before
    user_id's; that is "already there" too, never a 500. Found in review:
    with a conflict target of user_id alone, about 1 in 5 bursts failed."""
    db = await Database.connect(database_url, min_size=6, max_size=6)
    try:
        for _ in range(30):
            user = await repo.create_user(db, f"{uuid.uuid4().hex}@example.test", "not-a-real-hash")
            claims = await asyncio.gather(*(
                repo.claim_workspace(db, user.id, f"tenant-{user.id}", "sa-tenant-admin", "basic") for _ in range(6)))
            assert len({workspace.id for workspace, _ in claims}) == 1
            assert sum(created for _, created in claims) == 1
    finally:
        await db.close()


async def test_an_issuance_is_recorded_only_for_the_workspace_as_it_was_read(database_url: str) -> None:
    """The audit row is the last gate before a kubeconfig leaves: a suspension
    (or a replaced ServiceAccount) that lands while the token is minted wins."""
    db = await Database.connect(database_url, min_size=1, max_size=2)
    try:
        user = await repo.create_user(db, f"{uuid.uuid4().hex}@example.test", "not-a-real-hash")
        claimed, _ = await repo.claim_workspace(db, user.id, f"tenant-{user.id}", "sa-tenant-admin", "basic")
        event = AuditEvent("IssueKubeconfig", user.id, claimed.id, None, {})

        async def issued(uid: str) -> bool:
            """One issuance begun and confirmed as if minted for account `uid`."""
            now = datetime.datetime.now(datetime.timezone.utc)
            credential = Credential(uuid.uuid4(), user.id, claimed.id, "kubeconfig", claimed.namespace,
                                    "sa-tenant-admin", "credential-x", None, now, now + datetime.timedelta(hours=2))
            assert await credential_rows.begin(db, credential, within=DEFAULT_LIVE_CREDENTIALS,
                                               claimable_seconds=CLAIMABLE_SECONDS)
            return await credential_rows.finish(db, credential.id, "jti", credential.expires_at, user.id, uid, event)

        assert not await issued("uid-1")  # still provisioning
        async with db.transaction() as connection:
            ready = await repo.set_workspace_state(connection, claimed.id, "provisioned", "uid-1")
        assert ready is not None and await issued("uid-1")
        async with db.transaction() as connection:
            await repo.set_workspace_state(connection, claimed.id, "provisioned", "uid-2")
        assert not await issued("uid-1")
        async with db.transaction() as connection:
            suspended = await repo.set_workspace_state(connection, claimed.id, "suspended")
        assert suspended is not None and not await issued("uid-2")
        rows = await repo.query_audit(db, workspace_id=claimed.id)
        assert [row["action"] for row in rows] == ["IssueKubeconfig"]
    finally:
        await db.close()
