"""The audit writer's bounded queue: places taken before an action, rows
handed over after it, places given back once the rows are stored.

An audit row of a proxied write is only known once the API server has
answered (its status), but the write must not go out unless its row is
sure to be kept. So a request takes a *place* first (`reserve`) and fills it
with its row afterwards (`Place.fill`): the place is what guarantees room,
and it stays taken until the row is stored or recorded in the log
(`done`). When every place is taken the writer is behind (or the database
is away): `reserve` waits for one to be given back, in arrival order, and
says no when none is given back in time; the caller refuses the action.

No I/O here: the writer (provisioning.audit) does the writing, and the
logic is unit-tested directly (tests/unit/test_audit_queue.py).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Callable, Iterable

from provisioning.models import AuditEvent


class Place:
    """One reserved place, filled with its row (`fill`) or given back
    unused (`cancel`), once: whichever comes first counts."""

    __slots__ = ("_queue", "_open")

    def __init__(self, queue: AuditQueue) -> None:
        self._queue = queue
        self._open = True

    def fill(self, event: AuditEvent) -> None:
        """The action happened (or may have): its row joins the queue."""
        if self._open:
            self._open = False
            self._queue._append(event)

    def cancel(self) -> None:
        """The action never happened: the place is free again, with no row."""
        if self._open:
            self._open = False
            self._queue.done(1)


class AuditQueue:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("an audit queue needs at least one place")
        self.capacity = capacity
        self._free = capacity
        self._waiting: collections.deque[asyncio.Future[bool]] = collections.deque()
        self._rows: collections.deque[AuditEvent] = collections.deque()
        self.has_rows = asyncio.Event()
        """Set while rows wait to be taken: what the writer sleeps on."""
        self.waits = 0
        """Reservations that found no free place and had to wait."""
        self.refusals = 0
        """Reservations that waited in vain: actions refused."""
        self._after_close: Callable[[AuditEvent], None] | None = None

    @property
    def taken(self) -> int:
        """Places taken: reserved, queued, or being written."""
        return self.capacity - self._free

    @property
    def queued(self) -> int:
        """Rows waiting to be taken by the writer."""
        return len(self._rows)

    @property
    def closed(self) -> bool:
        return self._after_close is not None

    def close(self, after_close: Callable[[AuditEvent], None]) -> None:
        """No writer any more: no place is reserved from now on (waiters
        are told no), and a row filled into a place reserved before is
        handed to `after_close` instead of being queued."""
        self._after_close = after_close
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(False)

    def try_reserve(self) -> Place | None:
        """A place at once if one is free and nobody waits for one before us."""
        if self._free and not self._waiting and self._after_close is None:
            self._free -= 1
            return Place(self)
        return None

    async def reserve(self, timeout: float) -> Place | None:
        """A place, waited for up to `timeout` seconds; None if none came
        (or the queue was closed meanwhile)."""
        place = self.try_reserve()
        if place is not None or self._after_close is not None:
            return place
        self.waits += 1
        # True: `done` handed us a place (taking it off `_free` for us);
        # False: the queue was closed.
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(waiter)
        except TimeoutError:
            pass
        except BaseException:
            self._forget(waiter)  # cancelled: a place handed to us goes to the next in line
            raise
        if waiter.done() and waiter.result():
            return Place(self)
        self._forget(waiter)
        self.refusals += 1
        return None

    def _forget(self, waiter: asyncio.Future[bool]) -> None:
        """A waiter that gives up: out of the line, and a place it was
        handed but will not use goes back."""
        if waiter.done():
            if waiter.result():
                self.done(1)
            return
        waiter.cancel()
        try:
            self._waiting.remove(waiter)
        except ValueError:
            pass

    def _append(self, event: AuditEvent) -> None:
        if self._after_close is not None:
            self._after_close(event)
            return
        self._rows.append(event)
        self.has_rows.set()

    def take(self, most: int) -> list[AuditEvent]:
        """Up to `most` rows, oldest first, to write. Their places stay
        taken until `done` (or they come back through `put_back`)."""
        rows = self._rows
        count = min(most, len(rows))
        batch = [rows.popleft() for _ in range(count)]
        if not rows:
            self.has_rows.clear()
        return batch

    def put_back(self, batch: Iterable[AuditEvent]) -> None:
        """Rows that could not be written now, back at the front, in order."""
        self._rows.extendleft(reversed(list(batch)))
        if self._rows:
            self.has_rows.set()

    def done(self, count: int) -> None:
        """`count` places given back (rows stored or logged, or a place
        unused): the longest waiters get them first."""
        self._free += count
        while self._free and self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                self._free -= 1
                waiter.set_result(True)
