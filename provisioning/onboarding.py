"""Tenant onboarding: one call makes Namespace, ResourceQuota, LimitRange,
ServiceAccount and RoleBinding, and only then calls the workspace provisioned.

Kubernetes has no transactions, so onboarding is convergent instead: the
workspace row is claimed first (status `provisioning`; the unique index on
user_id makes concurrent calls agree on one row), then each object is created
or, if it already exists with this workspace's label, adopted. A crash or an
unreachable API server leaves a `provisioning` row that no credential can be
issued for; the next call finishes the work. Objects that exist under the same
name without our label are never adopted.

That work runs under the workspace's status lock (`onboarding_turn`), as
suspend and resume do: a suspension of a workspace still `provisioning`
deletes its RoleBindings and ServiceAccount, and an onboarding running
beside it would make them again in the suspended namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping

from provisioning import manifests, placement
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import BadRequest, ClusterUnavailable, Conflict
from provisioning.fleet import Fleet
from provisioning.kube.client import KubeApi
from provisioning.kube.errors import KubeAlreadyExists, KubeForbidden, KubeNotFound
from provisioning.models import AuditEvent, User, Workspace
from provisioning.tiers import Tier

# How long an onboarding waits for a suspension, resume or other onboarding
# of the same workspace under way (then 409).
ONBOARDING_WAITS_SECONDS = 30.0
# How long a create refused by the namespace's quota is tried again: until the
# quota controller has counted a new quota (or keys just added to one), or
# has counted an object deleted a moment ago (resume replaces the account).
QUOTA_COUNTING_SECONDS = 10.0
_QUOTA_REFUSALS = ("exceeded quota", "status unknown for quota")


@contextlib.asynccontextmanager
async def onboarding_turn(db: Database, workspace_id: uuid.UUID) -> AsyncIterator[Workspace | None]:
    """The workspace as it is now, read under its status lock, if it still
    needs onboarding; None if it no longer does (finished, or suspended)."""
    async with repo.workspace_status_lock(db, workspace_id, wait_seconds=ONBOARDING_WAITS_SECONDS):
        current = await repo.get_workspace(db, workspace_id)
        yield current if current is not None and current.status == "provisioning" else None


@dataclass(frozen=True)
class Onboarded:
    workspace: Workspace
    tier: Tier
    provisioned_now: bool
    """True only for the call that completed the workspace (201, not 200)."""


async def converge_object(kube: KubeApi, step: manifests.Step, workspace_id: str) -> tuple[dict[str, Any], str | None]:
    """Create the object, or adopt it if a previous attempt of ours made it
    and bring it to what the step says (the quota follows its tier). Returns
    the object and what was done to it in words, None if nothing."""
    try:
        return await _create(kube, step), "created"
    except KubeAlreadyExists:
        existing = await kube.get(step.path)
    labels = (existing.get("metadata") or {}).get("labels") or {}
    if labels.get(manifests.WORKSPACE_LABEL) != workspace_id:
        raise Conflict(f"a {step.kind} named {step.name} already exists and is not this workspace's",
                       code="object_taken")
    change = step.converge(existing) if step.converge is not None else None
    if change is None:
        return existing, None
    return await kube.merge_patch(step.path, change.patch), change.described


async def _create(kube: KubeApi, step: manifests.Step) -> dict[str, Any]:
    """Create the object. Quota admission judges a create before the API
    server looks for an object of that name: a repeated onboarding at its
    count would be refused for an object that is already there (and counted
    once), and a create before the quota controller has counted the
    namespace is refused whatever the count. The first is answered as the
    object existing; the second is tried again for QUOTA_COUNTING_SECONDS,
    then 503 (repeating the call finishes the work)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + QUOTA_COUNTING_SECONDS
    delay = 0.1
    while True:
        try:
            return await kube.create(step.collection, step.body)
        except KubeForbidden as refused:
            if not any(words in str(refused) for words in _QUOTA_REFUSALS):
                raise
            try:
                await kube.get(step.path)
            except KubeNotFound:
                if loop.time() + delay > deadline:
                    raise ClusterUnavailable(f"the namespace's quota refused the {step.kind}; "
                                             "repeat the call") from refused
            else:
                raise KubeAlreadyExists(409, "AlreadyExists", f"{step.kind} {step.name} exists") from refused
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


async def ensure_object(kube: KubeApi, step: manifests.Step, workspace_id: str) -> dict[str, Any]:
    """converge_object, for callers that need only the object."""
    return (await converge_object(kube, step, workspace_id))[0]


async def ensure_objects(kube: KubeApi, steps: list[manifests.Step], workspace_id: str) -> list[dict[str, Any]]:
    """The namespace (the first step) must exist first; the others only need
    it, so they go together. Nothing can use them before the row says
    provisioned, so their momentary order does not matter.

    When one fails, the others are still awaited before the failure is
    raised: a create already sent can still land, and it must land while
    the caller holds the workspace's status lock, not after a suspension
    that was waiting for the lock has listed what to delete."""
    first, *rest = steps
    namespace = await ensure_object(kube, first, workspace_id)
    results = await asyncio.gather(*(ensure_object(kube, step, workspace_id) for step in rest),
                                   return_exceptions=True)
    made: list[dict[str, Any]] = [namespace]
    for result in results:
        if isinstance(result, BaseException):
            raise result
        made.append(result)
    return made


async def onboarded_already(db: Database, user: User, requested_tier: str, *,
                            tiers: Mapping[str, Tier]) -> Onboarded | None:
    """The answer to a repeat call whose workspace needs no more work
    (provisioned or suspended), or None when onboarding has work to do.
    Callers answer a repeat without counting it against the init rate
    limit: it makes nothing, and a web UI may well ask on every page load."""
    owned = await repo.workspaces_of(db, user.id)
    if not owned or owned[0].status == "provisioning":
        return None
    return Onboarded(owned[0], tiers.get(owned[0].tier) or tiers[requested_tier], provisioned_now=False)


async def _claim(db: Database, fleet: Fleet, user: User, tier: Tier, namespace: str, *,
                 cluster: str | None, labels: Mapping[str, str] | None) -> Workspace:
    """The user's workspace row: the one there, else a new one on the
    cluster placement chooses (provisioning.placement)."""
    owned = await repo.workspaces_of(db, user.id)
    if owned:  # the first call placed it; a repeat never moves it
        return owned[0]
    occupancy = await repo.cluster_occupancy(db)
    chosen = placement.place(tier, fleet.settings, workspaces={name: count for name, (count, _) in occupancy.items()},
                             occupied={name for name, (count, _) in occupancy.items() if count},
                             requested=cluster, labels=labels)
    workspace, _ = await repo.claim_workspace(db, user.id, namespace, manifests.TENANT_SERVICE_ACCOUNT, tier.name,
                                              cluster=chosen.name, dedicated=tier.dedicated)
    return workspace


async def onboard(db: Database, fleet: Fleet, user: User, requested_tier: str, *,
                  tiers: Mapping[str, Tier], cluster_role: str, ip_address: str | None,
                  cluster: str | None = None, labels: Mapping[str, str] | None = None) -> Onboarded:
    """Onboard `user` on the cluster placement chooses (`cluster` or
    `labels` asked for, within what the tier allows), or finish their
    workspace's onboarding where it is."""
    if requested_tier not in tiers:
        raise BadRequest(f"unknown tier {requested_tier!r}; known: {', '.join(sorted(tiers))}", code="unknown_tier")
    namespace = manifests.namespace_for(user.id)
    workspace = await _claim(db, fleet, user, tiers[requested_tier], namespace, cluster=cluster, labels=labels)
    kube = fleet.of(workspace).kube
    # The first call decided the tier; a repeat answers with the same workspace.
    tier = tiers.get(workspace.tier) or tiers[requested_tier]
    if workspace.status != "provisioning":
        return Onboarded(workspace, tier, provisioned_now=False)

    async with onboarding_turn(db, workspace.id) as pending:
        if pending is None:  # finished by a concurrent call, or suspended, meanwhile
            current = await repo.get_workspace(db, workspace.id)
            return Onboarded(current or workspace, tier, provisioned_now=False)
        workspace_id = str(workspace.id)
        steps = manifests.onboarding_steps(namespace, workspace_id, tier, cluster_role)
        objects = await ensure_objects(kube, steps, workspace_id)
        made = {step.kind: str((obj.get("metadata") or {}).get("uid", "")) for step, obj in zip(steps[1:], objects[1:])}
        done = await repo.finish_provisioning(db, workspace.id, made["ServiceAccount"], AuditEvent(
            "InitWorkspace", user.id, workspace.id, ip_address,
            {"namespace": namespace, "tier": tier.name, "cluster": workspace.cluster, "objects": sorted(made)},
        ))
    if done is None:  # its status changed by a path that takes no lock
        current = await repo.get_workspace(db, workspace.id)
        return Onboarded(current or workspace, tier, provisioned_now=False)
    return Onboarded(done, tier, provisioned_now=True)
