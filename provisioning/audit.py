"""Batched audit writes for proxied traffic.

Proxied writes and exec/attach/port-forward sessions are recorded with the
human behind them (the cluster's own audit log only sees the tenant
ServiceAccount). Waiting for a row per request would put a database round
trip on the proxy's hot path, so rows are queued and written in batches a few
times a second, retried while the database is away, and flushed on shutdown.
Rows that must exist before what they record may happen (a credential
issued, an exec session opened) do not wait for a batch: `write_now`
commits them, and a database that will not take them fails the request.
"""

from __future__ import annotations

import asyncio
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

    async def stop(self) -> None:
        """Stop the writer and write what is queued; rows the database will
        not take now are reported, not silently dropped."""
        await cancel_and_wait(self._task)
        try:
            while not self._queue.empty():
                await self.flush()
        except Exception:
            log.error("audit rows not written at shutdown", exc_info=True, extra={"queued": self._queue.qsize()})

    async def flush(self) -> None:
        batch: list[AuditEvent] = []
        while not self._queue.empty() and len(batch) < 1000:
            batch.append(self._queue.get_nowait())
        if not batch:
            return
        try:
            await repo.record_audit_batch(self._db, batch)
        except DatabaseUnavailable:
            for event in batch:  # keep them for the next round
                self.enqueue(event)
            raise

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
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
