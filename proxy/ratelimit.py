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


async def enforce(db: Database, metrics: Metrics, limit: RateLimit, subjects: dict[str, str]) -> None:
    """Count this request against each named limit (name -> subject) and
    refuse it if any is exceeded, with the longest wait among them."""
    keys = {f"{name}:{subject}": name for name, subject in subjects.items()}
    counted = await repo.count_hits(db, list(keys), limit.window_seconds)
    exceeded = {keys[key]: wait for key, (hits, seconds_left) in counted.items()
                if (wait := retry_after(hits, seconds_left, limit)) is not None}
    if exceeded:
        name = max(exceeded, key=lambda n: exceeded[n])
        metrics.rate_limited.labels(limit=name).inc()
        raise RateLimited(exceeded[name], f"too many {name} requests; retry in {exceeded[name]} s")
