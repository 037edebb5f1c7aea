"""The lock that keeps a workspace's suspend and resume apart
(provisioning.db.repositories.workspace_status_lock), against PostgreSQL:
a caller that only tries is told at once; one that waits (a suspension)
gets the lock when the holder lets go, and is told only when its wait runs
out.

Each holder keeps a connection for the whole operation (minutes, with a
slow API server), so holders are limited to part of the pool
(Database.long_hold): one more waits at most the database timeout and is
told 503 `database_busy`, and onboardings and resumes leave room that only
suspensions (the kill switch) may take."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any, AsyncIterator

import pytest

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Conflict, ServiceUnavailable
from proxy import keys
from tests.support.gatewayclient import admin_session, error_of, register_and_login


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


@contextlib.asynccontextmanager
async def held(db: Database, count: int, *, kill_switch: bool = False) -> AsyncIterator[None]:
    """`count` operations under way on as many workspaces, holding their locks until the block ends."""
    entered, done = asyncio.Semaphore(0), asyncio.Event()

    async def hold() -> None:
        async with repo.workspace_status_lock(db, uuid.uuid4(), **({"kill_switch": True} if kill_switch else {})):
            entered.release()
            await done.wait()

    tasks = [asyncio.create_task(hold()) for _ in range(count)]
    try:
        async with asyncio.timeout(10):
            for _ in range(count):
                await entered.acquire()
        yield
    finally:
        done.set()
        await asyncio.gather(*tasks)


async def test_long_operations_beyond_the_pools_share_are_told_busy_and_suspensions_keep_their_room(
        database_url: str) -> None:
    db = await Database.connect(database_url, max_size=10, timeout=1)  # five long holds
    try:
        async with asyncio.timeout(20), held(db, 4):  # onboardings or resumes: all they may take
            started = time.monotonic()
            with pytest.raises(ServiceUnavailable) as busy:
                async with repo.workspace_status_lock(db, uuid.uuid4()):
                    pytest.fail("a fifth onboarding got in")
            assert 0.9 < time.monotonic() - started < 3
            assert (busy.value.status, busy.value.code, busy.value.retry_after) == (503, "database_busy", 1)
            # The kill switch is not queued behind them.
            async with repo.workspace_status_lock(db, uuid.uuid4(), kill_switch=True):
                pass
            async with held(db, 1, kill_switch=True):
                # Now every long hold is taken: another suspension is told, not queued for ever.
                with pytest.raises(ServiceUnavailable):
                    async with repo.workspace_status_lock(db, uuid.uuid4(), kill_switch=True):
                        pytest.fail("a sixth long hold")
        # All let go: room again for everyone.
        async with held(db, 4), repo.workspace_status_lock(db, uuid.uuid4(), kill_switch=True):
            pass
    finally:
        await db.close()


async def test_the_routes_answer_busy_with_retry_after_and_an_admin_suspends_regardless(
        make_gateway: Any, database_url: str) -> None:
    gateway = await make_gateway(GATEWAY_DATABASE_TIMEOUT_SECONDS="1")  # a pool of 10: five long holds
    tenant = await register_and_login(gateway)
    root = await admin_session(gateway, database_url)
    db = gateway.app[keys.DATABASE]
    workspace, _ = await repo.claim_workspace(db, uuid.UUID(tenant.user_id), f"tenant-{tenant.user_id}",
                                              "sa-tenant-admin", "basic")
    async with asyncio.timeout(30), held(db, 4):  # four tenants' onboardings, against a slow API server
        answer = await tenant.call("POST", "/api/v1/workspaces/init", json={})
        assert await error_of(answer) == (503, "database_busy")
        assert answer.headers["Retry-After"] == "1"
        # The suspension goes ahead: its first step commits, and the
        # (absent, in this ring) cluster is what it then fails on.
        suspended = await root.call("POST", f"/api/v1/workspaces/{workspace.id}/suspend")
        assert await error_of(suspended) == (503, "cluster_unavailable")
        assert (await repo.get_workspace(db, workspace.id)).status == "suspended"
