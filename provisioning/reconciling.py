"""Bring existing workspaces to what their tier says now.

Tiers are read at start-up and onboarding writes them into each new
namespace; a workspace made before a tier changed (or before a release added
a bound, such as the object counts) keeps its old quota until something
converges it. Resume does, for the one workspace it resumes; `tenant-gateway
reconcile` does for all of them: every workspace past onboarding (provisioned
or suspended; a `provisioning` one is finished by its owner's next init call)
gets its quota, LimitRange and NetworkPolicy created if missing and its quota's
`hard` made the tier's.

Idempotent: a second run finds nothing to change and reports nothing. Each
change is recorded in the audit log (`ReconcileWorkspace`, no acting user).
Suspended namespaces are included: the gateway may still act there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from provisioning import manifests
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.kube.client import KubeClient
from provisioning.kube.errors import KubeNotFound
from provisioning.models import AuditEvent, Workspace
from provisioning.onboarding import converge_object
from provisioning.tiers import Tier


@dataclass(frozen=True)
class Reconciled:
    """One workspace that needed something: what was done, in words."""

    workspace: Workspace
    changes: tuple[str, ...]

    def line(self) -> str:
        return f"{self.workspace.id} {self.workspace.namespace}: " + "; ".join(self.changes)


async def reconcile_workspace(kube: KubeClient, workspace: Workspace, tier: Tier) -> tuple[str, ...]:
    """Converge one workspace's bounds; what changed (empty: nothing)."""
    workspace_id = str(workspace.id)
    changes = []
    for step in manifests.bounds_steps(workspace.namespace, workspace_id, tier):
        _object, done = await converge_object(kube, step, workspace_id)
        if done is not None:
            changes.append(f"{step.kind} {step.name} {done}")
    return tuple(changes)


async def reconcile(db: Database, kube: KubeClient, tiers: Mapping[str, Tier]) -> list[Reconciled]:
    """Every workspace past onboarding; those that needed something, in
    creation order. A workspace whose tier is gone from the tiers file, or
    whose namespace is gone, is reported and left alone."""
    reconciled = []
    for workspace in await repo.all_workspaces(db):
        if workspace.status == "provisioning":
            continue
        tier = tiers.get(workspace.tier)
        if tier is None:
            reconciled.append(Reconciled(workspace, (f"left alone: tier {workspace.tier!r} is not configured",)))
            continue
        try:
            changes = await reconcile_workspace(kube, workspace, tier)
        except KubeNotFound:
            reconciled.append(Reconciled(workspace, ("left alone: its namespace does not exist",)))
            continue
        if changes:
            await repo.record_audit(db, AuditEvent("ReconcileWorkspace", None, workspace.id, None,
                                                   {"tier": tier.name, "changes": list(changes)}))
            reconciled.append(Reconciled(workspace, changes))
    return reconciled
