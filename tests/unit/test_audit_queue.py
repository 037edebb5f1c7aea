"""The audit queue's places (provisioning.audit_queue) and the storable form
of a refused row (provisioning.audit.storable): no I/O, tested directly.

The property: a place is taken before an action, held until its row is
stored, and given back exactly once; when none is free a reservation waits
in line and, if none comes in time, is refused, so the caller refuses the
action instead of doing it unaudited."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from provisioning.audit import storable
from provisioning.audit_queue import AuditQueue, Place
from provisioning.models import AuditEvent


def row(n: int) -> AuditEvent:
    return AuditEvent("ProxyWrite", None, None, None, {"n": n})


def full(queue: AuditQueue) -> list[Place]:
    places = []
    while (place := queue.try_reserve()) is not None:
        places.append(place)
    return places


def test_no_more_places_than_the_capacity() -> None:
    queue = AuditQueue(3)
    assert len(full(queue)) == 3
    assert queue.taken == 3 and queue.try_reserve() is None


def test_a_filled_place_stays_taken_until_its_row_is_done() -> None:
    queue = AuditQueue(2)
    place = queue.try_reserve()
    assert place is not None
    place.fill(row(1))
    assert queue.queued == 1 and queue.has_rows.is_set()
    assert queue.take(10) == [row(1)]
    assert queue.taken == 1 and not queue.has_rows.is_set()  # taken by the writer, not stored yet
    queue.done(1)
    assert queue.taken == 0


def test_a_place_is_filled_or_cancelled_once() -> None:
    queue = AuditQueue(2)
    place = queue.try_reserve()
    assert place is not None
    place.cancel()
    place.cancel()
    place.fill(row(1))
    assert queue.taken == 0 and queue.queued == 0
    other = queue.try_reserve()
    assert other is not None
    other.fill(row(2))
    other.fill(row(3))
    other.cancel()
    assert queue.take(10) == [row(2)] and queue.taken == 1


def test_rows_put_back_are_taken_first_in_their_order() -> None:
    queue = AuditQueue(10)
    for n in range(5):
        place = queue.try_reserve()
        assert place is not None
        place.fill(row(n))
    batch = queue.take(3)
    assert batch == [row(0), row(1), row(2)]
    queue.put_back(batch[1:])
    assert queue.take(10) == [row(1), row(2), row(3), row(4)]


async def test_a_reservation_waits_for_a_place_given_back() -> None:
    queue = AuditQueue(1)
    held = full(queue)
    waiting = asyncio.create_task(queue.reserve(timeout=60))
    await asyncio.sleep(0)
    assert not waiting.done()
    held[0].cancel()
    assert isinstance(await waiting, Place)
    assert queue.waits == 1 and queue.refusals == 0 and queue.taken == 1


async def test_waiters_get_places_in_arrival_order_and_newcomers_do_not_jump_the_line() -> None:
    queue = AuditQueue(2)
    held = full(queue)
    got: list[str] = []

    async def wait(name: str) -> None:
        if await queue.reserve(timeout=60) is not None:
            got.append(name)

    first = asyncio.create_task(wait("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(wait("second"))
    await asyncio.sleep(0)
    queue.done(1)
    assert queue.try_reserve() is None  # the freed place is the first waiter's
    await first
    held[1].cancel()
    await second
    assert got == ["first", "second"]


async def test_a_reservation_that_waits_in_vain_is_refused_and_counted() -> None:
    queue = AuditQueue(1)
    full(queue)
    assert await queue.reserve(timeout=0.01) is None
    assert queue.waits == 1 and queue.refusals == 1
    assert queue.taken == 1  # the refused one took nothing


async def test_a_place_given_back_after_a_refusal_is_not_lost() -> None:
    queue = AuditQueue(1)
    held = full(queue)
    assert await queue.reserve(timeout=0.01) is None
    held[0].cancel()
    assert queue.taken == 0
    assert queue.try_reserve() is not None


async def test_a_cancelled_waiter_hands_its_place_on() -> None:
    queue = AuditQueue(1)
    held = full(queue)
    cancelled = asyncio.create_task(queue.reserve(timeout=60))
    await asyncio.sleep(0)
    patient = asyncio.create_task(queue.reserve(timeout=60))
    await asyncio.sleep(0)
    held[0].cancel()  # handed to `cancelled`, which is cancelled before it runs
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert isinstance(await patient, Place)
    assert queue.taken == 1


async def test_a_closed_queue_reserves_nothing_and_hands_late_rows_over() -> None:
    queue = AuditQueue(1)
    held = full(queue)
    waiting = asyncio.create_task(queue.reserve(timeout=60))
    await asyncio.sleep(0)
    late: list[AuditEvent] = []
    queue.close(late.append)
    assert await waiting is None
    assert queue.try_reserve() is None and await queue.reserve(timeout=60) is None
    held[0].fill(row(7))  # reserved before the close: its row is not dropped
    assert late == [row(7)] and queue.queued == 0


def test_a_refused_row_keeps_its_people_and_action_in_a_form_without_nul() -> None:
    user, workspace = uuid.uuid4(), uuid.uuid4()
    event = AuditEvent("ProxyWrite", user, workspace, "not an address\x00",
                       {"path": "/api/v1/namespaces/a\x00b", "status": 201})
    kept = storable(event)
    assert (kept.action, kept.user_id, kept.workspace_id, kept.ip_address) == ("ProxyWrite", user, workspace, None)
    text = kept.details["unstorable"]
    assert "\x00" not in text and "\\x00" in text and "/api/v1/namespaces/a" in text and "201" in text
