"""The per-workspace cap on open streams across replicas
(proxy.passthrough.stream_slots), against PostgreSQL: two StreamSlots on one
database are two replicas. The cap counts both, holds under a race, frees a
slot when its stream ends, forgets a crashed replica but not a live one,
fails closed, and comes through an outage of the database."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any, AsyncIterator

import asyncpg
import pytest

from provisioning.db.migrate import migrate
from provisioning.db.pool import Database
from provisioning.errors import DatabaseUnavailable, RateLimited
from proxy.http.metrics import Metrics
from proxy.passthrough.stream_slots import StreamSlots
from tests.support.databases import stop_postgres


@contextlib.asynccontextmanager
async def replicas(database_url: str, count: int, maximum: int, **timing: float) -> AsyncIterator[list[StreamSlots]]:
    db = await Database.connect(database_url)
    async with db.connection() as connection:
        await migrate(connection)
    started = [StreamSlots(maximum, Metrics(), **timing) for _ in range(count)]
    for slots in started:
        await slots.start(db)
    try:
        yield started
    finally:
        for slots in started:
            await slots.stop(timeout=5)
        await db.close()


async def hold(slots: StreamSlots, workspace: uuid.UUID, until: asyncio.Event) -> None:
    async with slots.held(workspace):
        await until.wait()


async def opened(slots: StreamSlots, workspace: uuid.UUID, until: asyncio.Event) -> asyncio.Task[None]:
    """A stream holding its slot until `until` is set (or it fails to get one)."""
    task = asyncio.create_task(hold(slots, workspace, until))
    while not task.done() and not slots._held:  # noqa: SLF001 - the slot taken, or the refusal
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    return task


async def until_counted(database_url: str, query: str, *args: object, equals: int, seconds: float = 20) -> None:
    """Wait for the database to say `query` counts `equals`: what a beat
    does takes a beat or two, longer on a loaded machine, so the test waits
    for the state rather than for a guessed time."""
    connection = await asyncpg.connect(database_url)
    try:
        async with asyncio.timeout(seconds):
            while await connection.fetchval(query, *args) != equals:
                await asyncio.sleep(0.05)
    finally:
        await connection.close()


async def refused(slots: StreamSlots, workspace: uuid.UUID) -> bool:
    with pytest.raises(RateLimited) as error:
        async with slots.held(workspace):
            pass
    return error.value.retry_after > 0


async def test_the_cap_counts_every_replica_and_a_closed_stream_frees_its_slot(database_url: str) -> None:
    async with replicas(database_url, 2, maximum=2) as (a, b):
        workspace, other = uuid.uuid4(), uuid.uuid4()
        first_ends, second_ends = asyncio.Event(), asyncio.Event()
        first = await opened(a, workspace, first_ends)
        second = await opened(b, workspace, second_ends)
        assert not first.done() and not second.done()
        assert await refused(a, workspace) and await refused(b, workspace)
        with pytest.raises(RateLimited):
            await b.require_room(workspace)
        async with a.held(other):  # another workspace has slots of its own
            pass
        first_ends.set()
        await first
        for _ in range(100):  # the release runs beside the stream's end
            try:
                await b.require_room(workspace)
                break
            except RateLimited:
                await asyncio.sleep(0.05)
        async with b.held(workspace):
            pass
        second_ends.set()
        await second


async def test_racing_opens_on_two_replicas_take_no_more_than_the_cap(database_url: str) -> None:
    async with replicas(database_url, 2, maximum=3) as (a, b):
        workspace, until = uuid.uuid4(), asyncio.Event()
        racers = [asyncio.create_task(hold(a if n % 2 else b, workspace, until)) for n in range(12)]
        await asyncio.sleep(1.0)
        done = [task for task in racers if task.done()]
        assert len(done) == 9 and all(isinstance(task.exception(), RateLimited) for task in done)
        until.set()
        await asyncio.gather(*racers, return_exceptions=True)


async def test_a_crashed_replica_is_removed_and_one_taken_for_crashed_puts_its_rows_back(database_url: str) -> None:
    async with replicas(database_url, 2, maximum=1, beat_seconds=0.2, lapse_seconds=1.0) as (crashed, alive):
        workspace, never = uuid.uuid4(), asyncio.Event()
        stream = await opened(crashed, workspace, never)
        assert await refused(alive, workspace)
        assert crashed._beating is not None  # noqa: SLF001 - a crash: it stops beating and cleans nothing
        crashed._beating.cancel()  # noqa: SLF001
        # Lapsed, and removed at the live replica's next beat.
        await until_counted(database_url, "SELECT count(*) FROM gateway_replicas WHERE replica_id = $1",
                            crashed.replica_id, equals=0)
        async with alive.held(workspace):  # the crashed replica's stream no longer counts
            assert await refused(crashed, workspace)
            # The live replica taken for crashed (as a replica cut off from
            # the database is): its next beat puts its row back.
            connection = await asyncpg.connect(database_url)
            try:
                await connection.execute("DELETE FROM gateway_replicas WHERE replica_id = $1", alive.replica_id)
                await connection.execute("DELETE FROM stream_slots WHERE replica_id = $1", alive.replica_id)
                await until_counted(database_url, "SELECT count(*) FROM stream_slots WHERE workspace_id = $1",
                                    workspace, equals=1)
            finally:
                await connection.close()
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)


async def test_through_a_database_outage_no_stream_opens_and_none_is_forgotten(own_postgres: Any) -> None:
    """Down: no stream opens (503). Down longer than the lapse: every
    replica is late, and none takes another for crashed. Back: a release
    the database missed is done at the next beat."""
    url = own_postgres.get_uri()
    async with replicas(url, 2, maximum=2, beat_seconds=0.2, lapse_seconds=1.0) as (a, b):
        workspace, a_ends, b_ends = uuid.uuid4(), asyncio.Event(), asyncio.Event()
        on_a, on_b = await opened(a, workspace, a_ends), await opened(b, workspace, b_ends)
        await stop_postgres(own_postgres)
        with pytest.raises(DatabaseUnavailable):
            async with a.held(uuid.uuid4()):
                pytest.fail("a stream opened without its slot")
        a_ends.set()  # its release cannot reach the database
        await on_a
        await asyncio.sleep(1.5)
        await asyncio.to_thread(own_postgres.ensure_postgres_running)
        assert own_postgres.get_uri() == url
        await asyncio.sleep(1.5)  # the pool reconnects; several beats
        connection = await asyncpg.connect(url)
        try:
            rows = await connection.fetch("SELECT replica_id FROM stream_slots WHERE workspace_id = $1", workspace)
            assert [row["replica_id"] for row in rows] == [b.replica_id]
        finally:
            await connection.close()
        async with a.held(workspace):
            assert await refused(b, workspace)
        b_ends.set()
        await on_b
