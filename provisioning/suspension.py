"""Emergency suspension and resume.

Deleting the gateway's RoleBinding alone would not end access: RBAC is
checked per request, so issued tokens keep authenticating, and the tenant may
have bound its own roles. Suspension therefore (1) marks the workspace
suspended in the database, which every replica hears through NOTIFY and
which stops new kubeconfigs and proxied requests at once, (2) deletes every
RoleBinding in the namespace, and (3) replaces the tenant ServiceAccount:
its UID changes, so every token minted for the old one stops authenticating.
Each step is recorded in the audit log. A failure part-way answers 503 with
the workspace still suspended (fail closed); repeating the call finishes it.

Resume recreates the RoleBinding for the (already fresh) ServiceAccount, so old
kubeconfigs stay dead and only newly issued ones work. One subtlety: the API
server caches successful token checks for about 10 s, and RBAC matches the
ServiceAccount by name. A resume within that window would let an old token,
still cached as valid, meet the new RoleBinding; resume therefore waits until
the replacement ServiceAccount is older than the cache.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid

from provisioning import manifests
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import ClusterUnavailable, NotFound
from provisioning.kube.client import KubeClient
from provisioning.kube.errors import KubeNotFound
from provisioning.models import AuditEvent, User, Workspace
from provisioning.onboarding import ensure_object

_RBAC = "/apis/rbac.authorization.k8s.io/v1"
# The API server's token-authentication cache (~10 s), plus clock-skew margin.
TOKEN_CACHE_GRACE_SECONDS = 15.0


def seconds_to_wait(created: str | None, now: datetime.datetime, grace: float = TOKEN_CACHE_GRACE_SECONDS) -> float:
    """How long a resume must wait for tokens of the replaced ServiceAccount to
    drop out of the API server's authentication cache."""
    if not created:
        return grace
    made = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    return min(grace, max(0.0, grace - (now - made).total_seconds()))


async def _change_status(db: Database, workspace_id: uuid.UUID, status: str, event: AuditEvent,
                         service_account_uid: str | None = None) -> Workspace:
    async with db.transaction() as connection:
        workspace = await repo.set_workspace_state(connection, workspace_id, status, service_account_uid)
        if workspace is None:
            raise NotFound("no such workspace")
        await repo.record_audit(connection, event)
    return workspace


async def _replace_service_account(kube: KubeClient, workspace: Workspace) -> str:
    path = f"/api/v1/namespaces/{workspace.namespace}/serviceaccounts/{workspace.service_account}"
    try:
        await kube.delete(path)
    except KubeNotFound:
        pass
    # A new object, so a new UID, even if the old one is still being finalised.
    created = await ensure_object(kube, manifests.service_account_step(workspace.namespace, str(workspace.id)),
                                  str(workspace.id))
    new_uid = str(created["metadata"]["uid"])
    if new_uid == workspace.service_account_uid:
        # The old object was adopted instead of replaced: its tokens would live on.
        raise ClusterUnavailable("the tenant ServiceAccount is still being deleted; repeat the suspension")
    return new_uid


async def suspend(db: Database, kube: KubeClient, workspace_id: uuid.UUID, actor: User,
                  ip_address: str | None) -> Workspace:
    workspace = await _change_status(
        db, workspace_id, "suspended",
        AuditEvent("SuspendWorkspace", actor.id, workspace_id, ip_address, {"step": "status_suspended"}),
    )
    try:
        await kube.get(f"/api/v1/namespaces/{workspace.namespace}")
    except KubeNotFound:
        # Onboarding never got as far as the namespace: nothing to revoke.
        await repo.record_audit(db, AuditEvent("SuspendWorkspace", actor.id, workspace_id, ip_address,
                                               {"step": "no_namespace"}))
        return workspace
    bindings = await kube.list_items(f"{_RBAC}/namespaces/{workspace.namespace}/rolebindings")
    deleted = []
    for binding in bindings:
        name = binding["metadata"]["name"]
        try:
            await kube.delete(f"{_RBAC}/namespaces/{workspace.namespace}/rolebindings/{name}")
        except KubeNotFound:
            pass
        deleted.append(name)
    await repo.record_audit(db, AuditEvent("SuspendWorkspace", actor.id, workspace_id, ip_address,
                                           {"step": "rolebindings_deleted", "names": deleted}))
    new_uid = await _replace_service_account(kube, workspace)
    async with db.transaction() as connection:
        updated = await repo.set_workspace_state(connection, workspace_id, "suspended", new_uid)
        await repo.record_audit(connection, AuditEvent(
            "SuspendWorkspace", actor.id, workspace_id, ip_address,
            {"step": "service_account_replaced", "old_uid": workspace.service_account_uid, "new_uid": new_uid},
        ))
    return updated or workspace


async def resume(db: Database, kube: KubeClient, workspace_id: uuid.UUID, actor: User, ip_address: str | None,
                 *, cluster_role: str) -> Workspace:
    workspace = await repo.get_workspace(db, workspace_id)
    if workspace is None:
        raise NotFound("no such workspace")
    ns, wid = workspace.namespace, str(workspace.id)
    service_account = await ensure_object(kube, manifests.service_account_step(ns, wid), wid)
    wait = seconds_to_wait(service_account["metadata"].get("creationTimestamp"),
                           datetime.datetime.now(datetime.timezone.utc))
    if wait > 0:
        await asyncio.sleep(wait)
    await ensure_object(kube, manifests.role_binding_step(ns, wid, cluster_role), wid)
    return await _change_status(
        db, workspace_id, "provisioned",
        AuditEvent("ResumeWorkspace", actor.id, workspace_id, ip_address, {"step": "access_restored"}),
        service_account_uid=str(service_account["metadata"]["uid"]),
    )
