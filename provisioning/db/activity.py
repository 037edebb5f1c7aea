"""The activity timeline's SQL: the gateway's own audit rows and the
cluster's audit events (migration 0014), merged newest first.

Paged by keyset, never by offset: each row's position is (time, source,
key), where key is the row's id as text (a cluster event's zero-padded so
text order is number order). Each side reads at most `limit` rows past the
position through its own (person or workspace, time) index, and the merge
keeps the first `limit`. Filters by person and workspace are the caller's
authorisation, decided before this is called.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any

from provisioning.db.pool import Database

MAX_LIMIT = 500
_UUID_TEXT = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


@dataclass(frozen=True)
class Position:
    """Where a page ended: the last row's (time, source, key)."""

    time: datetime.datetime
    source: str
    key: str


_QUERY = f"""
    SELECT * FROM (
        (SELECT created_at AS time, 'gateway' AS source, id::text AS key, user_id, workspace_id,
                CASE WHEN details->>'credential' ~ '{_UUID_TEXT}' THEN (details->>'credential')::uuid END
                  AS credential_id,
                action, details->>'method' AS verb, NULL::text AS resource, NULL::text AS subresource,
                details->>'namespace' AS namespace, NULL::text AS name, NULL::integer AS code,
                details->>'user_agent' AS user_agent
         FROM audit_logs
         WHERE ($1::uuid IS NULL OR user_id = $1) AND ($2::uuid IS NULL OR workspace_id = $2)
           AND ($3::timestamptz IS NULL OR created_at >= $3)
           AND ($4::timestamptz IS NULL OR (created_at, 'gateway', id::text) < ($4, $5::text, $6::text))
         ORDER BY created_at DESC, id::text DESC LIMIT $7)
        UNION ALL
        (SELECT time, 'cluster' AS source, lpad(id::text, 20, '0') AS key, user_id, workspace_id, credential_id,
                NULL::text AS action, verb, resource, subresource, namespace, name, code, user_agent
         FROM cluster_events
         WHERE ($1::uuid IS NULL OR user_id = $1) AND ($2::uuid IS NULL OR workspace_id = $2)
           AND ($3::timestamptz IS NULL OR time >= $3)
           AND ($4::timestamptz IS NULL OR (time, 'cluster', lpad(id::text, 20, '0')) < ($4, $5::text, $6::text))
         ORDER BY time DESC, id DESC LIMIT $7)
    ) merged
    ORDER BY time DESC, source DESC, key DESC LIMIT $7"""


def _text(value: Any) -> str | None:
    return str(value) if value is not None else None


async def activity(db: Database, *, user_id: uuid.UUID | None, workspace_id: uuid.UUID | None,
                   since: datetime.datetime | None, after: Position | None,
                   limit: int) -> tuple[list[dict[str, Any]], Position | None]:
    """A page of the timeline, newest first, and where the next page starts
    (None when this one is the last)."""
    limit = max(1, min(limit, MAX_LIMIT))
    rows = await db.fetch(_QUERY, user_id, workspace_id, since, after.time if after else None,
                          after.source if after else None, after.key if after else None, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    items = [{"time": row["time"].isoformat(), "source": row["source"], "user_id": _text(row["user_id"]),
              "workspace_id": _text(row["workspace_id"]), "credential_id": _text(row["credential_id"]),
              "action": row["action"], "verb": row["verb"], "resource": row["resource"],
              "subresource": row["subresource"], "namespace": row["namespace"], "name": row["name"],
              "code": row["code"], "user_agent": row["user_agent"]} for row in rows]
    last = rows[-1] if rows and more else None
    return items, (Position(last["time"], last["source"], last["key"]) if last is not None else None)
