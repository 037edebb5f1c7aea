"""Team workspaces: members, their roles, and the ServiceAccount that is
each of them in the workspace namespace.

Each member is a ServiceAccount of their own (`member-<user id>`; the
owner's is `sa-tenant-admin`), bound by a RoleBinding of the same name
(the owner's: `tenant-admin`) to their role's ClusterRole. So the API server
enforces the role on every path, a downloaded kubeconfig included, and its
audit log names the person's account.

- A member's objects are made at their first credential (`seat`), not when
  they are added: adding and inviting then look alike whether or not the
  person has an account, and a sign-in never waits on the cluster.
- Changing a role deletes the old binding before the database says so
  (authorisation ends at the next request), then binds the new role.
- Removing a member, or suspending a user, deletes the binding and the
  account, and revokes each of their credentials (provisioning.revocation),
  before the row changes: every token of it stops authenticating.
  A failure part-way leaves less access, never more; repeating the call (or
  `reconcile`) finishes it.
- New objects for an account whose old ones were deleted less than
  TOKEN_CACHE_GRACE_SECONDS ago are bound only once the API server's token
  cache can hold none of the old tokens (RBAC matches the account by name).

Every change runs under the workspace's status lock, so it never
interleaves with a suspension or resume of the same workspace, and the
database's triggers tell every replica (`member_changed`): the cached
membership goes and that member's open streams end.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from typing import Any, Iterable, Mapping

from provisioning import manifests, revocation, roles
from provisioning.access import Seat
from provisioning.db import members as rows
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import ClusterUnavailable, Conflict, NotFound
from provisioning.fleet import Fleet, client_for
from provisioning.kube.client import KubeApi
from provisioning.kube.errors import KubeNotFound
from provisioning.kube.tokens import TOKEN_CACHE_GRACE_SECONDS
from provisioning.models import AuditEvent, GroupBinding, Invitation, Member, Role, User, Workspace
from provisioning.onboarding import ensure_object
from provisioning.roles import ClusterRoles
from provisioning.tiers import DEFAULT_MEMBERS, Tier

log = logging.getLogger(__name__)

MEMBER_CHANGES_WAIT_SECONDS = 30.0
"""How long a membership change waits for a suspension, resume or other change of the workspace."""
_RANK: dict[Role, int] = {"view": 0, "edit": 1, "admin": 2}
_RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _lock(db: Database, workspace_id: uuid.UUID) -> Any:
    return repo.workspace_status_lock(db, workspace_id, wait_seconds=MEMBER_CHANGES_WAIT_SECONDS)


def _account_path(workspace: Workspace, account: str) -> str:
    return f"/api/v1/namespaces/{workspace.namespace}/serviceaccounts/{account}"


def _binding_path(workspace: Workspace, account: str) -> str:
    return f"{_RBAC}/namespaces/{workspace.namespace}/rolebindings/{roles.binding_name(account)}"


def grace_left(member: Member, now: datetime.datetime) -> float:
    """Seconds until the API server's token cache can hold no token of the
    member's deleted objects (0 if there were none). Pure."""
    if member.revoked_at is None:
        return 0.0
    return max(0.0, TOKEN_CACHE_GRACE_SECONDS - (now - member.revoked_at).total_seconds())


def strongest(bindings: Iterable[GroupBinding]) -> dict[uuid.UUID, GroupBinding]:
    """Per workspace, the binding that grants the most. Pure."""
    chosen: dict[uuid.UUID, GroupBinding] = {}
    for binding in bindings:
        held = chosen.get(binding.workspace_id)
        if held is None or _RANK[binding.role] > _RANK[held.role]:
            chosen[binding.workspace_id] = binding
    return chosen


# -- the cluster's side ---------------------------------------------------------

async def _delete(kube: KubeApi, path: str) -> None:
    """Gone, and not held back by finalizers (the gateway may remove those
    of an object being deleted, and tenants may not add them to ours)."""
    try:
        deleted = await kube.delete(path)
    except KubeNotFound:
        return
    if (deleted.get("metadata") or {}).get("finalizers"):
        try:
            await kube.merge_patch(path, {"metadata": {"finalizers": None}})
        except KubeNotFound:
            pass


async def _bind(kube: KubeApi, workspace: Workspace, account: str, cluster_role: str) -> str | None:
    """The account's binding, to `cluster_role`. A binding's role cannot be
    changed: one bound to another role is deleted and made again. What was
    done, in words (None: nothing)."""
    path = _binding_path(workspace, account)
    try:
        found: dict[str, Any] | None = await kube.get(path)
    except KubeNotFound:
        found = None
    bound_to = None if found is None else (found.get("roleRef") or {}).get("name")
    if bound_to == cluster_role:
        return None
    if found is not None:
        await _delete(kube, path)
    await ensure_object(kube, manifests.role_binding_step(workspace.namespace, str(workspace.id), cluster_role,
                                                          account), str(workspace.id))
    return f"RoleBinding {roles.binding_name(account)} bound to {cluster_role}" + (
        f" (was {bound_to})" if bound_to else " (was missing)")


async def _revoke(kube: KubeApi, workspace: Workspace, account: str) -> None:
    """The binding first (authorisation ends), then the account (every
    token of it stops authenticating)."""
    await _delete(kube, _binding_path(workspace, account))
    await _delete(kube, _account_path(workspace, account))


async def seat(db: Database, kube: KubeApi, cluster_roles: ClusterRoles, wanted: Seat) -> Seat:
    """The seat with its account made: the member's ServiceAccount and
    RoleBinding created if they are not (their first credential, or the
    first after a suspension). The owner's account is the workspace's."""
    if wanted.service_account_uid is not None:
        return wanted
    workspace = wanted.workspace
    user_id = wanted.member.user_id if wanted.member is not None else workspace.user_id
    async with _lock(db, workspace.id):
        current = await repo.get_workspace(db, workspace.id)
        member = await rows.membership(db, workspace.id, user_id)
        if current is None or current.status != "provisioned" or member is None:
            raise Conflict("your access to this workspace changed meanwhile; repeat the request",
                           code="membership_changed")
        if member.service_account_uid is None:
            wait = grace_left(member, datetime.datetime.now(datetime.timezone.utc))
            if wait:
                await asyncio.sleep(wait)
            account = await ensure_object(kube, manifests.service_account_step(
                current.namespace, str(current.id), member.service_account), str(current.id))
            await _bind(kube, current, member.service_account, cluster_roles.of(member.role))
            owner = member.user_id == current.user_id
            async with db.transaction() as connection:
                member = await rows.set_account(connection, current.id, member.user_id,
                                                str(account["metadata"]["uid"]), owner=owner) or member
            if owner:
                current = await repo.get_workspace(db, current.id) or current
    if wanted.member is None:
        return Seat(current, None, member.service_account, member.service_account_uid)
    return Seat(current, member, member.service_account, member.service_account_uid)


# -- changes by a workspace admin ------------------------------------------------

def allowed_members(tiers: Mapping[str, Tier], workspace: Workspace) -> int:
    """How many members and pending invitations the workspace's tier allows."""
    tier = tiers.get(workspace.tier)
    return tier.members if tier is not None else DEFAULT_MEMBERS


def _full(allowed: int) -> Conflict:
    return Conflict(f"this workspace has {allowed} members and invitations, as many as its tier allows; remove "
                    "someone first", code="member_limit")


async def invite(db: Database, workspace: Workspace, actor: User, email: str, role: Role, provider: str | None,
                 ip_address: str | None, *, allowed: int) -> Invitation:
    """Always an invitation, whether or not the email has an account: it
    becomes a membership when an account of that verified email signs in.
    A pending invitation holds one of the tier's `allowed` places."""
    async with db.transaction() as connection:
        if await rows.seats_taken(connection, workspace.id) >= allowed:
            raise _full(allowed)
        return await rows.invite(connection, workspace.id, email, provider, role, actor.id, AuditEvent(
            "AddMember", actor.id, workspace.id, ip_address,
            {"email": email, "role": role, "provider": provider, "status": "invited"}))


async def bind_group(db: Database, workspace: Workspace, actor: User, provider: str, group: str, role: Role,
                     ip_address: str | None) -> GroupBinding:
    """A group binding takes no place itself: each person it makes a member
    does, at their sign-in, while there is room (`signed_in`)."""
    async with db.transaction() as connection:
        return await rows.bind_group(connection, workspace.id, provider, group, role, actor.id, AuditEvent(
            "AddMember", actor.id, workspace.id, ip_address, {"group": group, "provider": provider, "role": role}))


async def change_role(db: Database, kube: KubeApi, cluster_roles: ClusterRoles, workspace: Workspace, actor: User,
                      user_id: uuid.UUID, role: Role, ip_address: str | None, *, direct: bool = True) -> Member:
    async with _lock(db, workspace.id):
        member = await rows.membership(db, workspace.id, user_id)
        if member is None:
            raise NotFound("no such member")
        if user_id == workspace.user_id and role != "admin":
            raise Conflict("the workspace's owner stays an admin", code="owner_stays_admin")
        async with db.transaction() as connection:
            if member.role == "admin" and role != "admin" and not await rows.admins_left(connection, workspace.id,
                                                                                         user_id):
                raise Conflict("the workspace's last admin cannot be demoted", code="last_admin")
        made = member.service_account_uid is not None
        if made and member.role != role:
            await _delete(kube, _binding_path(workspace, member.service_account))  # the old role ends first
        if member.role != role or (direct and member.via != "direct"):
            async with db.transaction() as connection:
                member = await rows.set_role(connection, workspace.id, user_id, role, AuditEvent(
                    "ChangeRole", actor.id, workspace.id, ip_address,
                    {"member": str(user_id), "from": member.role, "to": role}), direct=direct) or member
        if made:  # converged also on a repeat: a cut-short change leaves the binding to make
            await _bind(kube, workspace, member.service_account, cluster_roles.of(role))
    return member


async def remove(db: Database, kube: KubeApi, workspace: Workspace, actor: User | None, user_id: uuid.UUID,
                 ip_address: str | None, *, why: str = "removed") -> None:
    async with _lock(db, workspace.id):
        member = await rows.membership(db, workspace.id, user_id)
        if member is None:
            raise NotFound("no such member")
        if user_id == workspace.user_id:
            raise Conflict("the workspace's owner cannot be removed", code="owner_stays_admin")
        async with db.transaction() as connection:
            if member.role == "admin" and not await rows.admins_left(connection, workspace.id, user_id):
                raise Conflict("the workspace's last admin cannot be removed", code="last_admin")
        await _revoke(kube, workspace, member.service_account)
        await revocation.revoke_all(db, kube, workspace.id, user_id, actor, ip_address, why=f"member {why}")
        async with db.transaction() as connection:
            await rows.remove_member(connection, workspace.id, user_id, AuditEvent(
                "RemoveMember", actor.id if actor else None, workspace.id, ip_address,
                {"member": str(user_id), "role": member.role, "service_account": member.service_account,
                 "why": why}))


async def unbind_group(db: Database, kube: KubeApi, workspace: Workspace, actor: User, provider: str, group: str,
                       ip_address: str | None) -> None:
    """The binding goes, and with it every membership it made (another
    binding may grant the person again at their next sign-in)."""
    async with db.transaction() as connection:
        binding = await rows.unbind_group(connection, workspace.id, provider, group)
        if binding is None:
            raise NotFound("no such group binding")
        await repo.record_audit(connection, AuditEvent("RemoveMember", actor.id, workspace.id, ip_address,
                                                       {"group": group, "provider": provider}))
    for member in await rows.group_members(db, workspace.id, provider, group):
        try:
            await remove(db, kube, workspace, actor, member.user_id, ip_address, why="group unbound")
        except (NotFound, Conflict):
            pass  # gone meanwhile, or kept as the last admin


async def uninvite(db: Database, workspace: Workspace, actor: User, email: str, ip_address: str | None) -> None:
    async with db.transaction() as connection:
        if await rows.uninvite(connection, workspace.id, email) is None:
            raise NotFound("no such invitation")
        await repo.record_audit(connection, AuditEvent("RemoveMember", actor.id, workspace.id, ip_address,
                                                       {"email": email, "status": "invited"}))


# -- users ---------------------------------------------------------------------

async def revoke_user(db: Database, kube: KubeApi | Fleet, user_id: uuid.UUID, actor: User,
                      ip_address: str | None) -> list[str]:
    """A suspended user's account deleted in every workspace they belong
    to: their downloaded kubeconfigs stop authenticating. Made again at
    their first credential after they are resumed. The namespaces done."""
    done = []
    for workspace, member in await rows.memberships_of(db, user_id):
        if member.service_account_uid is None or workspace.status != "provisioned":
            continue  # nothing made, or the workspace's own suspension took it
        async with _lock(db, workspace.id):
            current = await rows.membership(db, workspace.id, user_id)
            if current is None or current.service_account_uid is None:
                continue
            here = client_for(kube, workspace.cluster)  # each workspace on its own cluster
            await _revoke(here, workspace, current.service_account)
            await revocation.revoke_all(db, here, workspace.id, user_id, actor, ip_address, why="user suspended")
            async with db.transaction() as connection:
                await rows.set_account(connection, workspace.id, user_id, None, revoked=True,
                                       owner=user_id == workspace.user_id)
                await repo.record_audit(connection, AuditEvent(
                    "SuspendUser", actor.id, workspace.id, ip_address,
                    {"target_user": str(user_id), "step": "service_account_deleted",
                     "service_account": current.service_account}))
        done.append(workspace.namespace)
    return done


async def signed_in(db: Database, kube: KubeApi | Fleet, cluster_roles: ClusterRoles, tiers: Mapping[str, Tier],
                    user: User, provider: str,
                    email: str, groups: Iterable[str]) -> None:
    """What a sign-in through `provider` (whose email it verified) changes:
    invitations of that email become memberships, and the memberships the
    provider's groups grant follow the groups the token lists now."""
    for invitation in await rows.pending_invitations(db, email, provider):
        async with db.transaction() as connection:
            await rows.accept_invitation(connection, invitation, user.id, roles.member_account(user.id, owner=False),
                                         AuditEvent("AddMember", user.id, invitation.workspace_id, None,
                                                    {"member": str(user.id), "role": invitation.role,
                                                     "via": "invitation", "invited_by": str(invitation.added_by)}))
    wanted = strongest(await rows.bindings_for(db, provider, groups))
    held = {m.workspace_id: m for m in await rows.group_memberships_of(db, user.id)}
    for workspace_id, binding in wanted.items():
        member = held.pop(workspace_id, None)
        if member is None:
            workspace = await repo.get_workspace(db, workspace_id)
            if workspace is None:
                continue
            async with db.transaction() as connection:
                if await rows.seats_taken(connection, workspace_id) >= allowed_members(tiers, workspace):
                    log.warning("a group binding could not make a member: the workspace is full",
                                extra={"workspace_id": str(workspace_id), "group": binding.group})
                    continue
                await rows.add_member(connection, workspace_id, user.id, binding.role,
                                      roles.member_account(user.id, owner=False), None,
                                      AuditEvent("AddMember", user.id, workspace_id, None,
                                                 {"member": str(user.id), "role": binding.role,
                                                  "group": binding.group, "provider": provider}),
                                      group=(provider, binding.group))
        elif member.role != binding.role:
            workspace = await repo.get_workspace(db, workspace_id)
            if workspace is not None:
                await change_role(db, client_for(kube, workspace.cluster), cluster_roles, workspace, user, user.id,
                                  binding.role, None, direct=False)
    for workspace_id, member in held.items():
        if member.group_provider != provider:
            continue  # another provider's groups are that provider's to say
        workspace = await repo.get_workspace(db, workspace_id)
        if workspace is not None:
            try:
                await remove(db, client_for(kube, workspace.cluster), workspace, None, user.id, None,
                             why="no longer in the group")
            except (NotFound, Conflict):
                pass


async def converge(db: Database, kube: KubeApi, cluster_roles: ClusterRoles, workspace: Workspace,
                   changes: list[str]) -> None:
    """`reconcile`'s part: a provisioned workspace's member objects brought
    to its rows, what was done added to `changes` as it goes. A member whose
    account is gone (or is another) is revoked (made again at their next
    credential); one whose binding is missing or of another role is bound
    to their role; bindings named for people who are no longer members go,
    with their accounts."""
    if workspace.status != "provisioned":
        return  # suspension holds what there is; resume makes it again
    found = await rows.all_members(db, workspace.id)
    accounts = {m.service_account for m in found}
    collection = f"{_RBAC}/namespaces/{workspace.namespace}/rolebindings"
    async for page in kube.list_pages(collection, label_selector=f"{manifests.WORKSPACE_LABEL}={workspace.id}"):
        for binding in page:
            name = binding["metadata"]["name"]
            if name.startswith(roles.MEMBER_PREFIX) and name not in accounts:
                await _revoke(kube, workspace, name)
                changes.append(f"RoleBinding and ServiceAccount {name} deleted (no longer a member)")
    for member in found:
        if member.service_account_uid is None:
            continue
        async with _lock(db, workspace.id):
            try:
                account = await kube.get(_account_path(workspace, member.service_account))
            except KubeNotFound:
                account = {}
            if (account.get("metadata") or {}).get("uid") != member.service_account_uid:
                await _revoke(kube, workspace, member.service_account)
                async with db.transaction() as connection:
                    await rows.set_account(connection, workspace.id, member.user_id, None, revoked=True,
                                           owner=member.user_id == workspace.user_id)
                changes.append(f"ServiceAccount {member.service_account} was missing or replaced: revoked")
                continue
            done = await _bind(kube, workspace, member.service_account, cluster_roles.of(member.role))
            if done is not None:
                changes.append(done)


def require_account(seat: Seat) -> str:
    """The seat's account UID, which `seat` has made."""
    if seat.service_account_uid is None:
        raise ClusterUnavailable("the member's ServiceAccount is not made yet; retry")
    return seat.service_account_uid
