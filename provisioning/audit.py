"""Audit rows of proxied writes, written in batches, never dropped.

Proxied writes are recorded with the human behind them (the cluster's own
audit log only sees the tenant ServiceAccount). A database round trip per
request would sit on the proxy's hot path, so rows are queued and written
in batches (one COPY each, two at once) as fast as the database takes them.

The queue is bounded (provisioning.audit_queue): a request takes a place
*before* its write goes upstream (`reserve`) and fills it with its row once
the API server has answered. When the writer is behind, or the database is
away, a request waits for a place, then is refused (AuditUnavailable, 503)
without reaching the API server: no write proceeds unless its row has room.
A filled row is kept until the database takes it: retried while the
database is away, and at shutdown retried until the shutdown's bound, after
which it is written to the log, whole, as the record of last resort. A row
the database refuses (not a batch: its rows are written apart until the one
refused is alone) is stored in a form it takes, or else logged whole.

Rows that must exist before what they record may happen (a credential
issued, an exec session opened) do not wait for a batch: `write_now`
commits them, and a database that will not take them fails the request.
"""

from __future__ import annotations

import asyncio
import logging
import math

from provisioning.audit_queue import AuditQueue, Place
from provisioning.background import cancel_and_wait
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import AuditUnavailable, DatabaseUnavailable
from provisioning.models import AuditEvent

log = logging.getLogger(__name__)


def storable(event: AuditEvent) -> AuditEvent:
    """The form of a row PostgreSQL refused (a NUL in its details, which
    jsonb cannot hold; an address inet cannot read): the same action and
    people, with the address and details kept as escaped text (ascii()
    has no NUL and no character the database could refuse)."""
    return AuditEvent(event.action, event.user_id, event.workspace_id, None,
                      {"unstorable": ascii({"ip_address": event.ip_address, "details": event.details})})


def _log_whole(event: AuditEvent, why: str) -> None:
    """The record of last resort: the row, whole, in the log."""
    log.error("audit row not written (%s); recorded here instead", why,
              extra={"audit": {"action": event.action, "user_id": event.user_id,
                               "workspace_id": event.workspace_id, "ip_address": event.ip_address,
                               "details": event.details}})


class _Unwritten(Exception):
    """The database went away part-way: these rows are still to write."""

    def __init__(self, rows: list[AuditEvent]) -> None:
        super().__init__(f"{len(rows)} audit rows not written")
        self.rows = rows


class AuditWriter:
    def __init__(self, db: Database, *, capacity: int = 20_000, wait_seconds: float = 2.0,
                 batch_rows: int = 2_000, retry_seconds: float = 0.25, writers: int = 2) -> None:
        self._db = db
        self.queue = AuditQueue(capacity)
        self._wait = wait_seconds
        self._batch_rows = batch_rows
        self._retry = retry_seconds
        self._writers = writers
        """Batches written at once, each on its own connection: while
        PostgreSQL stores one, the next is encoded (and a second core may
        store it)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.rows_written = 0
        """Rows the database took (batched rows only; `write_now` commits its own)."""
        self.rows_logged = 0
        """Rows the database would not take, written to the log instead."""

    async def reserve(self) -> Place:
        """Room for one row, taken before the action it records: waited for
        up to `wait_seconds`, then AuditUnavailable (503, Retry-After)."""
        place = self.queue.try_reserve() or await self.queue.reserve(self._wait)
        if place is None:
            raise AuditUnavailable(max(1, math.ceil(self._wait)))
        return place

    async def write_now(self, event: AuditEvent) -> None:
        """Commit one row before going on; DatabaseUnavailable if it cannot be."""
        await repo.record_audit(self._db, event)

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(), name=f"tenant-gateway-audit-{n}")
                       for n in range(self._writers)]

    async def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued, retrying for up to `timeout`; rows the
        database did not take by then are logged whole. Places filled
        after this are logged at once: there is no writer left."""
        self._stopping.set()
        if self._tasks:
            # A batch being written finishes rather than being cut off (it
            # would be queued again and perhaps written twice).
            _, running = await asyncio.wait(self._tasks, timeout=timeout)
            # Cut off at the bound; briefly, should a library swallow the cancellation.
            await asyncio.gather(*(cancel_and_wait(task, 1.0) for task in running))
        self.queue.close(lambda event: self._lost(event, "the audit writer had stopped"))
        for event in self.queue.take(self.queue.queued):
            self._lost(event, "database unavailable at shutdown")

    def _lost(self, event: AuditEvent, why: str) -> None:
        _log_whole(event, why)
        self.rows_logged += 1
        self.queue.done(1)

    async def _run(self) -> None:
        queue = self.queue
        while True:
            if not queue.queued:
                if self._stopping.is_set():
                    return
                await _first_of(queue.has_rows, self._stopping)
                continue
            batch = queue.take(self._batch_rows)
            try:
                await self._store(batch)
            except _Unwritten as unwritten:
                queue.put_back(unwritten.rows)
                log.warning("the audit database is unavailable; will retry", extra={"queued": queue.queued})
                await asyncio.sleep(self._retry)

    async def _store(self, batch: list[AuditEvent]) -> None:
        """Write `batch`, giving back each row's place once it is stored. A
        batch the database refuses is halved until the refused row is alone
        (the others are written); that row is stored as `storable` makes
        it, or logged. If the database goes away part-way, _Unwritten with
        the rows still to write; if the writer is cancelled (the stop's
        deadline), those rows are put back first."""
        parts = [batch]  # a stack: the next part to write is last
        while parts:
            part = parts.pop()
            try:
                try:
                    await repo.record_audit_batch(self._db, part)
                except DatabaseUnavailable:
                    raise
                except Exception as refused:
                    if len(part) > 1:
                        middle = len(part) // 2
                        parts += (part[middle:], part[:middle])
                    else:
                        await self._store_refused(part[0], refused)
                    continue
            except (DatabaseUnavailable, asyncio.CancelledError) as error:
                left = [row for rest in (part, *reversed(parts)) for row in rest]
                if isinstance(error, DatabaseUnavailable):
                    raise _Unwritten(left) from error
                # Cut off mid-write: the rows may have been written; twice beats never.
                self.queue.put_back(left)
                raise
            self.rows_written += len(part)
            self.queue.done(len(part))

    async def _store_refused(self, event: AuditEvent, refused: Exception) -> None:
        """A row the database refused on its own: in a form it takes, or in
        the log; its place is given back either way. DatabaseUnavailable
        goes up (the row is kept and retried)."""
        try:
            await repo.record_audit_batch(self._db, [storable(event)])
        except DatabaseUnavailable:
            raise
        except Exception:
            self._lost(event, f"the database refused it: {type(refused).__name__}")
            return
        log.warning("an audit row the database refused (%s) was stored as escaped text",
                    type(refused).__name__, extra={"action": event.action})
        self.rows_written += 1
        self.queue.done(1)


async def _first_of(*events: asyncio.Event) -> None:
    """Until one of `events` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
