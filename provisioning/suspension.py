"""Emergency suspension and resume.

Deleting the gateway's RoleBinding alone would not end access: RBAC is
checked per request, so issued tokens keep authenticating, and the tenant may
have bound its own roles. Suspension therefore
1. marks the workspace suspended in the database, which every replica hears
   through NOTIFY and which stops new kubeconfigs and proxied requests at once;
2. labels the namespace suspended: the admission policy in
   deploy/kubernetes/admission.yaml then refuses every change made there by
   the namespace's own ServiceAccounts, so a tenant workload holding a token
   cannot recreate RoleBindings as fast as step 3 deletes them;
3. deletes every RoleBinding in the namespace, listing again until none is
   left (the label reaches the admission check a moment after the patch);
   each listing is paged, so no answer grows with the tenant's bindings;
4. deletes every member's ServiceAccount and replaces the owner's
   (`sa-tenant-admin`): every token minted for them stops authenticating.
   Members' accounts are made again at their first credential after the
   workspace is resumed (provisioning.members.seat).
A delete in steps 3 and 4 that leaves its object in place, held by
finalizers, is finished by removing them. A tenant can make its own delete
a foreground one and give the object a dependent that never goes (one
with a finalizer of its own): the object would then stay, being deleted,
for ever, and RBAC honours a RoleBinding being deleted.
Each step is recorded in the audit log. A failure part-way answers 503 with
the workspace still suspended (fail closed); repeating the call finishes it.

Resume never adopts the ServiceAccount it finds: after a suspension that
failed before step 4 that would still be the old one, and every kubeconfig
issued before would work again. It replaces the account, converges the other
onboarding objects (a workspace may have been suspended mid-onboarding, and
its quota is brought to what its tier says now),
recreates the RoleBinding and only then lifts the label and marks the
workspace provisioned. The API server caches successful token checks for
about 10 s and RBAC matches the ServiceAccount by name, so resume waits until
the fresh account is older than that cache before binding it. If marking it
provisioned fails, the label goes back on and the binding is deleted again:
the cluster stays as suspended as the database says the workspace is.

Suspend and resume of one workspace never interleave (an advisory lock): a
resume that finds another operation under way is refused (409), a
suspension waits for it and then runs, so the kill switch always ends in
`suspended`. Nor does it queue behind other workspaces' onboardings and
resumes: those leave room in the pool's long holds for suspensions
(Database.long_hold). Resume only resumes what is suspended; a provisioned
workspace is answered as it is, untouched (a repeated resume).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Mapping

from provisioning import manifests
from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import ClusterUnavailable, Conflict, NotFound
from provisioning.kube.client import KubeApi
from provisioning.kube.errors import KubeNotFound
from provisioning.kube.tokens import TOKEN_CACHE_GRACE_SECONDS
from provisioning.models import AuditEvent, User, Workspace
from provisioning.onboarding import ensure_object, ensure_objects
from provisioning.tiers import Tier

log = logging.getLogger(__name__)

_RBAC = "/apis/rbac.authorization.k8s.io/v1"
# How long a suspension waits for a resume (or another suspension) under way:
# a resume is the grace above plus a few API calls.
SUSPENSION_WAITS_SECONDS = 60.0
# Listings of a suspended namespace's RoleBindings before giving up (503).
_ROLEBINDING_PASSES = 5


async def _change_status(db: Database, workspace_id: uuid.UUID, status: str, event: AuditEvent,
                         service_account_uid: str | None = None) -> Workspace:
    async with db.transaction() as connection:
        workspace = await repo.set_workspace_state(connection, workspace_id, status, service_account_uid)
        if workspace is None:
            raise NotFound("no such workspace")
        await repo.record_audit(connection, event)
    return workspace


async def _delete_now(kube: KubeApi, path: str) -> dict[str, Any] | None:
    """Delete the object, and let go of it if finalizers hold it back (the
    gateway's credential may only remove finalizers from an object being
    deleted: tenant-gateway-confined). The deleted object (or a Status
    naming it); None if there was none."""
    try:
        deleted = await kube.delete(path)
    except KubeNotFound:
        return None
    if (deleted.get("metadata") or {}).get("finalizers"):
        try:
            await kube.merge_patch(path, {"metadata": {"finalizers": None}})
        except KubeNotFound:  # it went meanwhile
            pass
    return deleted


async def _replace_service_account(kube: KubeApi, workspace: Workspace) -> str:
    path = f"/api/v1/namespaces/{workspace.namespace}/serviceaccounts/{workspace.service_account}"
    deleted = await _delete_now(kube, path)
    old_uid = None if deleted is None else (
        (deleted.get("metadata") or {}).get("uid") or (deleted.get("details") or {}).get("uid"))
    # A new object, so a new UID, even if the old one is still being finalised.
    created = await ensure_object(kube, manifests.service_account_step(workspace.namespace, str(workspace.id)),
                                  str(workspace.id))
    new_uid = str(created["metadata"]["uid"])
    if new_uid in (old_uid, workspace.service_account_uid):
        # The old object was adopted instead of replaced: its tokens would live on.
        raise ClusterUnavailable("the tenant ServiceAccount is still being deleted; repeat the call")
    return new_uid


async def _delete_every_rolebinding(kube: KubeApi, namespace: str) -> list[str]:
    """Delete until a listing comes back empty. Bindings the tenant creates
    after the suspension label reaches admission are refused; the passes
    cover the moment before it does."""
    collection = f"{_RBAC}/namespaces/{namespace}/rolebindings"
    deleted: list[str] = []
    for _ in range(_ROLEBINDING_PASSES):
        found = False
        # A page at a time: however many bindings the tenant made, one
        # request's answer is one page (KubeClient.list_pages).
        async for page in kube.list_pages(collection):
            names = [b["metadata"]["name"] for b in page]
            for name in names:
                await _delete_now(kube, f"{collection}/{name}")
            deleted.extend(names)
            found = found or bool(names)
        if not found:
            return deleted
    raise ClusterUnavailable("RoleBindings keep reappearing in the suspended namespace; "
                             "is the tenant-gateway-suspended admission policy installed?")


async def _delete_member_accounts(db: Database, kube: KubeApi, workspace: Workspace) -> list[str]:
    """Every member's account but the owner's (which is replaced): their
    tokens stop authenticating."""
    names = [m.service_account for m in await member_rows.all_members(db, workspace.id)
             if m.service_account != workspace.service_account]
    for name in names:
        await _delete_now(kube, f"/api/v1/namespaces/{workspace.namespace}/serviceaccounts/{name}")
    return names


async def suspend(db: Database, kube: KubeApi, workspace_id: uuid.UUID, actor: User,
                  ip_address: str | None) -> Workspace:
    # An administrator's suspension waits for a resume under way (then undoes
    # it) rather than being refused: it is the kill switch.
    async with repo.workspace_status_lock(db, workspace_id, wait_seconds=SUSPENSION_WAITS_SECONDS,
                                          kill_switch=True):
        return await _suspend(db, kube, workspace_id, actor, ip_address)


async def _suspend(db: Database, kube: KubeApi, workspace_id: uuid.UUID, actor: User,
                   ip_address: str | None) -> Workspace:
    def step(name: str, **details: object) -> AuditEvent:
        return AuditEvent("SuspendWorkspace", actor.id, workspace_id, ip_address, {"step": name, **details})

    workspace = await _change_status(db, workspace_id, "suspended", step("status_suspended"))
    try:
        await kube.merge_patch(f"/api/v1/namespaces/{workspace.namespace}", manifests.suspended_label_patch(True))
    except KubeNotFound:
        # Onboarding never got as far as the namespace: nothing to revoke.
        await repo.record_audit(db, step("no_namespace"))
        return workspace
    deleted = await _delete_every_rolebinding(kube, workspace.namespace)
    await repo.record_audit(db, step("rolebindings_deleted", names=deleted))
    gone = await _delete_member_accounts(db, kube, workspace)
    if gone:
        await repo.record_audit(db, step("member_accounts_deleted", names=gone))
    new_uid = await _replace_service_account(kube, workspace)
    async with db.transaction() as connection:
        await member_rows.forget_accounts(connection, workspace_id)  # made again at each one's next credential
        updated = await repo.set_workspace_state(connection, workspace_id, "suspended", new_uid)
        await repo.record_audit(connection, step("service_account_replaced",
                                                 old_uid=workspace.service_account_uid, new_uid=new_uid))
    return updated or workspace


async def resume(db: Database, kube: KubeApi, workspace_id: uuid.UUID, actor: User, ip_address: str | None,
                 *, tiers: Mapping[str, Tier], cluster_role: str) -> Workspace:
    async with repo.workspace_status_lock(db, workspace_id):
        workspace = await repo.get_workspace(db, workspace_id)
        if workspace is None:
            raise NotFound("no such workspace")
        if workspace.status == "provisioned":
            # A repeated resume (its first answer lost, say): the contract's
            # 200, and nothing touched (a new ServiceAccount would end every
            # kubeconfig the tenant holds).
            return workspace
        if workspace.status != "suspended":
            raise Conflict(f"the workspace is {workspace.status}, not suspended", code="workspace_not_suspended")
        ns, wid = workspace.namespace, str(workspace.id)
        tier = tiers.get(workspace.tier)
        if tier is None:
            raise Conflict(f"the workspace's tier {workspace.tier!r} is no longer configured", code="unknown_tier")
        *bounds, _account, binding = manifests.onboarding_steps(ns, wid, tier, cluster_role)
        await ensure_objects(kube, bounds, wid)  # the namespace and what keeps it in bounds
        new_uid = await _replace_service_account(kube, workspace)
        await asyncio.sleep(TOKEN_CACHE_GRACE_SECONDS)
        await ensure_object(kube, binding, wid)
        await kube.merge_patch(f"/api/v1/namespaces/{ns}", manifests.suspended_label_patch(False))
        try:
            return await _change_status(
                db, workspace_id, "provisioned",
                AuditEvent("ResumeWorkspace", actor.id, workspace_id, ip_address,
                           {"step": "access_restored", "old_uid": workspace.service_account_uid, "new_uid": new_uid}),
                service_account_uid=new_uid,
            )
        except BaseException:
            await _undo_resume(db, kube, workspace_id, new_uid, ns, binding.path)
            raise


async def _undo_resume(db: Database, kube: KubeApi, workspace_id: uuid.UUID, new_uid: str, namespace: str,
                       binding_path: str) -> None:
    """The database still says suspended (the resume's commit failed), and
    so must the cluster: the label back, the binding gone. Otherwise the
    tenant's workloads would act in a namespace that the database, the
    console and the audit log show as suspended, and nothing would say so.
    Unless the commit did happen after all (the connection went during its
    answer, or the task was cancelled just after): then the resume stands.
    A database that cannot say counts as suspended: fail closed. Best
    effort: the repeated resume, or a suspension, finishes either way."""
    try:
        current = await repo.get_workspace(db, workspace_id)
    except Exception:
        current = None
    if current is not None and current.status == "provisioned" and current.service_account_uid == new_uid:
        return
    try:
        await kube.merge_patch(f"/api/v1/namespaces/{namespace}", manifests.suspended_label_patch(True))
        await _delete_now(kube, binding_path)
    except Exception as error:
        log.warning("a failed resume could not be undone in the cluster; suspend the workspace again",
                    extra={"namespace": namespace, "error": type(error).__name__})
