"""The per-workspace cap on open streams, across replicas.

Each open stream (watch, logs, exec, attach, port-forward) holds an upstream
connection, a TLS session on both legs and a watcher in the API server, so a
workspace may hold at most `maximum` at once, counted over every replica:
behind a load balancer, a cap per replica would be a cap times the replicas.

Each stream takes a row in PostgreSQL (repositories.take_stream_slot) before
anything is opened upstream; one more than the cap is 429, and nothing is
cut. Its row goes when it ends. A replica beats every BEAT_SECONDS, which
also rewrites its rows to exactly the streams it holds: a release lost to a
database outage, or a beat that overlapped an open or a close, is put right
at the next beat. A replica that stops beating (a crash) stops counting
after LAPSE_SECONDS, and the next beat of another replica removes its rows.
With the database unreachable, a stream cannot open (503): the cap fails
closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import AsyncIterator

from provisioning.background import cancel_and_wait
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import RateLimited
from proxy.metrics import Metrics

log = logging.getLogger(__name__)

# Often enough that a crashed replica's streams free their workspace's slots
# within half a minute; a beat is one short transaction per replica.
BEAT_SECONDS = 5.0
LAPSE_SECONDS = 20.0
# A stream ends when a client closes it; a moment is a fair guess at when one will.
_RETRY_AFTER_SECONDS = 5


class StreamSlots:
    def __init__(self, maximum: int, metrics: Metrics, *, beat_seconds: float = BEAT_SECONDS,
                 lapse_seconds: float = LAPSE_SECONDS) -> None:
        self.replica_id = uuid.uuid4()
        self._maximum = maximum
        self._metrics = metrics
        self._beat_seconds, self._lapse_seconds = beat_seconds, lapse_seconds
        self._held: dict[uuid.UUID, uuid.UUID] = {}  # slot -> workspace
        self._db: Database | None = None
        self._beating: asyncio.Task[None] | None = None
        self._releasing: set[asyncio.Task[None]] = set()

    async def start(self, db: Database) -> None:
        """Count this replica in (a failure here fails the start), then beat."""
        self._db = db
        await repo.replica_beat(db, self.replica_id, {}, self._lapse_seconds)
        self._beating = asyncio.create_task(self._beat())

    async def stop(self, timeout: float) -> None:
        """At shutdown, once every stream is cut: this replica's rows go at
        once. Bounded by `timeout`: the others drop them once it has lapsed."""
        deadline = asyncio.get_running_loop().time() + timeout
        await cancel_and_wait(self._beating, timeout)
        if self._db is None:
            return
        try:
            async with asyncio.timeout_at(deadline):
                await repo.replica_gone(self._db, self.replica_id)
        except Exception:
            log.warning("could not remove this replica's stream slots; they lapse in %ss", self._lapse_seconds)

    @contextlib.asynccontextmanager
    async def held(self, workspace_id: uuid.UUID) -> AsyncIterator[None]:
        """One of the workspace's slots, for as long as the block runs; 429
        if every slot is taken."""
        assert self._db is not None, "StreamSlots.start first"
        slot = uuid.uuid4()
        if not await repo.take_stream_slot(self._db, slot, workspace_id, self.replica_id, self._maximum,
                                           self._lapse_seconds):
            self._refuse()
        self._held[slot] = workspace_id
        try:
            yield
        finally:
            del self._held[slot]
            # Not awaited here: a cut stream's cancellation must not wait on
            # the database. A release that fails is the next beat's to do.
            releasing = asyncio.ensure_future(self._release(slot))
            self._releasing.add(releasing)
            releasing.add_done_callback(self._releasing.discard)

    async def require_room(self, workspace_id: uuid.UUID) -> None:
        """429 if the workspace holds every slot already (takes none)."""
        assert self._db is not None, "StreamSlots.start first"
        if await repo.count_stream_slots(self._db, workspace_id, self._lapse_seconds) >= self._maximum:
            self._refuse()

    def _refuse(self) -> None:
        self._metrics.rate_limited.labels(limit="streams").inc()
        raise RateLimited(_RETRY_AFTER_SECONDS, f"this workspace already has {self._maximum} open streams "
                                                "(watch, logs, exec, attach, port-forward); close one first")

    async def _release(self, slot: uuid.UUID) -> None:
        assert self._db is not None
        try:
            await repo.release_stream_slots(self._db, [slot])
        except Exception:
            log.debug("stream slot release deferred to the next beat", exc_info=True)

    async def _beat(self) -> None:
        assert self._db is not None
        while True:
            await asyncio.sleep(self._beat_seconds)
            try:
                await repo.replica_beat(self._db, self.replica_id, dict(self._held), self._lapse_seconds)
            except Exception:
                log.warning("stream slots: this replica's beat failed; retrying in %ss", self._beat_seconds)
