"""Kubeconfig issuance: membership check, TokenRequest, audit row, render.

Order matters. The token is minted first so that its `jti` can go into the
audit row (joining our record with the API server's own audit log); the row
is committed before the kubeconfig leaves the process, and only if the
workspace is still provisioned and the caller's account the same one: a
suspension, a removal or a user's suspension that lands while the token is
being minted wins. If the audit write fails or
is refused, the freshly minted token is dropped unseen: no kubeconfig without
its audit row. The token itself is never written anywhere.
"""

from __future__ import annotations

import uuid

from provisioning import access, members
from provisioning.access import Seat
from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Forbidden, NotFound
from provisioning.kube.client import KubeApi
from provisioning.kube.tokens import request_token
from provisioning.kubeconfig import render_kubeconfig
from provisioning.models import AuditEvent, IssuedToken, User, Workspace
from provisioning.roles import ClusterRoles


async def usable_seat(db: Database, user: User, workspace_id: uuid.UUID | None) -> Seat:
    """The account a credential is for: the caller's own in the named
    workspace, else in the workspace they own, if they may use it now
    (provisioning.access)."""
    if workspace_id is None:
        owned = await repo.workspaces_of(db, user.id)
        if not owned:
            raise NotFound("you own no workspace; name one with workspace_id, or create yours with "
                           "POST /api/v1/workspaces/init", code="no_workspace")
        workspace: Workspace | None = owned[0]
    else:
        workspace = await repo.get_workspace(db, workspace_id)
    member = await member_rows.membership(db, workspace.id, user.id) if workspace is not None else None
    return access.usable(user, workspace, member)


async def issue_token(db: Database, kube: KubeApi, cluster_roles: ClusterRoles, user: User,
                      workspace_id: uuid.UUID | None, *, ip_address: str | None, ttl_seconds: int,
                      via: str = "kubeconfig") -> tuple[Seat, IssuedToken]:
    """Mint a token of the caller's own account in the workspace (made
    first if it is not: members.seat) and commit its `IssueKubeconfig`
    audit row: the one path for a downloaded kubeconfig and for a token
    fetched by the kubectl exec plugin (`via` tells them apart in the row)."""
    seat = await members.seat(db, kube, cluster_roles, await usable_seat(db, user, workspace_id))
    workspace = seat.workspace
    issued = await request_token(kube, workspace.namespace, seat.service_account, ttl_seconds)
    recorded = await repo.record_issuance(db, workspace, seat.member.user_id if seat.member else workspace.user_id,
                                          members.require_account(seat), AuditEvent(
        "IssueKubeconfig", user.id, workspace.id, ip_address,
        {
            "namespace": workspace.namespace,
            "service_account": seat.service_account,
            "role": seat.role,
            "credential_id": issued.credential_id,
            "expires_at": issued.expires_at.isoformat(),
            "via": via,
        },
    ))
    if not recorded:
        raise Forbidden("this workspace was suspended, or your access to it changed, while the kubeconfig "
                        "was being issued", code="workspace_suspended")
    return seat, issued


async def issue_kubeconfig(db: Database, kube: KubeApi, cluster_roles: ClusterRoles, user: User,
                           workspace_id: uuid.UUID | None, *, ip_address: str | None, ttl_seconds: int,
                           public_server: str, public_ca_base64: str) -> str:
    seat, issued = await issue_token(db, kube, cluster_roles, user, workspace_id, ip_address=ip_address,
                                     ttl_seconds=ttl_seconds)
    return render_kubeconfig(server=public_server, ca_base64=public_ca_base64,
                             namespace=seat.workspace.namespace, token=issued.token, user=seat.service_account)
