"""The stream registry: which open streams end when their right to exist
ends. Real asyncio tasks, no network. (The per-workspace cap, across
replicas, is PostgreSQL's: tests/component/test_stream_slots.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import uuid
from types import SimpleNamespace
from typing import Any, AsyncIterator

import pytest

from provisioning.errors import ShuttingDown
from proxy.http.metrics import Metrics
from proxy.passthrough.stream_slots import StreamSlots
from proxy.passthrough import streams
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


async def test_a_right_that_ends_while_a_stream_is_being_authorised_still_ends_it() -> None:
    """The gate reads the session and the workspace (database round trips)
    before the stream is registered; a cut in between found nothing to cut."""
    registry = registry_without_slots()
    ws, other_ws, alice, session = (uuid.uuid4() for _ in range(4))
    for cut in (lambda: registry.cut(ws), lambda: registry.cut_user(alice), lambda: registry.cut_session(session),
                registry.cut_all):
        seen = registry.cuts  # as the gate notes it before its first read
        cut()
        assert await ended(await open_stream(registry, Owner(ws, session, alice, LATER, seen)))
    # Cuts of others' rights leave it be; so does a cut it was authorised after.
    seen = registry.cuts
    registry.cut(other_ws)
    registry.cut_user(uuid.uuid4())
    untouched = await open_stream(registry, Owner(ws, session, alice, LATER, seen))
    assert not untouched.done()
    assert registry.cut(ws) == 1 and await ended(untouched)
    fresh = await open_stream(registry, Owner(ws, session, alice, LATER, registry.cuts))
    assert not fresh.done()
    fresh.cancel()
    # Authorised so long ago that the cuts since are no longer all kept: cut, to be safe.
    seen = registry.cuts
    for _ in range(2000):
        registry.cut(other_ws)
    assert await ended(await open_stream(registry, Owner(ws, session, alice, LATER, seen)))


async def test_a_stream_ends_when_its_session_expires() -> None:
    registry = registry_without_slots()
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=50)
    expiring = await open_stream(registry, owner(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), soon))
    lasting = await open_stream(registry, owner(uuid.uuid4(), uuid.uuid4(), uuid.uuid4()))
    assert await ended(expiring)
    assert not lasting.done()
    lasting.cancel()


async def relay_like(registry: StreamRegistry, who: Owner, ends: list[str],
                     closing: asyncio.Event | None = None) -> asyncio.Task[None]:
    """A stream that, like the relays, asks `take_end` on its cancellation:
    a clean end is consumed (and its close code and words noted; then it
    waits for `closing`, as a relay writes its last bytes), a cut goes on
    as a cancellation."""
    async def stream() -> None:
        with registry.register(who) as handle:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                ending = handle.take_end()
                if ending is None:
                    raise
                ends.append(f"{ending.close_code} {ending.close_reason.decode()}")
                if closing is not None:
                    await closing.wait()
    task = asyncio.create_task(stream())
    await asyncio.sleep(0)
    return task


async def test_every_right_that_ends_ends_its_streams_cleanly_with_its_own_words() -> None:
    """A clean end for all of them (a whole last event, a close frame),
    1008 for a right that ended, 1001 for a stop, 1013 for a replica that
    may have missed a change."""
    registry = registry_without_slots()
    ws, session, alice = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    ends: list[str] = []
    cuts = [lambda: registry.cut(ws), lambda: registry.cut_session(session), lambda: registry.cut_user(alice),
            registry.cut_all, registry.end_all]
    for cut in cuts:
        task = await relay_like(registry, Owner(ws, session, alice, LATER, registry.cuts), ends)
        cut()
        assert await asyncio.wait_for(task, 1) is None  # type: ignore[func-returns-value]
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=50)
    registry.closing = False
    assert await asyncio.wait_for(await relay_like(registry, Owner(ws, session, alice, soon, registry.cuts), ends),  # type: ignore[func-returns-value]
                                  5) is None
    assert ends == ["1008 the workspace's access changed; reconnect", "1008 the session ended; sign in again",
                    "1008 the account changed; sign in again", "1013 the gateway must check access again; reconnect",
                    "1001 the gateway is shutting down; reconnect", "1008 the session expired; sign in again"]


async def test_a_right_that_ends_during_a_stops_end_replaces_its_words() -> None:
    """A revocation and the shutdown's `end_all` in the same loop
    iteration, in either order: the client is told its right ended (it
    must not be answered 503 as if it could retry elsewhere)."""
    registry = registry_without_slots()
    ws, session, alice = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    ends: list[str] = []
    task = await relay_like(registry, owner(ws, session, alice), ends)
    registry.end_all()
    assert registry.cut_session(session) == 1
    await asyncio.wait_for(task, 1)
    registry.closing = False
    task = await relay_like(registry, Owner(ws, session, alice, LATER, registry.cuts), ends)
    registry.cut_session(session)
    registry.end_all()
    await asyncio.wait_for(task, 1)
    assert ends == ["1008 the session ended; sign in again"] * 2


async def test_a_clean_end_that_does_not_finish_in_time_is_a_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """An event that never completes, a client that never reads: the end
    becomes a cut at the deadline, its connection aborted."""
    monkeypatch.setattr(streams, "CLEAN_END_SECONDS", 0.05)
    registry = registry_without_slots()
    ws, session, alice = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    ends: list[str] = []
    stuck = await relay_like(registry, owner(ws, session, alice), ends, closing=asyncio.Event())
    finishing = asyncio.Event()
    finishes = await relay_like(registry, owner(ws, uuid.uuid4(), alice), ends, closing=finishing)
    registry.cut(ws)
    await asyncio.sleep(0)
    finishing.set()
    assert await asyncio.wait_for(finishes, 1) is None  # type: ignore[func-returns-value]
    assert await asyncio.wait_for(ended(stuck), 1)
    assert len(ends) == 2


class Slots:
    """Stands in for StreamSlots (PostgreSQL's): every slot is free at once,
    or, with `wait`, none comes until the test ends."""

    def __init__(self, wait: bool = False) -> None:
        self.wait = wait
        self.taken = 0

    @contextlib.asynccontextmanager
    async def held(self, workspace_id: uuid.UUID) -> AsyncIterator[None]:
        if self.wait:
            await asyncio.Event().wait()
        self.taken += 1
        yield


def request_with(answered_bytes: int) -> Any:
    """What `track` reads of a request: how much of its answer has gone out (and no connection to abort)."""
    return SimpleNamespace(writer=SimpleNamespace(output_size=answered_bytes), transport=None)


async def opening(registry: StreamRegistry, who: Owner, answered_bytes: int = 0) -> asyncio.Task[None]:
    """A stream that is still opening (awaiting its token, or the API
    server's head or 101) and does not take a clean end itself: only a
    relay loop, once its answer runs, does."""
    async def stream() -> None:
        async with registry.track(who, request_with(answered_bytes)):
            await asyncio.Event().wait()
    task = asyncio.create_task(stream())
    await asyncio.sleep(0)
    return task


async def test_a_stream_the_shutdown_ends_before_its_answer_began_is_the_drains_503() -> None:
    """A stream ended while it opens has no answer to end cleanly: it is
    answered 503 `shutting_down` as any request the drain refuses, not cut
    without an answer; so is one opened after the shutdown's `end_all`."""
    slots = Slots()
    registry = StreamRegistry(Metrics(), slots)  # type: ignore[arg-type]
    ws, session, alice = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    while_opening = await opening(registry, owner(ws, session, alice))
    registry.end_all()
    with pytest.raises(ShuttingDown):
        await while_opening
    with pytest.raises(ShuttingDown):
        await (await opening(registry, Owner(ws, session, alice, LATER, registry.cuts)))
    assert slots.taken == 1  # the later one was refused before it took a slot


async def test_a_stream_ended_while_waiting_for_its_slot_is_the_drains_503() -> None:
    registry = StreamRegistry(Metrics(), Slots(wait=True))  # type: ignore[arg-type]
    waiting = await opening(registry, owner(uuid.uuid4(), uuid.uuid4(), uuid.uuid4()))
    registry.end_all()
    with pytest.raises(ShuttingDown):
        await waiting


async def test_a_cut_while_opening_or_an_end_after_the_answer_began_stays_a_cancellation() -> None:
    """A cut sends nothing more to a client whose right ended; and once an
    answer has begun (an end the relay loop did not take: its headers still
    going out), no 503 can follow it."""
    registry = StreamRegistry(Metrics(), Slots())  # type: ignore[arg-type]
    ws, session, alice = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    cut = await opening(registry, owner(ws, session, alice))
    registry.cut(ws)
    assert await ended(cut)
    answered = await opening(registry, Owner(ws, session, alice, LATER, registry.cuts), answered_bytes=1)
    registry.end_all()
    assert await ended(answered)
