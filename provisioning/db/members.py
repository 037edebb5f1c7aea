"""The SQL of team workspaces: members, invitations, group bindings
(migration 0012). provisioning.members decides; this only reads and writes.

Changes that must happen together with their audit row take the caller's
connection (a transaction the caller holds under the workspace's status
lock); reads take the Database.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Iterable

import asyncpg

from provisioning.db.pool import Database
from provisioning.db.repositories import record_audit, workspace_from_row
from provisioning.errors import Conflict
from provisioning.models import AuditEvent, GroupBinding, Invitation, Member, Role, Workspace

_MEMBER_COLUMNS = "m.*, u.email"


def _member(row: asyncpg.Record) -> Member:
    return Member(workspace_id=row["workspace_id"], user_id=row["user_id"], role=row["role"],
                  service_account=row["service_account"], service_account_uid=row["service_account_uid"],
                  added_at=row["added_at"], added_by=row["added_by"], email=row["email"], via=row["via"],
                  group_provider=row["group_provider"], group_name=row["group_name"], revoked_at=row["revoked_at"])


def _invitation(row: asyncpg.Record) -> Invitation:
    return Invitation(workspace_id=row["workspace_id"], email=row["email"], provider=row["provider"],
                      role=row["role"], added_by=row["added_by"], added_at=row["added_at"])


def _group(row: asyncpg.Record) -> GroupBinding:
    return GroupBinding(workspace_id=row["workspace_id"], provider=row["provider"], group=row["group_name"],
                        role=row["role"], added_by=row["added_by"], added_at=row["added_at"])


async def membership(db: Database | asyncpg.Connection, workspace_id: uuid.UUID, user_id: uuid.UUID) -> Member | None:
    row = await db.fetchrow(
        f"""SELECT {_MEMBER_COLUMNS} FROM workspace_members m JOIN users u ON u.id = m.user_id
            WHERE m.workspace_id = $1 AND m.user_id = $2""", workspace_id, user_id)
    return _member(row) if row else None


async def memberships_of(db: Database, user_id: uuid.UUID) -> list[tuple[Workspace, Member]]:
    """Every workspace `user_id` is a member of, oldest first, with the membership."""
    rows = await db.fetch(
        f"""SELECT w.*, {_MEMBER_COLUMNS}, w.user_id AS owner_id FROM workspace_members m
            JOIN workspaces w ON w.id = m.workspace_id JOIN users u ON u.id = m.user_id
            WHERE m.user_id = $1 ORDER BY w.created_at""", user_id)
    # Both tables have user_id, and the member's comes last: the owner's is owner_id.
    return [(replace(workspace_from_row(r), user_id=r["owner_id"]), _member(r)) for r in rows]


async def roster(db: Database, workspace_id: uuid.UUID) -> tuple[list[Member], list[Invitation], list[GroupBinding]]:
    """The workspace's members, pending invitations and group bindings."""
    async with db.connection() as connection:
        members = await connection.fetch(
            f"""SELECT {_MEMBER_COLUMNS} FROM workspace_members m JOIN users u ON u.id = m.user_id
                WHERE m.workspace_id = $1 ORDER BY m.added_at, m.user_id""", workspace_id)
        invited = await connection.fetch(
            "SELECT * FROM workspace_invitations WHERE workspace_id = $1 ORDER BY added_at, email", workspace_id)
        groups = await connection.fetch(
            "SELECT * FROM workspace_groups WHERE workspace_id = $1 ORDER BY added_at, provider, group_name",
            workspace_id)
    return [_member(r) for r in members], [_invitation(r) for r in invited], [_group(r) for r in groups]


async def all_members(db: Database, workspace_id: uuid.UUID) -> list[Member]:
    return (await roster(db, workspace_id))[0]


async def seats_taken(connection: asyncpg.Connection, workspace_id: uuid.UUID) -> int:
    """Members and pending invitations, counted under a lock on the
    workspace's row (held to the end of the caller's transaction): two
    additions at once cannot both take the last place."""
    await connection.execute("SELECT 1 FROM workspaces WHERE id = $1 FOR UPDATE", workspace_id)
    return int(await connection.fetchval(
        """SELECT (SELECT count(*) FROM workspace_members WHERE workspace_id = $1)
                + (SELECT count(*) FROM workspace_invitations WHERE workspace_id = $1)""", workspace_id))


async def invite(connection: asyncpg.Connection, workspace_id: uuid.UUID, email: str, provider: str | None,
                 role: Role, added_by: uuid.UUID, event: AuditEvent) -> Invitation:
    """An invitation and its audit row. 409 `already_member` when that email
    is invited already, or is the email of one of the workspace's members."""
    taken = await connection.fetchval(
        """SELECT EXISTS (SELECT 1 FROM workspace_invitations WHERE workspace_id = $1 AND lower(email) = lower($2))
               OR EXISTS (SELECT 1 FROM workspace_members m JOIN users u ON u.id = m.user_id
                          WHERE m.workspace_id = $1 AND lower(u.email) = lower($2)
                            AND ($3::text IS NULL OR u.oidc_provider = $3))""",
        workspace_id, email, provider)
    if taken:
        raise Conflict("that email is already a member of this workspace, or invited", code="already_member")
    row = await connection.fetchrow(
        """INSERT INTO workspace_invitations (workspace_id, email, provider, role, added_by)
           VALUES ($1, $2, $3, $4, $5) RETURNING *""", workspace_id, email, provider, role, added_by)
    await record_audit(connection, event)
    return _invitation(row)


async def bind_group(connection: asyncpg.Connection, workspace_id: uuid.UUID, provider: str, group: str, role: Role,
                     added_by: uuid.UUID, event: AuditEvent) -> GroupBinding:
    row = await connection.fetchrow(
        """INSERT INTO workspace_groups (workspace_id, provider, group_name, role, added_by)
           VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING *""",
        workspace_id, provider, group, role, added_by)
    if row is None:
        raise Conflict("that group of that provider is already bound in this workspace", code="already_member")
    await record_audit(connection, event)
    return _group(row)


async def unbind_group(connection: asyncpg.Connection, workspace_id: uuid.UUID, provider: str,
                       group: str) -> GroupBinding | None:
    row = await connection.fetchrow(
        "DELETE FROM workspace_groups WHERE workspace_id = $1 AND provider = $2 AND group_name = $3 RETURNING *",
        workspace_id, provider, group)
    return _group(row) if row else None


async def uninvite(connection: asyncpg.Connection, workspace_id: uuid.UUID, email: str) -> Invitation | None:
    row = await connection.fetchrow(
        "DELETE FROM workspace_invitations WHERE workspace_id = $1 AND lower(email) = lower($2) RETURNING *",
        workspace_id, email)
    return _invitation(row) if row else None


async def group_members(db: Database, workspace_id: uuid.UUID, provider: str, group: str) -> list[Member]:
    rows = await db.fetch(
        f"""SELECT {_MEMBER_COLUMNS} FROM workspace_members m JOIN users u ON u.id = m.user_id
            WHERE m.workspace_id = $1 AND m.via = 'group' AND m.group_provider = $2 AND m.group_name = $3""",
        workspace_id, provider, group)
    return [_member(r) for r in rows]


async def add_member(connection: asyncpg.Connection, workspace_id: uuid.UUID, user_id: uuid.UUID, role: Role,
                     service_account: str, added_by: uuid.UUID | None, event: AuditEvent, *,
                     group: tuple[str, str] | None = None) -> Member | None:
    """A new member row (no objects yet: they are made at the member's first
    credential) and its audit row; None, and nothing written, if they are
    a member already."""
    provider, name = group if group is not None else (None, None)
    row = await connection.fetchrow(
        """INSERT INTO workspace_members (workspace_id, user_id, role, service_account, added_by, via,
                                          group_provider, group_name)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING RETURNING workspace_id""",
        workspace_id, user_id, role, service_account, added_by, "group" if group else "direct", provider, name)
    if row is None:
        return None
    await record_audit(connection, event)
    return await membership(connection, workspace_id, user_id)


async def admins_left(connection: asyncpg.Connection, workspace_id: uuid.UUID, without: uuid.UUID) -> int:
    """The workspace's admin members other than `without`."""
    return int(await connection.fetchval(
        "SELECT count(*) FROM workspace_members WHERE workspace_id = $1 AND role = 'admin' AND user_id <> $2",
        workspace_id, without))


async def set_role(connection: asyncpg.Connection, workspace_id: uuid.UUID, user_id: uuid.UUID, role: Role,
                   event: AuditEvent, *, direct: bool = True) -> Member | None:
    """The member's new role and its audit row. `direct`: the change is a
    workspace admin's, so the membership is theirs from now on, not a
    group's (a later sign-in does not take it back)."""
    changed = await connection.fetchval(
        """UPDATE workspace_members SET role = $3,
                  via = CASE WHEN $4 THEN 'direct' ELSE via END,
                  group_provider = CASE WHEN $4 THEN NULL ELSE group_provider END,
                  group_name = CASE WHEN $4 THEN NULL ELSE group_name END
           WHERE workspace_id = $1 AND user_id = $2 RETURNING true""", workspace_id, user_id, role, direct)
    if not changed:
        return None
    await record_audit(connection, event)
    return await membership(connection, workspace_id, user_id)


async def remove_member(connection: asyncpg.Connection, workspace_id: uuid.UUID, user_id: uuid.UUID,
                        event: AuditEvent) -> bool:
    gone = await connection.fetchval(
        "DELETE FROM workspace_members WHERE workspace_id = $1 AND user_id = $2 RETURNING true", workspace_id, user_id)
    if gone:
        await record_audit(connection, event)
    return bool(gone)


async def set_account(db: Database | asyncpg.Connection, workspace_id: uuid.UUID, user_id: uuid.UUID,
                      uid: str | None, *, revoked: bool = False, owner: bool = False) -> Member | None:
    """The member's ServiceAccount UID now (None: its objects are gone;
    `revoked` notes when, for the token-cache grace). The owner's is the
    workspace's own too (`owner`: both rows, in the caller's transaction)."""
    if owner:
        await db.fetchrow("UPDATE workspaces SET k8s_sa_uid = $2, updated_at = now() WHERE id = $1",
                          workspace_id, uid)
    row = await db.fetchrow(
        """UPDATE workspace_members SET service_account_uid = $3,
                  revoked_at = CASE WHEN $4 THEN now() ELSE revoked_at END
           WHERE workspace_id = $1 AND user_id = $2 RETURNING workspace_id""", workspace_id, user_id, uid, revoked)
    return None if row is None else await membership(db, workspace_id, user_id)


async def forget_accounts(connection: asyncpg.Connection, workspace_id: uuid.UUID) -> None:
    """A suspended workspace's members (but its owner, whose account is the
    workspace's own) have no objects any more."""
    await connection.execute(
        """UPDATE workspace_members m SET service_account_uid = NULL, revoked_at = now()
           FROM workspaces w WHERE w.id = m.workspace_id AND m.workspace_id = $1
             AND m.user_id <> w.user_id AND m.service_account_uid IS NOT NULL""", workspace_id)


async def pending_invitations(db: Database, email: str, provider: str) -> list[Invitation]:
    rows = await db.fetch(
        """SELECT * FROM workspace_invitations WHERE lower(email) = lower($1) AND (provider IS NULL OR provider = $2)
           ORDER BY added_at""", email, provider)
    return [_invitation(r) for r in rows]


async def accept_invitation(connection: asyncpg.Connection, invitation: Invitation, user_id: uuid.UUID,
                            service_account: str, event: AuditEvent) -> Member | None:
    """The invitation, if still there, turned into a membership with its
    audit row; None when someone else took it meanwhile, or the user is a
    member already (the invitation goes either way)."""
    taken = await uninvite(connection, invitation.workspace_id, invitation.email)
    if taken is None:
        return None
    return await add_member(connection, invitation.workspace_id, user_id, taken.role, service_account,
                            taken.added_by, event)


async def bindings_for(db: Database, provider: str, groups: Iterable[str]) -> list[GroupBinding]:
    rows = await db.fetch(
        """SELECT * FROM workspace_groups WHERE provider = $1 AND group_name = ANY($2::text[])
           ORDER BY workspace_id, added_at""", provider, list(groups))
    return [_group(r) for r in rows]


async def group_memberships_of(db: Database, user_id: uuid.UUID) -> list[Member]:
    rows = await db.fetch(
        f"""SELECT {_MEMBER_COLUMNS} FROM workspace_members m JOIN users u ON u.id = m.user_id
            WHERE m.user_id = $1 AND m.via = 'group'""", user_id)
    return [_member(r) for r in rows]


