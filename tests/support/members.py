"""Team workspaces in the component ring: a provisioned workspace and its
members, made without single sign-on (which accepts invitations and group
bindings: the cluster ring's Keycloak tests do that)."""

from __future__ import annotations

import uuid
from typing import Any

from provisioning import roles
from provisioning.db import members as member_rows
from provisioning.models import AuditEvent, Role
from proxy import keys
from tests.support.gatewayclient import Session, provisioned_workspace, register_and_login


async def team_workspace(gateway: Any) -> tuple[Session, uuid.UUID]:
    """A signed-in owner and their provisioned workspace's id (made in the
    database directly: tests.support.gatewayclient.provisioned_workspace)."""
    owner, path = await provisioned_workspace(gateway)
    return owner, uuid.UUID(path.split("/")[2])


async def join(gateway: Any, workspace_id: uuid.UUID, role: Role, added_by: str,
               person: Session | None = None) -> Session:
    """Test setup: a person with an account (a new one unless given) made a
    member with `role`, as accepting an invitation at an SSO sign-in would
    (provisioning.db.members.add_member, with its AddMember row)."""
    person = person or await register_and_login(gateway)
    user_id, adder = uuid.UUID(person.user_id), uuid.UUID(added_by)
    async with gateway.server.app[keys.DATABASE].transaction() as connection:
        added = await member_rows.add_member(connection, workspace_id, user_id, role,
                                             roles.member_account(user_id, owner=False), adder,
                                             AuditEvent("AddMember", adder, workspace_id, None,
                                                        {"member": person.user_id, "role": role, "via": "test"}))
    assert added is not None
    return person
