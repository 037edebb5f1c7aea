"""The SQL of the proxy's own tokens (migration 0017): each token the proxy's
cache mints is recorded by its `jti` with the person it was minted for, so
the cluster's audit events made with it are joined to that person
(provisioning.db.cluster_events). Never the token itself.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from provisioning.db.pool import Database


@dataclass(frozen=True)
class ProxyToken:
    """Who a proxy token acts for, as recorded."""

    jti: str
    cluster: str
    user_id: uuid.UUID
    namespace: str
    """The workspace's namespace: the row names the workspace it belongs to."""
    service_account: str
    expires_at: datetime.datetime


async def record(db: Database, token: ProxyToken) -> bool:
    """Record a freshly minted token; False when its workspace is gone (then
    nothing it does can be joined to anyone, and the token must not be used)."""
    row = await db.fetchrow(
        """INSERT INTO proxy_tokens (jti, cluster, user_id, workspace_id, service_account, expires_at)
           SELECT $1, $2, $3, w.id, $5, $6 FROM workspaces w WHERE w.k8s_namespace = $4 AND w.cluster = $2
           RETURNING workspace_id""",
        token.jti, token.cluster, token.user_id, token.namespace, token.service_account, token.expires_at)
    return row is not None


async def sweep(db: Database, retention_days: int, batch: int = 10_000) -> int:
    """Delete up to `batch` tokens expired more than the retention ago (the
    events they explain are kept that long); the number deleted."""
    status = await db.fetchrow(
        """WITH old AS (
               DELETE FROM proxy_tokens WHERE (jti, cluster) IN (
                   SELECT jti, cluster FROM proxy_tokens WHERE expires_at < now() - make_interval(days => $1)
                   ORDER BY expires_at LIMIT $2)
               RETURNING 1)
           SELECT count(*) AS deleted FROM old""", retention_days, batch)
    return int(status["deleted"]) if status else 0
