"""Kubeconfig issuance: ownership check, TokenRequest, audit row, render.

Order matters. The token is minted first so that its `jti` can go into the
audit row (joining our record with the API server's own audit log); the row
is committed before the kubeconfig leaves the process, and only if the
workspace is still provisioned with the same ServiceAccount: a suspension
that lands while the token is being minted wins. If the audit write fails or
is refused, the freshly minted token is dropped unseen: no kubeconfig without
its audit row. The token itself is never written anywhere.
"""

from __future__ import annotations

import uuid

from provisioning import access
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Forbidden, NotFound
from provisioning.kube.client import KubeApi
from provisioning.kube.tokens import request_token
from provisioning.kubeconfig import render_kubeconfig
from provisioning.models import AuditEvent, IssuedToken, User, Workspace


async def usable_workspace(db: Database, user: User, workspace_id: uuid.UUID | None) -> Workspace:
    """The workspace a credential is for: the named one, else the caller's
    only one, if `user` may use it now (provisioning.access)."""
    if workspace_id is None:
        owned = await repo.workspaces_of(db, user.id)
        if not owned:
            raise NotFound("you have no workspace; create one with POST /api/v1/workspaces/init", code="no_workspace")
        return access.usable(user, owned[0])
    return access.usable(user, await repo.get_workspace(db, workspace_id))


async def issue_token(db: Database, kube: KubeApi, user: User, workspace_id: uuid.UUID | None, *,
                      ip_address: str | None, ttl_seconds: int, via: str = "kubeconfig") -> tuple[Workspace, IssuedToken]:
    """Mint a tenant token and commit its `IssueKubeconfig` audit row: the one
    path for a downloaded kubeconfig and for a token fetched by the kubectl
    exec plugin (`via` tells them apart in the row)."""
    workspace = await usable_workspace(db, user, workspace_id)
    issued = await request_token(kube, workspace.namespace, workspace.service_account, ttl_seconds)
    recorded = await repo.record_issuance(db, workspace, AuditEvent(
        "IssueKubeconfig", user.id, workspace.id, ip_address,
        {
            "namespace": workspace.namespace,
            "service_account": workspace.service_account,
            "credential_id": issued.credential_id,
            "expires_at": issued.expires_at.isoformat(),
            "via": via,
        },
    ))
    if not recorded:
        raise Forbidden("this workspace was suspended while the kubeconfig was being issued",
                        code="workspace_suspended")
    return workspace, issued


async def issue_kubeconfig(db: Database, kube: KubeApi, user: User, workspace_id: uuid.UUID | None, *,
                           ip_address: str | None, ttl_seconds: int, public_server: str,
                           public_ca_base64: str) -> str:
    workspace, issued = await issue_token(db, kube, user, workspace_id, ip_address=ip_address,
                                          ttl_seconds=ttl_seconds)
    return render_kubeconfig(server=public_server, ca_base64=public_ca_base64,
                             namespace=workspace.namespace, token=issued.token)
