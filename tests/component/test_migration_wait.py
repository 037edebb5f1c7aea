"""A replica that starts while another migrates waits for it, however much
longer than the database timeout that takes, and then finds nothing left
to do or does what is left (provisioning.db.migrate), against PostgreSQL.

Another connection holds the migration lock, as a replica migrating a large
table would, for several times the gateway's database timeout; the
migration waits, and applies every migration once the lock is let go. Its
own bound (MIGRATION_TIMEOUT_SECONDS) still ends a wait that never ends.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import asyncpg
import pytest

from provisioning.db import migrate as migrations
from provisioning.db.pool import Database
from provisioning.errors import DatabaseUnavailable
from tests.support.databases import new_database

DATABASE_TIMEOUT = 0.5


@pytest.fixture
async def empty_database(postgres_server_url: str) -> AsyncIterator[str]:
    yield await new_database(postgres_server_url, template=None)


async def hold_the_lock(url: str) -> tuple[asyncpg.Connection, asyncpg.transaction.Transaction]:
    holder = await asyncpg.connect(url)
    transaction = holder.transaction()
    await transaction.start()
    await holder.execute("SELECT pg_advisory_xact_lock($1)", migrations._MIGRATION_LOCK)
    return holder, transaction


async def test_a_migration_waits_for_another_replicas_beyond_the_database_timeout(empty_database: str) -> None:
    db = await Database.connect(empty_database, timeout=DATABASE_TIMEOUT)
    holder, transaction = await hold_the_lock(empty_database)

    async def migrate() -> list[str]:
        async with db.connection() as connection:
            return await migrations.migrate(connection)

    try:
        waiting = asyncio.create_task(migrate())
        await asyncio.sleep(DATABASE_TIMEOUT * 5)
        assert not waiting.done(), waiting.exception() if waiting.done() else None
        await transaction.commit()  # the other replica is done (here: it did nothing)
        applied = await asyncio.wait_for(waiting, 30)
        assert applied == [name for name, _ in migrations._migrations()]
        async with db.connection() as connection:
            assert await migrations.migrate(connection) == []
    finally:
        await holder.close()
        await db.close()


async def test_its_own_bound_ends_a_wait_that_would_not_end(empty_database: str) -> None:
    db = await Database.connect(empty_database, timeout=DATABASE_TIMEOUT)
    holder, _ = await hold_the_lock(empty_database)
    try:
        async with db.connection() as connection:
            with pytest.raises(DatabaseUnavailable, match="migration timed out"):
                await migrations.migrate(connection, timeout=DATABASE_TIMEOUT * 3)
    finally:
        await holder.close()
        await db.close()
