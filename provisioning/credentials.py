"""Kubeconfig issuance: membership check, a binding Secret, TokenRequest,
audit row.

Order matters.
1. The issuance's row is written first (not yet issued): whatever happens
   next, the binding Secret is on record, and swept once expired. Where
   the workspace has a spare (provisioning.spares), that row is the
   spare's, claimed, its Secret made already.
2. A data-less Secret of the gateway's own type is made in the workspace
   namespace (unless claimed), and the token is minted bound to it
   (`boundObjectRef`, name and UID): deleting the Secret makes the API
   server refuse the token.
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
from provisioning.models import AuditEvent, Credential, IssuedToken, User, Workspace
from provisioning.roles import ClusterRoles
from provisioning.spares import CLAIMABLE_SECONDS, SparePool
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
                      user: User, usable: Seat, *, ip_address: str | None, ttl_seconds: int,
                      kind: str = "kubeconfig", user_agent: str | None = None,
                      spares: SparePool | None = None) -> tuple[Seat, IssuedToken]:
    """Mint a token of the caller's own account in the workspace of
    `usable` (`usable_seat`; its account made first if it is not:
    members.seat), bound to a Secret of its own, and commit its
    `IssueKubeconfig` audit row: the one path for a downloaded kubeconfig
    and for a token fetched by the kubectl exec plugin (`kind` tells them
    apart). With `spares`, the Secret is a spare made ahead when the
    workspace has one, and the workspace is topped up afterwards."""
    seat = await members.seat(db, kube, cluster_roles, usable)
    workspace = seat.workspace
    tier = tiers.get(workspace.tier)
    allowed = tier.live_credentials if tier is not None else DEFAULT_LIVE_CREDENTIALS
    credential_id = uuid.uuid4()
    wanted = Credential(
        id=credential_id, user_id=user.id, workspace_id=workspace.id, kind=kind, namespace=workspace.namespace,
        service_account=seat.service_account, secret_name=manifests.credential_secret_name(credential_id), jti=None,
        issued_at=_now(), expires_at=_now() + datetime.timedelta(seconds=ttl_seconds), ip_address=ip_address,
        user_agent=(user_agent or "")[:MAX_USER_AGENT] or None)
    begun = await credential_rows.begin(db, wanted, within=allowed, claimable_seconds=CLAIMABLE_SECONDS)
    if begun is None:
        # Each live one holds a Secret in the namespace; the quota has room for this many.
        raise Conflict(f"this workspace holds {allowed} live credentials, as many as its tier allows; revoke "
                          "some (DELETE /api/v1/credentials/{id}) or wait for them to expire",
                          code="too_many_credentials")
    # A claimed spare is this issuance from now on, under the spare's id (its Secret's name).
    pending = replace(wanted, id=begun.id, secret_name=begun.secret_name)
    try:
        secret_uid = begun.secret_uid
        if secret_uid is None:
            secret = await kube.create(f"/api/v1/namespaces/{workspace.namespace}/secrets",
                                       manifests.credential_secret(workspace.namespace, str(workspace.id),
                                                                   str(pending.id)))
            secret_uid = str(secret["metadata"]["uid"])
        bound = {"name": pending.secret_name, "uid": secret_uid}
        issued = await request_token(kube, workspace.namespace, seat.service_account, ttl_seconds, bound_to=bound)
        recorded = await credential_rows.finish(
            db, pending.id, issued.credential_id, issued.expires_at,
            seat.member.user_id if seat.member else workspace.user_id, members.require_account(seat), AuditEvent(
                "IssueKubeconfig", user.id, workspace.id, ip_address, {
                    "namespace": workspace.namespace, "service_account": seat.service_account, "role": seat.role,
                    "credential": str(pending.id), "credential_id": issued.credential_id,
                    "expires_at": issued.expires_at.isoformat(), "via": _AUDITED_AS[kind]}))
    except BaseException:
        await revocation.unbind_quietly(kube, pending)  # the token is dropped unseen; so is what it was bound to
        raise
    if not recorded:
        await revocation.unbind_quietly(kube, pending)
        raise Forbidden("this workspace was suspended, or your access to it changed, while the kubeconfig "
                        "was being issued", code="workspace_suspended")
    if spares is not None:
        spares.after_issuance(kube, workspace, allowed)
    return seat, replace(issued, issuance_id=str(pending.id))
