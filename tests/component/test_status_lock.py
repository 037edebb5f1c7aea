"""The lock that keeps a workspace's suspend and resume apart
(provisioning.db.repositories.workspace_status_lock), against PostgreSQL:
a caller that only tries is told at once; one that waits (a suspension)
gets the lock when the holder lets go, and is told only when its wait runs
out."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Conflict


async def test_a_trying_caller_is_told_and_a_waiting_one_is_let_in_after_the_holder(database_url: str) -> None:
    db = await Database.connect(database_url)
    workspace_id = uuid.uuid4()
    order: list[str] = []

    async def hold(seconds: float) -> None:
        async with repo.workspace_status_lock(db, workspace_id):
            order.append("held")
            await asyncio.sleep(seconds)
            order.append("released")

    try:
        holder = asyncio.create_task(hold(0.5))
        await asyncio.sleep(0.1)
        with pytest.raises(Conflict):
            async with repo.workspace_status_lock(db, workspace_id):
                pass
        async with repo.workspace_status_lock(db, workspace_id, wait_seconds=10):
            order.append("waited")
        await holder
        assert order == ["held", "released", "waited"]

        holder = asyncio.create_task(hold(2))
        await asyncio.sleep(0.1)
        with pytest.raises(Conflict):
            async with repo.workspace_status_lock(db, workspace_id, wait_seconds=0.3):
                pass
        await holder
    finally:
        await db.close()


async def test_status_operations_on_every_connection_of_the_pool_do_not_starve_each_other(database_url: str) -> None:
    """Each holder of a status lock commits its steps on a second connection
    as it goes (provisioning.suspension). Were every connection of the pool a
    holder's, none would get its second (each waits out the database
    timeout: a mass suspension answered 503)."""
    db = await Database.connect(database_url, max_size=2, timeout=5)
    finished: list[uuid.UUID] = []

    async def suspend_like(workspace_id: uuid.UUID) -> None:
        async with repo.workspace_status_lock(db, workspace_id, wait_seconds=10):
            await asyncio.sleep(0.05)  # all of them are holders now, or waiting to be
            await db.fetchrow("SELECT 1")  # a step committed on its own
            finished.append(workspace_id)

    try:
        async with asyncio.timeout(30):
            await asyncio.gather(*(suspend_like(uuid.uuid4()) for _ in range(6)))
        assert len(finished) == 6
    finally:
        await db.close()
