"""Kubeconfig issuance and revocation: membership check, a binding Secret,
TokenRequest, audit row, render.

Order matters.
1. The issuance's row is written first (not yet issued): whatever happens
   next, the binding Secret is on record, and swept once expired.
2. A data-less Secret of the gateway's own type is made in the workspace
   namespace, and the token is minted bound to it (`boundObjectRef`, name
   and UID): deleting the Secret makes the API server refuse the token.
   That is how one kubeconfig is revoked alone (`revoke`).
3. The row is confirmed with the token's `jti` (which the API server writes
   into its own audit log) and the audit row, in one statement, and only if
   the workspace is still provisioned and the caller's account the same
   one: a suspension, a removal or a user's suspension that lands while the
   token is being minted wins.
If anything fails or is refused after 1, the freshly minted token is dropped
unseen and its Secret deleted: no kubeconfig without its audit row. The
token itself is never written anywhere.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import replace
from typing import Mapping

from provisioning import access, manifests, members, revocation
from provisioning.access import Seat
from provisioning.db import credentials as credential_rows
from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Conflict, Forbidden, NotFound
from provisioning.kube.client import KubeApi
from provisioning.kube.tokens import request_token
from provisioning.kubeconfig import render_kubeconfig
from provisioning.models import AuditEvent, Credential, IssuedToken, User, Workspace
from provisioning.roles import ClusterRoles
from provisioning.tiers import DEFAULT_LIVE_CREDENTIALS, Tier

MAX_USER_AGENT = 512
_AUDITED_AS = {"kubeconfig": "kubeconfig", "token": "credential"}
"""An issuance's kind as its audit row's `via` has always named it."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


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


async def issue_token(db: Database, kube: KubeApi, cluster_roles: ClusterRoles, tiers: Mapping[str, Tier],
                      user: User, workspace_id: uuid.UUID | None, *, ip_address: str | None, ttl_seconds: int,
                      kind: str = "kubeconfig", user_agent: str | None = None) -> tuple[Seat, IssuedToken]:
    """Mint a token of the caller's own account in the workspace (made
    first if it is not: members.seat), bound to a Secret of its own, and
    commit its `IssueKubeconfig` audit row: the one path for a downloaded
    kubeconfig and for a token fetched by the kubectl exec plugin (`kind`
    tells them apart)."""
    seat = await members.seat(db, kube, cluster_roles, await usable_seat(db, user, workspace_id))
    workspace = seat.workspace
    tier = tiers.get(workspace.tier)
    allowed = tier.live_credentials if tier is not None else DEFAULT_LIVE_CREDENTIALS
    credential_id = uuid.uuid4()
    pending = Credential(
        id=credential_id, user_id=user.id, workspace_id=workspace.id, kind=kind, namespace=workspace.namespace,
        service_account=seat.service_account, secret_name=manifests.credential_secret_name(credential_id), jti=None,
        issued_at=_now(), expires_at=_now() + datetime.timedelta(seconds=ttl_seconds), ip_address=ip_address,
        user_agent=(user_agent or "")[:MAX_USER_AGENT] or None)
    if not await credential_rows.begin(db, pending, within=allowed):
        # Each live one holds a Secret in the namespace; the quota has room for this many.
        raise Conflict(f"this workspace holds {allowed} live credentials, as many as its tier allows; revoke "
                          "some (DELETE /api/v1/credentials/{id}) or wait for them to expire",
                          code="too_many_credentials")
    try:
        secret = await kube.create(f"/api/v1/namespaces/{workspace.namespace}/secrets", manifests.credential_secret(
            workspace.namespace, str(workspace.id), str(credential_id)))
        bound = {"name": pending.secret_name, "uid": str(secret["metadata"]["uid"])}
        issued = await request_token(kube, workspace.namespace, seat.service_account, ttl_seconds, bound_to=bound)
        recorded = await credential_rows.finish(
            db, credential_id, issued.credential_id, issued.expires_at,
            seat.member.user_id if seat.member else workspace.user_id, members.require_account(seat), AuditEvent(
                "IssueKubeconfig", user.id, workspace.id, ip_address, {
                    "namespace": workspace.namespace, "service_account": seat.service_account, "role": seat.role,
                    "credential": str(credential_id), "credential_id": issued.credential_id,
                    "expires_at": issued.expires_at.isoformat(), "via": _AUDITED_AS[kind]}))
    except BaseException:
        await revocation.unbind_quietly(kube, pending)  # the token is dropped unseen; so is what it was bound to
        raise
    if not recorded:
        await revocation.unbind_quietly(kube, pending)
        raise Forbidden("this workspace was suspended, or your access to it changed, while the kubeconfig "
                        "was being issued", code="workspace_suspended")
    return seat, replace(issued, issuance_id=str(credential_id))


async def issue_kubeconfig(db: Database, kube: KubeApi, cluster_roles: ClusterRoles, tiers: Mapping[str, Tier],
                           user: User, workspace_id: uuid.UUID | None, *, ip_address: str | None, ttl_seconds: int,
                           public_server: str, public_ca_base64: str, user_agent: str | None = None) -> str:
    seat, issued = await issue_token(db, kube, cluster_roles, tiers, user, workspace_id, ip_address=ip_address,
                                     ttl_seconds=ttl_seconds, user_agent=user_agent)
    return render_kubeconfig(server=public_server, ca_base64=public_ca_base64,
                             namespace=seat.workspace.namespace, token=issued.token, user=seat.service_account)
