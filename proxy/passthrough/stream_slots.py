"""The per-workspace cap on open streams, across replicas.

Each open stream (watch, logs, exec, attach, port-forward) holds an upstream
connection, a TLS session on both legs and a watcher in the API server, so a
workspace may hold at most `maximum` at once, counted over every replica:
behind a load balancer, a cap per replica would be a cap times the replicas.

Each stream takes a row in PostgreSQL (repositories.take_stream_slot) before
anything is opened upstream; one more than the cap is 429, and nothing is
cut. A replica that holds the maximum itself refuses without asking the
database. The row goes when the stream ends; a release the database did not
take (it was down) is retried at each beat until it does.

Every BEAT_SECONDS a replica says it is alive (repositories.replica_beat). A
replica that has not said so for LAPSE_SECONDS is taken for crashed by the
next live one to beat, which removes it and its rows; if it was alive after
all (cut off from the database), its next beat puts its rows back. With the
database unreachable a stream cannot open (503): the cap fails closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from typing import AsyncIterator

from provisioning.background import cancel_and_wait
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import RateLimited
from proxy.http.metrics import Metrics

log = logging.getLogger(__name__)

# Often enough that a crashed replica's streams free their workspace's slots
# within half a minute; a beat is one short transaction per replica.
BEAT_SECONDS = 5.0
LAPSE_SECONDS = 20.0
# How long a stream's open waits for others of its workspace being opened at
# the same moment before it is refused: a flood of opens must not hold the
# database pool.
_WAIT_SECONDS = 2.0
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
        self._here: Counter[uuid.UUID] = Counter()  # workspace -> slots held or being taken here
        self._unreleased: set[uuid.UUID] = set()  # rows to remove at the next beat
        self._in_beat = False
        self._db: Database | None = None
        self._beating: asyncio.Task[None] | None = None
        self._releasing: set[asyncio.Task[None]] = set()

    async def start(self, db: Database) -> None:
        """Count this replica in (a failure here fails the start), then beat."""
        self._db = db
        await repo.replica_beat(db, self.replica_id, {}, [], self._lapse_seconds)
        self._beating = asyncio.create_task(self._beat())

    async def stop(self, timeout: float) -> None:
        """At shutdown, once every stream is cut: this replica's rows go at
        once. Bounded by `timeout`: the others remove them once it has lapsed."""
        deadline = asyncio.get_running_loop().time() + timeout
        await cancel_and_wait(self._beating, timeout)
        if self._db is None:
            return
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.gather(*self._releasing, return_exceptions=True)
                await repo.replica_gone(self._db, self.replica_id)
        except Exception:
            log.warning("could not remove this replica's stream slots; they lapse in %ss", self._lapse_seconds)

    @contextlib.asynccontextmanager
    async def held(self, workspace_id: uuid.UUID) -> AsyncIterator[None]:
        """One of the workspace's slots, for as long as the block runs; 429
        if every slot is taken."""
        assert self._db is not None, "StreamSlots.start first"
        if self._here[workspace_id] >= self._maximum:
            self._refuse()
        slot = uuid.uuid4()
        self._here[workspace_id] += 1
        try:
            try:
                taken = await repo.take_stream_slot(self._db, slot, workspace_id, self.replica_id,
                                                    self._maximum, _WAIT_SECONDS)
            except BaseException:
                # The transaction may have committed before its answer was
                # lost (or before a cut cancelled the wait): the next beat
                # removes the row if it is there.
                self._unreleased.add(slot)
                raise
            if not taken:
                self._refuse()
            self._held[slot] = workspace_id
            try:
                yield
            finally:
                del self._held[slot]
                self._release_soon(slot)
        finally:
            self._here[workspace_id] -= 1
            if not self._here[workspace_id]:
                del self._here[workspace_id]

    async def require_room(self, workspace_id: uuid.UUID) -> None:
        """429 if the workspace holds every slot already (takes none)."""
        assert self._db is not None, "StreamSlots.start first"
        if self._here[workspace_id] >= self._maximum or \
                await repo.count_stream_slots(self._db, workspace_id) >= self._maximum:
            self._refuse()

    def _refuse(self) -> None:
        self._metrics.rate_limited.labels(limit="streams").inc()
        raise RateLimited(_RETRY_AFTER_SECONDS, f"this workspace already has {self._maximum} open streams "
                                                "(watch, logs, exec, attach, port-forward); close one first")

    def _release_soon(self, slot: uuid.UUID) -> None:
        """Not awaited: a cut stream's cancellation must not wait on the
        database. A beat under way may put the row back (it restores what
        it read as held): the next one removes it again."""
        if self._in_beat:
            self._unreleased.add(slot)
        releasing = asyncio.ensure_future(self._release(slot))
        self._releasing.add(releasing)
        releasing.add_done_callback(self._releasing.discard)

    async def _release(self, slot: uuid.UUID) -> None:
        assert self._db is not None
        try:
            await repo.release_stream_slots(self._db, [slot])
        except Exception:
            self._unreleased.add(slot)

    async def _beat(self) -> None:
        assert self._db is not None
        while True:
            await asyncio.sleep(self._beat_seconds)
            released = list(self._unreleased)
            self._in_beat = True
            try:
                await repo.replica_beat(self._db, self.replica_id, dict(self._held), released, self._lapse_seconds)
            except Exception:
                log.warning("stream slots: this replica's beat failed; retrying in %ss", self._beat_seconds)
            else:
                self._unreleased.difference_update(released)
            finally:
                self._in_beat = False
