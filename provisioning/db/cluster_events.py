"""The SQL of the cluster's audit events (migrations 0014, 0017, 0019).

A batch is written as the API server sent it, in one transaction: COPY
into a temporary table, then one INSERT that joins each event's `jti` to
the credential the gateway issued or to the token its proxy minted
(provisioning.db.proxy_tokens), and so to its person and workspace, noting
which of the two (`via`); names the workspace of an unattributed event in
a tenant namespace, drops the rest, and skips an event already stored:
the same event, by its digest (provisioning.cluster_events), never merely
the same audit id, which a client may choose to hide a request behind
another's. The same transaction moves each credential's `last_used_at`
forward. So a batch is stored whole or not at all: the API server retries
one it was refused.
"""

from __future__ import annotations

import ipaddress
from typing import Sequence

from provisioning.cluster_events import COLUMNS, ClusterEvent
from provisioning.db.pool import Database

_INCOMING = "incoming_cluster_events"
_CREATE_INCOMING = f"""
    CREATE TEMPORARY TABLE {_INCOMING} (
        audit_id_text text, event_digest bytea, stage text, time timestamptz, received_at timestamptz, verb text,
        resource text, subresource text, namespace text, name text, code integer, user_agent text, source_ip inet,
        username text, jti text
    ) ON COMMIT DROP"""
_STORE = f"""
    INSERT INTO cluster_events ({', '.join(COLUMNS)}, credential_id, user_id, workspace_id, via)
    SELECT {', '.join(f'i.{column}' for column in COLUMNS)}, c.id, COALESCE(c.user_id, p.user_id),
           COALESCE(c.workspace_id, p.workspace_id, w.id),
           CASE WHEN c.id IS NOT NULL THEN c.kind WHEN p.jti IS NOT NULL THEN 'proxy' END
    FROM {_INCOMING} i
    LEFT JOIN credentials c ON i.jti IS NOT NULL AND c.jti = i.jti
    LEFT JOIN proxy_tokens p ON c.id IS NULL AND i.jti IS NOT NULL AND p.jti = i.jti
    LEFT JOIN workspaces w ON c.id IS NULL AND p.jti IS NULL AND w.k8s_namespace = i.namespace
    WHERE c.id IS NOT NULL OR p.jti IS NOT NULL OR w.id IS NOT NULL
    -- The unique index of migration 0019: the same event (its digest) under the same ID.
    ON CONFLICT ((COALESCE(audit_id_text, audit_id::text)), event_digest) DO NOTHING"""
# Rows locked in id order: two batches naming the same credentials never deadlock.
_LAST_USED = f"""
    WITH latest AS (SELECT jti, max(time) AS at FROM {_INCOMING} WHERE jti IS NOT NULL GROUP BY jti),
    locked AS (
        SELECT c.id, latest.at FROM credentials c JOIN latest ON c.jti = latest.jti
        WHERE c.last_used_at IS NULL OR c.last_used_at < latest.at
        ORDER BY c.id FOR UPDATE OF c)
    UPDATE credentials c SET last_used_at = GREATEST(c.last_used_at, locked.at) FROM locked WHERE c.id = locked.id"""


def _copyable(event: ClusterEvent) -> tuple[object, ...]:
    record = list(event.record())
    address = COLUMNS.index("source_ip")
    if record[address] is not None:
        record[address] = ipaddress.ip_address(record[address])
    return tuple(record)


async def store(db: Database, events: Sequence[ClusterEvent]) -> int:
    """Store a batch; the number of events newly kept (attributed, or
    unattributed in a tenant namespace, and not stored before)."""
    if not events:
        return 0
    async with db.transaction() as connection:
        await connection.execute(_CREATE_INCOMING)
        await connection.copy_records_to_table(_INCOMING, records=[_copyable(e) for e in events], columns=COLUMNS)
        status = await connection.execute(_STORE)
        await connection.execute(_LAST_USED)
    return int(status.rsplit(" ", 1)[-1])


async def sweep(db: Database, retention_days: int, batch: int = 10_000) -> int:
    """Delete up to `batch` events older than the retention; the number deleted."""
    status = await db.fetchrow(
        """WITH old AS (
               DELETE FROM cluster_events WHERE id IN (
                   SELECT id FROM cluster_events WHERE time < now() - make_interval(days => $1)
                   ORDER BY time LIMIT $2)
               RETURNING 1)
           SELECT count(*) AS deleted FROM old""", retention_days, batch)
    return int(status["deleted"]) if status else 0
