"""Rate limits held in PostgreSQL so that they hold across replicas.

Keys are built from the authenticated user id or the resolved client address,
never from a client-chosen header. The arithmetic is a fixed window: the
database counts, `retry_after` decides. Some keys are partly the client's
choice (login counts per email too), so two things keep the table from
growing without bound: a key of that kind is counted only while the
client's address is within its limit (`enforce`'s `gated`), and every
replica's `CounterSweeper` removes counters whose window has ended.
"""

from __future__ import annotations

import logging
import math
from typing import Mapping

from provisioning.background import Periodic
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import RateLimited
from proxy.http.metrics import Metrics
from proxy.settings import RateLimit

log = logging.getLogger(__name__)

# A counter outlives its window by at most this; its row is a few dozen bytes.
SWEEP_INTERVAL_SECONDS = 60.0
# Rows removed per statement, and statements per sweep: each statement is
# short (an index range and its deletes), and a sweep of a table an attacker
# has filled still ends.
_SWEEP_BATCH = 5000
_SWEEP_STATEMENTS = 20


def retry_after(hits: int, seconds_left: float, limit: RateLimit) -> int | None:
    """Seconds to wait, or None when this hit is within the limit."""
    if hits <= limit.limit:
        return None
    return max(1, math.ceil(seconds_left))


async def enforce(db: Database, metrics: Metrics, limit: RateLimit, subjects: Mapping[str, str],
                  gated: Mapping[str, str] | None = None) -> None:
    """Count this request against each named limit (name -> subject) and
    refuse it if any is exceeded, with the longest wait among them.

    `gated` limits (name -> subject) are counted only while every one of
    `subjects` is within the limit: pass there the keys a client picks
    (an email), and the address in `subjects`."""
    keys = {f"{name}:{subject}": name for name, subject in subjects.items()}
    gated_keys = {f"{name}:{subject}": name for name, subject in (gated or {}).items()}
    counted = await repo.count_hits(db, list(keys), limit.window_seconds, gated_keys=list(gated_keys),
                                    limit=limit.limit)
    names = {**gated_keys, **keys}
    exceeded = {names[key]: wait for key, (hits, seconds_left) in counted.items()
                if (wait := retry_after(hits, seconds_left, limit)) is not None}
    if exceeded:
        name = max(exceeded, key=lambda n: exceeded[n])
        metrics.rate_limited.labels(limit=name).inc()
        raise RateLimited(exceeded[name], f"too many {name} requests; retry in {exceeded[name]} s")


class CounterSweeper(Periodic):
    """Removes counters whose window has ended, every `interval` seconds.

    Every replica runs one; sweeps skip the rows anyone else holds, so
    replicas never wait on each other or on a request."""

    def __init__(self, db: Database, *, interval: float = SWEEP_INTERVAL_SECONDS) -> None:
        super().__init__("tenant-gateway-rate-limit-sweep", self.sweep, interval,
                         done="ended rate-limit windows removed")
        self._db = db

    async def sweep(self) -> int:
        """How many counters went."""
        removed = 0
        for _ in range(_SWEEP_STATEMENTS):
            batch = await repo.sweep_rate_limits(self._db, _SWEEP_BATCH)
            removed += batch
            if batch < _SWEEP_BATCH:
                break
        return removed
