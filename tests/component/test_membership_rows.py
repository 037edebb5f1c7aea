"""Team workspaces in the database (migration 0012, provisioning.db.members)
and what a single sign-on changes (provisioning.members.signed_in), against
PostgreSQL, with a FAKE cluster (tests/fakes/kube.py). The cluster ring
signs in through Keycloak for real.

- Existing workspaces get their owner as an admin member when 0012 is
  applied; new ones when they are inserted; the owner's row follows the
  workspace's account UID (suspension and resume change it there).
- A sign-in turns the invitations of its verified email into memberships,
  and grants what its provider's groups are bound to: the same group name
  at another provider grants nothing, and leaving the group ends it.
"""

from __future__ import annotations

import uuid
from typing import AsyncIterator

import asyncpg
import pytest

from provisioning import members
from provisioning.db import members as member_rows
from provisioning.db import migrate as migrations
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Conflict
from provisioning.models import AuditEvent, Role, User, Workspace
from provisioning.roles import ClusterRoles
from provisioning.tiers import DEFAULT_TIERS
from tests.fakes.kube import FakeCluster
from tests.support.databases import new_database


@pytest.fixture
async def empty_database(postgres_server_url: str) -> AsyncIterator[str]:
    yield await new_database(postgres_server_url, template=None)


async def test_migration_0012_makes_each_existing_owner_their_workspaces_admin(
        empty_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    connection = await asyncpg.connect(empty_database)
    try:
        everything = migrations._migrations()
        before = [m for m in everything if m[0] < "0012"]
        monkeypatch.setattr(migrations, "_migrations", lambda: before)
        await migrations.migrate(connection)
        owners = [uuid.uuid4(), uuid.uuid4()]
        workspaces = [uuid.uuid4(), uuid.uuid4()]
        for owner, workspace, (status, uid) in zip(owners, workspaces, (("provisioned", "uid-a"),
                                                                         ("provisioning", None))):
            await connection.execute("INSERT INTO users (id, email, password_hash) VALUES ($1, $2, 'x')",
                                     owner, f"{owner}@example.test")
            await connection.execute(
                """INSERT INTO workspaces (id, user_id, k8s_namespace, k8s_sa_name, k8s_sa_uid, tier, status)
                   VALUES ($1, $2, $3, 'sa-tenant-admin', $4, 'basic', $5)""",
                workspace, owner, f"tenant-{owner}", uid, status)
        monkeypatch.setattr(migrations, "_migrations", lambda: everything)
        assert await migrations.migrate(connection) == [name for name, _ in everything if name >= "0012"]
        rows = await connection.fetch("SELECT * FROM workspace_members ORDER BY service_account_uid NULLS LAST")
        assert [(r["workspace_id"], r["user_id"], r["role"], r["service_account"], r["service_account_uid"],
                 r["via"], r["added_by"]) for r in rows] == [
            (workspaces[0], owners[0], "admin", "sa-tenant-admin", "uid-a", "direct", owners[0]),
            (workspaces[1], owners[1], "admin", "sa-tenant-admin", None, "direct", owners[1])]
    finally:
        await connection.close()


async def new_user(db: Database) -> User:
    """(signed_in is told the provider and the verified email: the user row's own do not matter to it)"""
    return await repo.create_user(db, f"{uuid.uuid4().hex[:12]}@example.test", "not-a-real-hash")


async def new_workspace(db: Database) -> Workspace:
    owner = await new_user(db)
    workspace, _ = await repo.claim_workspace(db, owner.id, f"tenant-{owner.id}", "sa-tenant-admin", "basic")
    done = await repo.finish_provisioning(db, workspace.id, "uid-owner", AuditEvent(
        "WorkspaceProvisioned", owner.id, workspace.id, None, {}))
    assert done is not None
    return done


async def test_a_new_workspaces_owner_is_its_admin_and_their_row_follows_its_account(db: Database) -> None:
    owner = await new_user(db)
    workspace, _ = await repo.claim_workspace(db, owner.id, f"tenant-{owner.id}", "sa-tenant-admin", "basic")
    member = await member_rows.membership(db, workspace.id, owner.id)
    assert member is not None and (member.role, member.service_account, member.service_account_uid) == (
        "admin", "sa-tenant-admin", None)
    await repo.finish_provisioning(db, workspace.id, "uid-1", AuditEvent("WorkspaceProvisioned", owner.id,
                                                                          workspace.id, None, {}))
    member = await member_rows.membership(db, workspace.id, owner.id)
    assert member is not None and member.service_account_uid == "uid-1"
    [(held, as_member)] = await member_rows.memberships_of(db, owner.id)
    assert held.id == workspace.id and as_member.role == "admin"


async def test_a_sign_in_accepts_the_invitations_of_its_email(db: Database) -> None:
    kube = FakeCluster()
    workspace = await new_workspace(db)
    elsewhere = await new_workspace(db)
    person = await new_user(db)
    async with db.transaction() as connection:
        await member_rows.invite(connection, workspace.id, person.email.upper(), None, "edit", workspace.user_id,
                                 AuditEvent("AddMember", workspace.user_id, workspace.id, None, {}))
        await member_rows.invite(connection, elsewhere.id, person.email, "org-b", "view", elsewhere.user_id,
                                 AuditEvent("AddMember", elsewhere.user_id, elsewhere.id, None, {}))
    await members.signed_in(db, kube, ClusterRoles(), DEFAULT_TIERS, person, "org-a", person.email, [])
    member = await member_rows.membership(db, workspace.id, person.id)
    assert member is not None and (member.role, member.via, member.added_by) == ("edit", "direct", workspace.user_id)
    assert member.service_account == f"member-{person.id}" and member.service_account_uid is None
    assert (await member_rows.roster(db, workspace.id))[1] == []  # the invitation is gone
    # Invited through another provider only: not accepted through this one.
    assert await member_rows.membership(db, elsewhere.id, person.id) is None
    assert len((await member_rows.roster(db, elsewhere.id))[1]) == 1
    rows = await repo.query_audit(db, workspace_id=workspace.id, user_id=person.id, action="AddMember")
    assert [r["details"]["via"] for r in rows] == ["invitation"]
    assert kube.objects == {}  # made at their first credential, not at sign-in


async def test_a_providers_group_grants_its_role_and_the_same_name_elsewhere_grants_nothing(db: Database) -> None:
    kube = FakeCluster()
    first, second = await new_workspace(db), await new_workspace(db)
    granted: list[tuple[Workspace, str, str, Role]] = [
        (first, "org-a", "devs", "edit"), (first, "org-a", "leads", "admin"), (second, "org-b", "devs", "admin")]
    for workspace, provider, group, role in granted:
        async with db.transaction() as connection:
            await member_rows.bind_group(connection, workspace.id, provider, group, role, workspace.user_id,
                                         AuditEvent("AddMember", workspace.user_id, workspace.id, None, {}))
    person = await new_user(db)
    await members.signed_in(db, kube, ClusterRoles(), DEFAULT_TIERS, person, "org-a", person.email, ["devs"])
    member = await member_rows.membership(db, first.id, person.id)
    assert member is not None and (member.role, member.via, member.group_provider, member.group_name) == (
        "edit", "group", "org-a", "devs")
    assert await member_rows.membership(db, second.id, person.id) is None

    await members.signed_in(db, kube, ClusterRoles(), DEFAULT_TIERS, person, "org-a", person.email, ["devs", "leads"])
    member = await member_rows.membership(db, first.id, person.id)
    assert member is not None and member.role == "admin"  # the binding granting the most

    await members.signed_in(db, kube, ClusterRoles(), DEFAULT_TIERS, person, "org-a", person.email, [])
    assert await member_rows.membership(db, first.id, person.id) is None  # out of the groups, out of the workspace
    rows = await repo.query_audit(db, workspace_id=first.id, action="RemoveMember")
    assert [r["details"]["why"] for r in rows] == ["no longer in the group"]


async def test_a_role_set_by_an_admin_is_theirs_not_the_groups(db: Database) -> None:
    kube = FakeCluster()
    workspace = await new_workspace(db)
    owner = await repo.get_user(db, workspace.user_id)
    assert owner is not None
    async with db.transaction() as connection:
        await member_rows.bind_group(connection, workspace.id, "org-a", "devs", "view", owner.id,
                                     AuditEvent("AddMember", owner.id, workspace.id, None, {}))
    person = await new_user(db)
    await members.signed_in(db, kube, ClusterRoles(), DEFAULT_TIERS, person, "org-a", person.email, ["devs"])
    changed = await members.change_role(db, kube, ClusterRoles(), workspace, owner, person.id, "edit", None)
    assert (changed.role, changed.via) == ("edit", "direct")
    await members.signed_in(db, kube, ClusterRoles(), DEFAULT_TIERS, person, "org-a", person.email, [])
    member = await member_rows.membership(db, workspace.id, person.id)
    assert member is not None and member.role == "edit"




async def test_the_last_admin_is_neither_demoted_nor_removed(db: Database) -> None:
    """Through the routes the owner is always an admin member (409
    `owner_stays_admin` first), so the last-admin guard is reached only by a
    workspace whose owner row is gone: made so here, as test setup."""
    kube = FakeCluster()
    workspace = await new_workspace(db)
    owner = await repo.get_user(db, workspace.user_id)
    admin = await new_user(db)
    assert owner is not None
    async with db.transaction() as connection:
        await member_rows.add_member(connection, workspace.id, admin.id, "admin", f"member-{admin.id}", owner.id,
                                     AuditEvent("AddMember", owner.id, workspace.id, None, {}))
        await connection.execute("DELETE FROM workspace_members WHERE workspace_id = $1 AND user_id = $2",
                                 workspace.id, owner.id)
    with pytest.raises(Conflict) as demoted:
        await members.change_role(db, kube, ClusterRoles(), workspace, owner, admin.id, "edit", None)
    with pytest.raises(Conflict) as removed:
        await members.remove(db, kube, workspace, owner, admin.id, None)
    assert demoted.value.code == removed.value.code == "last_admin"
    member = await member_rows.membership(db, workspace.id, admin.id)
    assert member is not None and member.role == "admin"
    assert await repo.query_audit(db, workspace_id=workspace.id, action="ChangeRole") == []
    assert await repo.query_audit(db, workspace_id=workspace.id, action="RemoveMember") == []
