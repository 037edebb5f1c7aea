"""The SQL of issued credentials (migrations 0013, 0018) and of the spare
binding Secrets made ahead for them. provisioning.credentials and
provisioning.spares decide; this only reads and writes. No column holds a
token. A spare's row has no owner (`user_id` NULL) until claimed: every
query of issuances asks for `issued` rows or an owner's."""

from __future__ import annotations

import datetime
import uuid
from typing import Sequence

import asyncpg

from provisioning.db.pool import Database
from provisioning.db.repositories import INSERT_AUDIT, audit_row, record_audit
from provisioning.models import AuditEvent, Begun, BindingSecret, Credential

_MAX_LISTED = 500


def _credential(row: asyncpg.Record) -> Credential:
    return Credential(id=row["id"], user_id=row["user_id"], workspace_id=row["workspace_id"], kind=row["kind"],
                      namespace=row["namespace"], service_account=row["service_account"],
                      secret_name=row["secret_name"], jti=row["jti"], issued_at=row["issued_at"],
                      expires_at=row["expires_at"], revoked_at=row["revoked_at"],
                      ip_address=str(row["ip_address"]) if row["ip_address"] else None,
                      user_agent=row["user_agent"], last_used_at=row["last_used_at"], cluster=row["cluster"])


def _binding(row: asyncpg.Record) -> BindingSecret:
    return BindingSecret(id=row["id"], workspace_id=row["workspace_id"], namespace=row["namespace"],
                         secret_name=row["secret_name"], cluster=row["cluster"])


async def begin(db: Database, credential: Credential, *, within: int, claimable_seconds: float) -> Begun | None:
    """The issuance's row, before its token is minted: a spare claimed
    (its Secret made already, provisioning.spares) if the workspace has one
    made less than `claimable_seconds` ago, else a new row, before its
    binding Secret is made (whatever happens next, the Secret is on record
    and swept once expired), if the workspace holds fewer than `within`
    live credentials: each holds a Secret in its quota. None, nothing
    written, when it holds that many. One statement, one round trip.

    A spare goes to one issuance only: the row is locked (others skip it)
    and claimed only while it has no owner. A claimed spare keeps its id,
    so its Secret's name and label name the issuance it now is."""
    row = await db.fetchrow(
        """WITH spare AS (
               SELECT id FROM credentials
               WHERE workspace_id = $3 AND user_id IS NULL AND secret_uid IS NOT NULL
                 AND secret_deleted_at IS NULL AND issued_at > now() - make_interval(secs => $12)
               ORDER BY issued_at LIMIT 1 FOR UPDATE SKIP LOCKED),
           claimed AS (
               UPDATE credentials c SET user_id = $2, kind = $4, service_account = $6, issued_at = now(),
                                        expires_at = $8, ip_address = $9, user_agent = $10
               FROM spare WHERE c.id = spare.id AND c.user_id IS NULL
               RETURNING c.id, c.secret_name, c.secret_uid),
           begun AS (
               INSERT INTO credentials (id, user_id, workspace_id, kind, namespace, service_account, secret_name,
                                        expires_at, ip_address, user_agent)
               SELECT $1::uuid, $2::uuid, $3::uuid, $4::text, $5::text, $6::text, $7::text, $8::timestamptz,
                      $9::inet, $10::text
               WHERE NOT EXISTS (SELECT 1 FROM claimed)
                 AND (SELECT count(*) FROM credentials WHERE workspace_id = $3 AND secret_deleted_at IS NULL) < $11
               RETURNING id, secret_name, secret_uid)
           SELECT * FROM claimed UNION ALL SELECT * FROM begun""",
        credential.id, credential.user_id, credential.workspace_id, credential.kind, credential.namespace,
        credential.service_account, credential.secret_name, credential.expires_at, credential.ip_address,
        credential.user_agent, within, claimable_seconds)
    return Begun(row["id"], row["secret_name"], row["secret_uid"]) if row is not None else None


async def add_spare(db: Database, spare: BindingSecret, expires_at: datetime.datetime, *, within: int,
                    depth: int, claimable_seconds: float) -> bool:
    """A spare's row, before its Secret is made (on record whatever
    happens next), if the workspace keeps fewer than `depth` spares young
    enough to claim (those still being made too), and its live credentials,
    spares among them, leave a place free besides this one for an issuance
    that finds none. False, nothing written, otherwise. One statement:
    replicas topping up the same workspace keep within both bounds but for
    a race of one."""
    row = await db.fetchrow(
        """INSERT INTO credentials (id, workspace_id, namespace, secret_name, expires_at)
           SELECT $1::uuid, $2::uuid, $3::text, $4::text, $5::timestamptz
           WHERE (SELECT count(*) FROM credentials WHERE workspace_id = $2 AND secret_deleted_at IS NULL) + 1 < $6
             AND (SELECT count(*) FROM credentials WHERE workspace_id = $2 AND user_id IS NULL
                    AND secret_deleted_at IS NULL AND issued_at > now() - make_interval(secs => $8)) < $7
           RETURNING true""",
        spare.id, spare.workspace_id, spare.namespace, spare.secret_name, expires_at, within, depth,
        claimable_seconds)
    return row is not None


async def spare_made(db: Database, spare_id: uuid.UUID, secret_uid: str) -> None:
    """Its Secret is there: the spare may be claimed."""
    await db.fetch("UPDATE credentials SET secret_uid = $2 WHERE id = $1 AND user_id IS NULL", spare_id, secret_uid)


async def finish(db: Database, credential_id: uuid.UUID, jti: str | None, expires_at: datetime.datetime,
                 member_id: uuid.UUID, service_account_uid: str, event: AuditEvent) -> bool:
    """The issuance confirmed (its `jti`, the expiry the API server granted)
    with its audit row, in one statement, only if the workspace and the
    membership are still as they were read before the token was minted:
    provisioned, and member `member_id`'s account the same one. False
    (nothing written) means the workspace was suspended (or resumed
    afresh), or the member removed or their account revoked, meanwhile."""
    row = await db.fetchrow(
        f"""WITH allowed AS (
                SELECT 1 FROM workspaces w JOIN workspace_members m ON m.workspace_id = w.id
                WHERE w.id = $3 AND w.status = 'provisioned' AND m.user_id = $7 AND m.service_account_uid = $8),
            done AS (
                UPDATE credentials SET issued = true, jti = $10, expires_at = $11
                WHERE id = $9 AND NOT issued AND EXISTS (SELECT 1 FROM allowed) RETURNING 1),
            audited AS ({INSERT_AUDIT} FROM done)
            SELECT count(*) AS done FROM done""",
        *audit_row(event), member_id, service_account_uid, credential_id, jti, expires_at)
    return bool(row is not None and row["done"])


async def get(db: Database, credential_id: uuid.UUID) -> Credential | None:
    row = await db.fetchrow("SELECT * FROM credentials WHERE id = $1 AND issued", credential_id)
    return _credential(row) if row else None


async def listed(db: Database, *, user_id: uuid.UUID | None, workspace_id: uuid.UUID | None,
                 limit: int = _MAX_LISTED) -> list[Credential]:
    """Newest first, filtered by whichever of the two is given."""
    rows = await db.fetch(
        """SELECT * FROM credentials WHERE issued AND ($1::uuid IS NULL OR user_id = $1)
             AND ($2::uuid IS NULL OR workspace_id = $2)
           ORDER BY issued_at DESC, id LIMIT $3""", user_id, workspace_id, min(limit, _MAX_LISTED))
    return [_credential(r) for r in rows]


async def live_of(db: Database, workspace_id: uuid.UUID, user_id: uuid.UUID) -> list[Credential]:
    """The member's credentials whose Secret is still there."""
    rows = await db.fetch(
        """SELECT * FROM credentials WHERE workspace_id = $1 AND user_id = $2 AND secret_deleted_at IS NULL
           ORDER BY issued_at""", workspace_id, user_id)  # unfinished ones too: their Secrets go as well
    return [_credential(r) for r in rows]


async def mark_revoked(connection: asyncpg.Connection, credential_id: uuid.UUID, event: AuditEvent | None) -> bool:
    """Revoked now (and its Secret gone), with its audit row; False when it
    was revoked already (no second row)."""
    done = await connection.fetchval(
        """UPDATE credentials SET revoked_at = now(), secret_deleted_at = COALESCE(secret_deleted_at, now())
           WHERE id = $1 AND revoked_at IS NULL RETURNING true""", credential_id)
    if done and event is not None:
        await record_audit(connection, event)
    return bool(done)


async def to_sweep(db: Database, batch: int, unfinished_after_seconds: float) -> list[BindingSecret]:
    """Binding Secrets left to delete: of expired credentials, and of
    issuances cut short (not issued, begun longer ago than any issuance
    takes), spares never claimed among them."""
    rows = await db.fetch(
        """(SELECT * FROM credentials WHERE secret_deleted_at IS NULL AND expires_at < now()
            ORDER BY expires_at LIMIT $1)
           UNION
           (SELECT * FROM credentials WHERE secret_deleted_at IS NULL AND NOT issued
              AND issued_at < now() - make_interval(secs => $2) ORDER BY issued_at LIMIT $1)
           LIMIT $1""", batch, unfinished_after_seconds)
    return [_binding(r) for r in rows]


async def mark_swept(db: Database, credential_ids: Sequence[uuid.UUID]) -> None:
    await db.fetch("UPDATE credentials SET secret_deleted_at = now() WHERE id = ANY($1::uuid[])",
                   list(credential_ids))
