"""Who may see, use and manage a workspace, and as which account: one
decision for every route and for the proxy. Pure.

- Seeing one (`GET /api/v1/workspaces/{id}`, its members): its members and
  the gateway's admins. Anyone else gets 404, exactly as for a workspace
  that does not exist, so ids cannot be probed.
- Using one (kubeconfigs, tokens, the proxy): the same people, and only
  while it is provisioned: 403 `workspace_suspended` when suspended, 409
  `workspace_not_ready` while onboarding has not finished. A member acts as
  their own ServiceAccount (`Seat`); a gateway admin who is not a member
  acts as the owner's (`sa-tenant-admin`), recorded under the admin's own
  user id, as a downloaded kubeconfig always allowed.
- Managing its members: its admin members and the gateway's admins (403
  `workspace_admin_required` for the other members).
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioning import roles
from provisioning.errors import Conflict, Forbidden, NotFound
from provisioning.models import Member, Role, User, Workspace


@dataclass(frozen=True)
class Seat:
    """The account a caller acts as in a workspace."""

    workspace: Workspace
    member: Member | None
    """The caller's membership; None for a gateway admin who is not a member."""
    service_account: str
    service_account_uid: str | None
    """None while the member's account is not made (provisioning.members.seat makes it)."""

    @property
    def role(self) -> Role:
        return self.member.role if self.member is not None else "admin"


def visible(user: User, workspace: Workspace | None, member: Member | None) -> Workspace:
    """`member` is `user`'s membership of `workspace`, if any."""
    if workspace is None or (member is None and not user.is_admin):
        raise NotFound("no such workspace")
    return workspace


def usable(user: User, workspace: Workspace | None, member: Member | None) -> Seat:
    workspace = visible(user, workspace, member)
    if workspace.status == "suspended":
        raise Forbidden("this workspace is suspended", code="workspace_suspended")
    if workspace.status != "provisioned":
        raise Conflict("this workspace is still being provisioned; repeat POST /api/v1/workspaces/init",
                       code="workspace_not_ready")
    if member is None:
        return Seat(workspace, None, workspace.service_account, workspace.service_account_uid)
    return Seat(workspace, member, member.service_account, member.service_account_uid)


def manageable(user: User, workspace: Workspace | None, member: Member | None) -> Workspace:
    """The workspace, if `user` may manage its members."""
    workspace = visible(user, workspace, member)
    if not roles.may_manage(member.role if member else None, gateway_admin=user.is_admin):
        raise Forbidden("only the workspace's admins may manage its members", code="workspace_admin_required")
    return workspace
