"""Batched audit writes for proxied traffic.

Proxied writes and exec/attach/port-forward sessions are recorded with the
human behind them (the cluster's own audit log only sees the tenant
ServiceAccount). Waiting for a row per request would put a database round
trip on the proxy's hot path, so rows are queued and written in batches a few
times a second, retried while the database is away, and flushed on shutdown:
retried until the shutdown's bound, so a database that is restarting still
gets them. A row the database never took is written to the log, whole, as
the record of last resort: an accepted row is never dropped silently.
Rows that must exist before what they record may happen (a credential
issued, an exec session opened) do not wait for a batch: `write_now`
commits them, and a database that will not take them fails the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from provisioning.background import cancel_and_wait
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import DatabaseUnavailable
from provisioning.models import AuditEvent

log = logging.getLogger(__name__)


class AuditWriter:
    def __init__(self, db: Database, *, interval: float = 0.25, max_queue: int = 100_000) -> None:
        self._db = db
        self._interval = interval
        self._queue: asyncio.Queue[AuditEvent] = asyncio.Queue(maxsize=max_queue)
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def enqueue(self, event: AuditEvent) -> None:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            log.error("audit queue full; dropping a proxied-write audit row", extra={"action": event.action})

    async def write_now(self, event: AuditEvent) -> None:
        """Commit one row before going on; DatabaseUnavailable if it cannot be."""
        await repo.record_audit(self._db, event)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tenant-gateway-audit")

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop the writer and write what is queued, retrying for up to
        `timeout`; rows the database did not take by then are logged whole."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # Let a batch being written finish rather than cancel it half-way
        # (it would be queued again and written twice).
        self._stopping.set()
        if self._task is not None and not (await asyncio.wait({self._task}, timeout=timeout))[0]:
            await cancel_and_wait(self._task, max(0.1, deadline - loop.time()))
        while not self._queue.empty():
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self.flush(), left)
            except (DatabaseUnavailable, asyncio.TimeoutError):
                await asyncio.sleep(min(self._interval, max(0.0, deadline - loop.time())))
            except Exception:
                log.exception("an audit batch could not be written at shutdown", extra={"queued": self._queue.qsize()})
                break
        self._log_unwritten()

    def _log_unwritten(self) -> None:
        while not self._queue.empty():
            event = self._queue.get_nowait()
            log.error("audit row not written (database unavailable at shutdown); recorded here instead",
                      extra={"audit": {"action": event.action, "user_id": event.user_id,
                                       "workspace_id": event.workspace_id, "ip_address": event.ip_address,
                                       "details": event.details}})

    async def flush(self) -> None:
        batch: list[AuditEvent] = []
        while not self._queue.empty() and len(batch) < 1000:
            batch.append(self._queue.get_nowait())
        if not batch:
            return
        try:
            await repo.record_audit_batch(self._db, batch)
        except (DatabaseUnavailable, asyncio.CancelledError):
            # Kept for the next round. A batch cut off by a shutdown deadline
            # may be written twice; that beats losing it.
            for event in batch:
                self.enqueue(event)
            raise

    async def _run(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval)
            if self._stopping.is_set():
                return  # stop() writes the rest
            try:
                await self.flush()
            except DatabaseUnavailable:
                log.warning("audit flush failed; will retry", extra={"queued": self._queue.qsize()})
            except Exception:
                # Any other failure is this batch's own (retrying it would
                # block every later row) and must not end the writer: later
                # proxied writes would go unrecorded.
                log.exception("an audit batch could not be written and was dropped",
                              extra={"queued": self._queue.qsize()})
