"""Who may see and use a workspace: one decision for every route. Pure.

- Seeing one (`GET /api/v1/workspaces/{id}`): its owner or an admin. Anyone
  else gets 404, exactly as for a workspace that does not exist, so ids
  cannot be probed.
- Using one (kubeconfigs, tokens, the proxy): the same people, and only
  while it is provisioned: 403 `workspace_suspended` when suspended, 409
  `workspace_not_ready` while onboarding has not finished. An admin using a
  tenant's workspace acts as that tenant's ServiceAccount, recorded under
  the admin's own user id, as a downloaded kubeconfig always allowed.
"""

from __future__ import annotations

from provisioning.errors import Conflict, Forbidden, NotFound
from provisioning.models import User, Workspace


def visible(user: User, workspace: Workspace | None) -> Workspace:
    if workspace is None or (workspace.user_id != user.id and not user.is_admin):
        raise NotFound("no such workspace")
    return workspace


def usable(user: User, workspace: Workspace | None) -> Workspace:
    workspace = visible(user, workspace)
    if workspace.status == "suspended":
        raise Forbidden("this workspace is suspended", code="workspace_suspended")
    if workspace.status != "provisioned":
        raise Conflict("this workspace is still being provisioned; repeat POST /api/v1/workspaces/init",
                       code="workspace_not_ready")
    return workspace
