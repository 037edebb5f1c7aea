"""Listing a person's workspaces with their roles, against a real
PostgreSQL: the workspace in each row is the owner's (both tables of the
join have a user_id)."""

from __future__ import annotations

import uuid
from typing import Any

from provisioning import roles
from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.models import AuditEvent
from tests.support.gatewayclient import register_and_login


async def test_a_members_listing_names_the_owner_of_each_workspace(gateway: Any, db: Database) -> None:
    # Given an owner's workspace, with another person added to it as edit
    owner = await register_and_login(gateway)
    member = await register_and_login(gateway)
    owner_id, member_id = uuid.UUID(owner.user_id), uuid.UUID(member.user_id)
    workspace, _ = await repo.claim_workspace(db, owner_id, f"tenant-{owner_id}", "sa-tenant-admin", "basic")
    async with db.transaction() as connection:
        await member_rows.add_member(connection, workspace.id, member_id, "edit",
                                     roles.member_account(member_id, owner=False), owner_id,
                                     AuditEvent("AddMember", owner_id, workspace.id, None, {"member": str(member_id)}))

    # When the member's workspaces are listed, directly and through the API
    [(listed, membership)] = await member_rows.memberships_of(db, member_id)
    answered = await (await member.call("GET", "/api/v1/workspaces")).json()
    me = await (await member.call("GET", "/api/v1/me")).json()

    # Then the workspace is the owner's, its account the workspace's, and the role the member's
    assert (listed.user_id, listed.service_account, membership.user_id, membership.role) == (
        owner_id, "sa-tenant-admin", member_id, "edit")
    for body in (answered, me["workspaces"]):
        assert [(w["id"], w["user_id"], w["role"]) for w in body] == [(str(workspace.id), owner.user_id, "edit")]
