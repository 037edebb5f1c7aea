"""Bring existing workspaces to what their tier says now.

Tiers are read at start-up and onboarding writes them into each new
namespace; a workspace made before a tier changed (or before a release added
a bound, such as the object counts) keeps its old quota until something
converges it; a membership change cut short leaves a member's objects
behind their row until something converges them (provisioning.members). Resume does, for the one workspace it resumes; `tenant-gateway
reconcile` does for all of them: every workspace past onboarding (provisioned
or suspended) gets its quota, LimitRange and NetworkPolicy created if missing
and its quota's `hard` made the tier's, and every provisioned one its
members' bindings made their roles' (members.converge). A workspace whose onboarding was cut
short (`provisioning`: its owner was told 503) is finished, as its owner's
next init call would: nothing stays half-made because its owner went away.

Workspaces are converged RECONCILE_CONCURRENCY at a time: each is a dozen
calls that mostly wait on the API server, one after another (about 100 ms
on the local cluster), so one at a time 10,000 workspaces took 17 minutes.
They are still reported in creation order.

Idempotent: a second run finds nothing to change and reports nothing. Each
change is recorded in the audit log (`ReconcileWorkspace`, no acting user),
also when a later step of the same workspace fails. A workspace that cannot
be converged (its tier gone, its namespace gone, a name taken, a refusal by
the API server) is reported as left alone and the run goes on; an API
server or database that stops answering (also at the audit row) ends the
run there, reported after every workspace before it: no workspace of that
cluster is started after it, and those already under way are reported as
they end.
Suspended namespaces are included: the gateway may still act there.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Mapping

from provisioning import manifests, members
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.errors import Conflict, ServiceUnavailable
from provisioning.fleet import Fleet, client_for
from provisioning.kube.client import KubeApi
from provisioning.kube.errors import KubeAPIError, KubeNotFound
from provisioning.models import AuditEvent, Workspace
from provisioning.onboarding import converge_object, onboarding_turn
from provisioning.roles import ClusterRoles
from provisioning.tiers import Tier

RECONCILE_CONCURRENCY = 6
"""Workspaces converged at once. Each holds one database connection at a
time (a member's lock) and may briefly want a second: the command's pool
is RECONCILE_CONCURRENCY + 2 (proxy.cli.server)."""


@dataclass(frozen=True)
class Reconciled:
    """One workspace that needed something: what was done, in words."""

    workspace: Workspace
    changes: tuple[str, ...]
    converged: bool = True
    """False when it was left alone, or the run stopped at it: an operator's turn."""
    stopped: bool = False
    """The API server or the database stopped answering here; later workspaces were not tried."""

    def line(self) -> str:
        return f"{self.workspace.id} {self.workspace.namespace}: " + "; ".join(self.changes)


async def reconcile_workspace(db: Database, kube: KubeApi, workspace: Workspace, tier: Tier,
                              cluster_roles: ClusterRoles, changes: list[str]) -> None:
    """Converge one workspace's bounds and its members' objects, adding what
    changed to `changes` as it goes (so a step that fails leaves the earlier
    ones on record)."""
    workspace_id = str(workspace.id)
    await _converge_namespace(kube, manifests.namespace_step(workspace.namespace, workspace_id, tier), workspace_id,
                              changes)
    for step in manifests.bounds_steps(workspace.namespace, workspace_id, tier):
        _object, done = await converge_object(kube, step, workspace_id)
        if done is not None:
            changes.append(f"{step.kind} {step.name} {done}")
    await members.converge(db, kube, cluster_roles, workspace, changes)


async def _converge_namespace(kube: KubeApi, step: manifests.Step, workspace_id: str, changes: list[str]) -> None:
    """The namespace's Pod Security level and caps made its tier's. Never
    created: a namespace that is gone is an operator's turn (KubeNotFound)."""
    existing = await kube.get(step.path)
    labels = (existing.get("metadata") or {}).get("labels") or {}
    if labels.get(manifests.WORKSPACE_LABEL) != workspace_id:
        raise Conflict(f"namespace {step.name} is not this workspace's", code="object_taken")
    change = step.converge(existing) if step.converge is not None else None
    if change is not None:
        await kube.merge_patch(step.path, change.patch)
        changes.append(f"{step.kind} {step.name} {change.described}")


async def finish_onboarding(db: Database, kube: KubeApi, workspace: Workspace, tier: Tier,
                            cluster_role: str) -> tuple[str, ...]:
    """A workspace whose onboarding was cut short (its owner was told 503
    and has not called again): each object made, or adopted if the cut
    attempt made it, and the workspace provisioned in one statement with
    its audit row, as the owner's next call would have, under the status
    lock (onboarding.onboarding_turn). What was done (empty if that call
    came first, or the workspace was suspended meanwhile)."""
    workspace_id = str(workspace.id)
    changes = []
    service_account_uid = ""
    async with onboarding_turn(db, workspace.id) as pending:
        if pending is None:
            return ()
        for step in manifests.onboarding_steps(workspace.namespace, workspace_id, tier, cluster_role):
            made, done = await converge_object(kube, step, workspace_id)
            if step.kind == "ServiceAccount":
                service_account_uid = str((made.get("metadata") or {}).get("uid", ""))
            if done is not None:
                changes.append(f"{step.kind} {step.name} {done}")
        changes.append("onboarding finished")
        finished = await repo.finish_provisioning(db, workspace.id, service_account_uid, AuditEvent(
            "ReconcileWorkspace", None, workspace.id, None, {"tier": tier.name, "changes": changes}))
    return tuple(changes) if finished is not None else ()


async def reconcile(db: Database, kube: KubeApi | Fleet, tiers: Mapping[str, Tier], *,
                    cluster_role: str, concurrency: int = RECONCILE_CONCURRENCY) -> list[Reconciled]:
    """Every workspace; those that needed something, in creation order. A
    workspace whose tier is gone from the tiers file, whose namespace is
    gone, or whose objects' names are taken by others, is reported and left
    alone. The run ends at a workspace where the API server or the database
    stopped answering, reported with what was done before (and with the
    workspaces of that cluster already under way): only a database that
    cannot list the workspaces at all raises. Workspaces are read a page at
    a time (repo.every_workspace) and `concurrency` are converged at once:
    its memory stays flat however many there are. In a fleet each cluster
    is its own run: one that stops answering stops only its workspaces'."""
    reconciled: list[Reconciled] = []
    stopped: set[str] = set()
    under_way: deque[asyncio.Future[Reconciled | None]] = deque()

    async def settle_oldest() -> None:
        outcome = await under_way.popleft()
        if outcome is not None:
            reconciled.append(outcome)
            if outcome.stopped:
                stopped.add(outcome.workspace.cluster)

    try:
        async for workspace in repo.every_workspace(db):
            while len(under_way) >= concurrency:
                await settle_oldest()
            if workspace.cluster in stopped:
                continue
            try:
                here = client_for(kube, workspace.cluster)
            except ServiceUnavailable as gone:  # a cluster no longer configured
                stopped.add(workspace.cluster)
                known: asyncio.Future[Reconciled | None] = asyncio.get_running_loop().create_future()
                known.set_result(Reconciled(workspace, (f"stopped here: {gone.message}",), converged=False,
                                            stopped=True))
                under_way.append(known)
                continue
            under_way.append(asyncio.ensure_future(
                _reconcile_one(db, here, workspace, tiers.get(workspace.tier), cluster_role)))
        while under_way:
            await settle_oldest()
    finally:
        for left in under_way:  # the listing failed, or the run was cancelled
            left.cancel()
        await asyncio.gather(*under_way, return_exceptions=True)
    return reconciled


async def _reconcile_one(db: Database, kube: KubeApi, workspace: Workspace, tier: Tier | None,
                         cluster_role: str) -> Reconciled | None:
    """One workspace converged and its changes audited; None if it needed
    nothing. What the cluster or the database answered is reported, never
    raised, so the lines of the workspaces before it are still printed."""
    if tier is None:
        return Reconciled(workspace, (f"left alone: tier {workspace.tier!r} is not configured",), converged=False)
    changes: list[str] = []
    outcomes: list[str] = []
    stopped = False
    try:
        if workspace.status == "provisioning":  # audited as it is finished, in one statement
            finished = await finish_onboarding(db, kube, workspace, tier, cluster_role)
            return Reconciled(workspace, finished) if finished else None
        await reconcile_workspace(db, kube, workspace, tier, ClusterRoles(admin=cluster_role), changes)
    except KubeNotFound:
        outcomes.append("left alone: its namespace does not exist")
    except (Conflict, KubeAPIError) as refused:  # a name taken, or the API server's refusal of this one
        outcomes.append(f"left alone: {refused.message}")
    except ServiceUnavailable as gone:
        outcomes.append(f"stopped here: {gone.message}")
        stopped = True
    if changes:  # what was done, also when a later step failed
        try:
            await repo.record_audit(db, AuditEvent("ReconcileWorkspace", None, workspace.id, None,
                                                   {"tier": tier.name, "changes": changes}))
        except ServiceUnavailable as gone:
            outcomes.append(f"stopped here: the audit row of these changes was not written ({gone.message})")
            stopped = True
    if not (changes or outcomes):
        return None
    return Reconciled(workspace, (*changes, *outcomes), converged=not outcomes, stopped=stopped)
