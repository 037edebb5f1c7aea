"""The cluster's audit log, kept: each batch the API server's webhook sends
is read (provisioning.cluster_events, pure) and stored
(provisioning.db.cluster_events) before it is answered, and events older
than the retention (and the proxy's token records expired as long ago) are
swept by every replica.

Why the batch is stored before the answer rather than queued: the API
server keeps a batch only until it is answered. An answer of 2xx for rows
still in memory would lose them with the replica; a refusal (503) is
retried by the API server (five times, 10 s apart and growing), so a
database outage shorter than about two minutes loses nothing.
"""

from __future__ import annotations

import asyncio
import json

from provisioning.background import Periodic
from provisioning.cluster_events import ClusterEvent, NotAnEventList, parse_event_list
from provisioning.db import cluster_events as cluster_event_rows
from provisioning.db import proxy_tokens as proxy_token_rows
from provisioning.db.pool import Database
from provisioning.errors import BadRequest

RETENTION_SWEEP_INTERVAL_SECONDS = 3600.0
# Read on a worker thread past this size: a big batch parsed on the event
# loop would hold every proxied request behind it.
_PARSE_INLINE_BYTES = 64 * 1024


def _read(body: bytes) -> list[ClusterEvent]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the body must be an audit.k8s.io/v1 EventList in JSON", code="invalid_event_list") from None
    try:
        return parse_event_list(document)
    except NotAnEventList as refused:
        raise BadRequest(str(refused), code="invalid_event_list") from None


async def ingest(db: Database, body: bytes) -> tuple[int, int]:
    """Store one batch: (events read, events newly kept). BadRequest when the
    body is no EventList; DatabaseUnavailable when it cannot be stored."""
    events = _read(body) if len(body) <= _PARSE_INLINE_BYTES else await asyncio.to_thread(_read, body)
    kept = await cluster_event_rows.store(db, events)
    return len(events), kept


class RetentionSweeper(Periodic):
    """Deletes cluster events older than `retention_days`, every `interval`
    seconds, on every replica (two deleting the same rows is harmless), in
    batches so no one statement holds the table long."""

    def __init__(self, db: Database, retention_days: int, *,
                 interval: float = RETENTION_SWEEP_INTERVAL_SECONDS) -> None:
        super().__init__("tenant-gateway-cluster-event-retention", self.sweep_once, interval,
                         done="old cluster events swept")
        self._db, self._days = db, retention_days

    async def sweep_once(self, batch: int = 10_000) -> int:
        """Events older than the retention, and the proxy's tokens expired
        longer ago than that (nothing kept can name them any more)."""
        total = 0
        for sweep in (cluster_event_rows.sweep, proxy_token_rows.sweep):
            deleted = batch
            while deleted == batch:
                deleted = await sweep(self._db, self._days, batch)
                total += deleted
        return total
