"""The activity timeline's SQL: the gateway's own audit rows and the
cluster's audit events (migrations 0014, 0017, 0019), merged newest first.

Each action once: a write or exec the proxy relayed is both a gateway row
(ProxyWrite, ProxyExec: the gateway's record, kept as it is) and an event
in the cluster's audit log, joined to the same person through the proxy's
token (provisioning.db.proxy_tokens). The proxy names that event
(`audit_id`, proxy.passthrough.relay), so the timeline shows the event and
leaves the gateway row out once the event is stored: it says what the API
server did (resource, name, response code), and `via` says it came through
the proxy. Until it arrives (or when the cluster's audit is not received),
the gateway row stands in. A long request's two stages show as one.

An event's audit id alone never hides a row: a client talking straight to
the API server may choose it (`Audit-ID`), and so reuse another request's.
A gateway row gives way only to an event of the proxy's own token
(`via = 'proxy'`, which no client holds; the proxy drops a client's
Audit-ID), and a long request's start only to an end of the same request:
same id, received at the same microsecond, by the same person, with the
same verb and resource.

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
_PROXIED = "'ProxyWrite', 'ProxyExec'"
"""The gateway's rows of requests it relayed to the API server as the person."""
_GATEWAY_AUDIT_ID = "(a.details->>'audit_id')"
"""The auditID the proxy gave the request's event in the cluster's audit log (proxy.passthrough.relay)."""


def _event_audit_id(table: str) -> str:
    """An event's auditID as text: `audit_id_text`, or for a row stored before
    migration 0019 its `audit_id`. The expression of index
    cluster_events_audit_key, written the same so the index serves it."""
    return f"COALESCE({table}.audit_id_text, {table}.audit_id::text)"


@dataclass(frozen=True)
class Position:
    """Where a page ended: the last row's (time, source, key)."""

    time: datetime.datetime
    source: str
    key: str


_QUERY = f"""
    SELECT * FROM (
        (SELECT a.created_at AS time, 'gateway' AS source, a.id::text AS key, a.user_id, a.workspace_id,
                CASE WHEN a.details->>'credential' ~ '{_UUID_TEXT}' THEN (a.details->>'credential')::uuid END
                  AS credential_id,
                a.action, a.details->>'method' AS verb, NULL::text AS resource, NULL::text AS subresource,
                a.details->>'namespace' AS namespace, NULL::text AS name, NULL::integer AS code,
                a.details->>'user_agent' AS user_agent,
                CASE WHEN a.action IN ({_PROXIED}) THEN 'proxy' ELSE 'gateway' END AS via,
                {_GATEWAY_AUDIT_ID} AS audit_id
         FROM audit_logs a
         WHERE ($1::uuid IS NULL OR a.user_id = $1) AND ($2::uuid IS NULL OR a.workspace_id = $2)
           AND ($3::timestamptz IS NULL OR a.created_at >= $3)
           AND ($4::timestamptz IS NULL OR (a.created_at, 'gateway', a.id::text) < ($4, $5::text, $6::text))
           -- A proxied write or exec whose own event in the cluster's audit log is
           -- stored under the same person is shown once: as that event.
           AND NOT (a.action IN ({_PROXIED}) AND EXISTS (
               SELECT 1 FROM cluster_events e WHERE {_event_audit_id('e')} = {_GATEWAY_AUDIT_ID}
               AND e.user_id = a.user_id AND e.via = 'proxy'))
         ORDER BY a.created_at DESC, a.id::text DESC LIMIT $7)
        UNION ALL
        (SELECT e.time, 'cluster' AS source, lpad(e.id::text, 20, '0') AS key, e.user_id, e.workspace_id,
                e.credential_id, NULL::text AS action, e.verb, e.resource, e.subresource, e.namespace, e.name, e.code,
                e.user_agent,
                -- Rows from before migration 0017 have no `via`: only credentials were joined then.
                COALESCE(e.via, (SELECT c.kind FROM credentials c WHERE c.id = e.credential_id)) AS via,
                {_event_audit_id('e')} AS audit_id
         FROM cluster_events e
         WHERE ($1::uuid IS NULL OR e.user_id = $1) AND ($2::uuid IS NULL OR e.workspace_id = $2)
           AND ($3::timestamptz IS NULL OR e.time >= $3)
           AND ($4::timestamptz IS NULL OR (e.time, 'cluster', lpad(e.id::text, 20, '0')) < ($4, $5::text, $6::text))
           -- A long request (a watch, an exec) is audited when it starts and when it
           -- ends: shown once, as its start until it has ended. Its end, not another
           -- request's that reuses its ID (rows from before migration 0019 have no
           -- received_at on either side).
           AND NOT (e.stage = 'ResponseStarted' AND EXISTS (
               SELECT 1 FROM cluster_events d
               WHERE {_event_audit_id('d')} = {_event_audit_id('e')} AND d.stage = 'ResponseComplete'
                 AND d.received_at IS NOT DISTINCT FROM e.received_at
                 AND d.user_id IS NOT DISTINCT FROM e.user_id AND d.verb = e.verb
                 AND d.resource IS NOT DISTINCT FROM e.resource
                 AND d.subresource IS NOT DISTINCT FROM e.subresource))
         ORDER BY e.time DESC, e.id DESC LIMIT $7)
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
              "code": row["code"], "user_agent": row["user_agent"], "via": row["via"],
              "audit_id": _text(row["audit_id"])} for row in rows]
    last = rows[-1] if rows and more else None
    return items, (Position(last["time"], last["source"], last["key"]) if last is not None else None)
