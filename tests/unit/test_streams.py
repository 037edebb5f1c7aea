"""The stream registry: which open streams end when their right to exist
ends. Real asyncio tasks, no network. (The per-workspace cap, across
replicas, is PostgreSQL's: tests/component/test_stream_slots.py.)"""

from __future__ import annotations

import asyncio
import datetime
import uuid

import pytest

from proxy.metrics import Metrics
from proxy.passthrough.stream_slots import StreamSlots
from proxy.passthrough.streams import Owner, StreamRegistry

LATER = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)


def owner(workspace: uuid.UUID, session: uuid.UUID, user: uuid.UUID,
          expires_at: datetime.datetime = LATER) -> Owner:
    return Owner(workspace, session, user, expires_at)


def registry_without_slots() -> StreamRegistry:
    metrics = Metrics()
    return StreamRegistry(metrics, StreamSlots(1, metrics))  # never started: `register` takes no slot


async def open_stream(registry: StreamRegistry, who: Owner) -> asyncio.Task[None]:
    async def stream() -> None:
        with registry.register(who):
            await asyncio.Event().wait()  # until cut
    task = asyncio.create_task(stream())
    await asyncio.sleep(0)
    return task


async def ended(task: asyncio.Task[None]) -> bool:
    with pytest.raises(asyncio.CancelledError):
        await task
    return True


async def test_each_right_ending_ends_exactly_its_streams() -> None:
    registry = registry_without_slots()
    ws, other_ws, alice, bob = (uuid.uuid4() for _ in range(4))
    s1, s2, s3 = (uuid.uuid4() for _ in range(3))
    a1 = await open_stream(registry, owner(ws, s1, alice))
    a2 = await open_stream(registry, owner(other_ws, s2, alice))
    b = await open_stream(registry, owner(ws, s3, bob))
    assert registry.cut_session(s1) == 1 and await ended(a1)
    assert not a2.done() and not b.done()
    assert registry.cut_user(alice) == 1 and await ended(a2)
    assert not b.done()
    assert registry.cut(ws) == 1 and await ended(b)
    assert registry.cut(ws) == 0


async def test_a_stream_ends_when_its_session_expires() -> None:
    registry = registry_without_slots()
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=50)
    expiring = await open_stream(registry, owner(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), soon))
    lasting = await open_stream(registry, owner(uuid.uuid4(), uuid.uuid4(), uuid.uuid4()))
    assert await ended(expiring)
    assert not lasting.done()
    lasting.cancel()
