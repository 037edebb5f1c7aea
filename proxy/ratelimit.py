"""Rate limits held in PostgreSQL so that they hold across replicas.

Keys are built from the authenticated user id or the resolved client address,
never from a client-chosen header. The arithmetic is a fixed window: the
database counts, `retry_after` decides.
"""

from __future__ import annotations

import math

from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import RateLimited
from proxy.metrics import Metrics
from proxy.settings import RateLimit


def retry_after(hits: int, seconds_left: float, limit: RateLimit) -> int | None:
    """Seconds to wait, or None when this hit is within the limit."""
    if hits <= limit.limit:
        return None
    return max(1, math.ceil(seconds_left))


async def enforce(db: Database, metrics: Metrics, name: str, subject: str, limit: RateLimit) -> None:
    hits, seconds_left = await repo.count_hit(db, f"{name}:{subject}", limit.window_seconds)
    wait = retry_after(hits, seconds_left, limit)
    if wait is not None:
        metrics.rate_limited.labels(limit=name).inc()
        raise RateLimited(wait, f"too many {name} requests; retry in {wait} s")
