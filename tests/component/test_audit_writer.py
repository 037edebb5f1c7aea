"""The audit writer (provisioning.audit) against the real PostgreSQL: no row
of an accepted write is ever dropped.

A burst of several thousand writes a second for some seconds ends with as
many ProxyWrite rows as writes accepted, none refused. When the writer is
made slower than the load (a real `LOCK TABLE audit_logs` from another
connection: PostgreSQL's own behaviour, no fake), writes beyond the queue's
room are refused, and every write accepted still gets its row once the lock
goes. A row PostgreSQL refuses (jsonb cannot hold U+0000) is stored as
escaped text without taking its batch's other rows with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any, AsyncIterator

import asyncpg
import pytest

from provisioning.audit import AuditWriter
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import AuditUnavailable
from provisioning.models import AuditEvent


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = await Database.connect(database_url, min_size=1, max_size=4)
    yield database
    await database.close()


def write(user_id: uuid.UUID | None, run: str, n: int, **extra: object) -> AuditEvent:
    return AuditEvent("ProxyWrite", user_id, None, "10.0.0.1",
                      {"method": "POST", "path": f"/api/v1/namespaces/x/configmaps/{n}", "status": 201,
                       "run": run, "n": n, **extra})


async def accept(writer: AuditWriter, event: AuditEvent) -> bool:
    """As the relay does: a place before the write, the row after it."""
    try:
        place = await writer.reserve()
    except AuditUnavailable:
        return False
    place.fill(event)
    return True


@contextlib.asynccontextmanager
async def audit_table_locked(database_url: str) -> AsyncIterator[tuple[asyncpg.Connection, Any]]:
    """Another connection holding LOCK TABLE audit_logs (PostgreSQL's own
    lock) until the caller ends its transaction or the block ends."""
    locker = await asyncpg.connect(database_url)
    try:
        lock = locker.transaction()
        await lock.start()
        await locker.execute("LOCK TABLE audit_logs")
        yield locker, lock
    finally:
        await locker.close()


async def stored(db: Database, run: str) -> list[int]:
    rows = await db.fetch("SELECT details->>'n' AS n FROM audit_logs WHERE action = 'ProxyWrite' AND details->>'run' = $1",
                          run)
    return sorted(int(r["n"]) for r in rows)


async def test_a_burst_of_thousands_of_writes_a_second_loses_no_row(db: Database) -> None:
    """6,000 writes a second offered for 5 seconds (30,000 rows): every
    one accepted, every one stored, once."""
    user = await repo.create_user(db, f"{uuid.uuid4().hex}@example.test", "not-a-real-hash")
    writer = AuditWriter(db)
    await writer.start()
    run, per_second, seconds = uuid.uuid4().hex, 6_000, 5
    loop = asyncio.get_running_loop()
    offered = accepted = 0
    started = loop.time()
    try:
        while (elapsed := loop.time() - started) < seconds:
            due = min(int(elapsed * per_second), per_second * seconds)
            while offered < due:
                accepted += await accept(writer, write(user.id, run, offered))
                offered += 1
            await asyncio.sleep(0.005)
    finally:
        await writer.stop(timeout=30)
    assert offered >= per_second * (seconds - 1)  # the load was offered (this loop kept up with itself)
    assert accepted == offered and writer.queue.refusals == 0
    assert await stored(db, run) == list(range(offered))
    assert writer.rows_written == offered and writer.rows_logged == 0 and writer.queue.taken == 0


async def test_a_writer_slower_than_the_load_refuses_writes_and_stores_every_one_it_accepted(
        db: Database, database_url: str) -> None:
    """Another connection holds LOCK TABLE audit_logs: the writer cannot
    store a row. The first 50 writes fill the queue's 50 places; the next
    150, arriving together, wait for a place and are refused (their actions
    would not happen). Once the lock goes, the 50 are stored, and writes are
    accepted again."""
    user = await repo.create_user(db, f"{uuid.uuid4().hex}@example.test", "not-a-real-hash")
    writer = AuditWriter(db, capacity=50, wait_seconds=0.2, retry_seconds=0.05)
    await writer.start()
    run = uuid.uuid4().hex
    try:
        async with audit_table_locked(database_url) as (locker, lock):
            first = [await accept(writer, write(user.id, run, n)) for n in range(50)]
            late = await asyncio.gather(*(accept(writer, write(user.id, run, n)) for n in range(50, 200)))
            assert all(first) and not any(late)
            assert writer.queue.refusals == 150 and writer.queue.taken == 50
            assert await locker.fetchval("SELECT count(*) FROM audit_logs WHERE details->>'run' = $1", run) == 0
            await lock.commit()
            async with asyncio.timeout(30):
                while writer.queue.taken:
                    await asyncio.sleep(0.05)
            again = [await accept(writer, write(user.id, run, n)) for n in range(200, 210)]
            assert all(again)
    finally:
        await writer.stop(timeout=30)
    assert await stored(db, run) == [*range(50), *range(200, 210)]
    assert writer.rows_logged == 0


async def test_a_row_postgresql_refuses_is_stored_as_text_and_its_batch_is_not_lost(db: Database) -> None:
    """One row of a 1,000-row batch (the writer takes up to 2,000) holds U+0000 in its details (PostgreSQL's
    jsonb refuses it: a real refusal). The batch is split until that row is
    alone; the 999 others are stored as they are, and that one as escaped
    text; the writer goes on recording."""
    user = await repo.create_user(db, f"{uuid.uuid4().hex}@example.test", "not-a-real-hash")
    writer = AuditWriter(db)
    run = uuid.uuid4().hex
    for n in range(1000):
        assert await accept(writer, write(user.id, run, n, **({"path": "/a\x00b"} if n == 617 else {})))
    await writer.start()  # all 1,000 in its first batch
    try:
        async with asyncio.timeout(30):
            while writer.queue.taken:
                await asyncio.sleep(0.05)
        assert await accept(writer, write(user.id, run, 1000))
    finally:
        await writer.stop(timeout=30)
    assert await stored(db, run) == [n for n in range(1001) if n != 617]
    kept = await db.fetch("SELECT details, ip_address FROM audit_logs WHERE user_id = $1 AND details ? 'unstorable'",
                          user.id)
    assert len(kept) == 1 and kept[0]["ip_address"] is None
    text = json.loads(kept[0]["details"])["unstorable"]
    assert "/a\\x00b" in text and "'n': 617" in text and "10.0.0.1" in text
    assert writer.rows_written == 1001 and writer.rows_logged == 0


async def test_rows_the_database_cannot_take_by_the_end_of_a_stop_are_logged_whole(
        db: Database, database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The table stays locked through the stop: the rows, which the writer
    retries until the stop's bound, go to the log whole (the record of last
    resort), never nowhere; a write whose place was taken before the stop
    and whose row comes after it is logged too."""
    writer = AuditWriter(db, capacity=10, retry_seconds=0.05)
    await writer.start()
    run = uuid.uuid4().hex
    async with audit_table_locked(database_url) as (_locker, lock):
        for n in range(3):
            assert await accept(writer, write(None, run, n))
        late = await writer.reserve()
        await writer.stop(timeout=0.5)
        late.fill(write(None, run, 3))
        with pytest.raises(AuditUnavailable):
            await writer.reserve()  # no writer left: nothing more is accepted
        await lock.rollback()
    logged = sorted(r.audit["details"]["n"] for r in caplog.records  # type: ignore[attr-defined]
                    if r.getMessage().startswith("audit row not written") and r.audit["details"]["run"] == run)  # type: ignore[attr-defined]
    assert logged == [0, 1, 2, 3]
    assert writer.rows_logged == 4 and writer.queue.taken == 0


async def test_a_batch_the_database_cannot_take_in_time_is_halved_not_retried_for_ever(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose COPY outlasts the database's timeout (rows a tenant made
    large, a loaded server) is written in smaller parts. Retried whole, it
    would never go, the queue would stay full, and every tenant's writes
    would be refused. The timeout is a FAKE one, raised for parts of more
    than 100 rows: the real COPY into the real PostgreSQL does the rest."""
    from provisioning.errors import DatabaseUnavailable

    real = repo.record_audit_batch
    sizes: list[int] = []

    async def slow_for_big_parts(database: Database, rows: list[AuditEvent]) -> None:
        sizes.append(len(rows))
        if len(rows) > 100:
            raise DatabaseUnavailable() from TimeoutError()
        await real(database, rows)

    monkeypatch.setattr(repo, "record_audit_batch", slow_for_big_parts)
    writer = AuditWriter(db, capacity=2000, retry_seconds=0.05)
    await writer.start()
    run = uuid.uuid4().hex
    try:
        for n in range(1000):
            assert await accept(writer, write(None, run, n, long="x" * 10_000))
        async with asyncio.timeout(30):
            while writer.rows_written < 1000:
                await asyncio.sleep(0.05)
    finally:
        await writer.stop()
    assert await stored(db, run) == list(range(1000))
    assert max(sizes) > 100 and min(sizes) <= 100
    kept = await db.fetch("SELECT details FROM audit_logs WHERE details->>'run' = $1 LIMIT 1", run)
    details = kept[0]["details"]
    details = json.loads(details) if isinstance(details, str) else details
    assert len(details["long"]) == 2048 and details["truncated"] == ["long"]
