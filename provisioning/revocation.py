"""Revoking issued credentials: each token is bound to a Secret of its own
(provisioning.credentials), and deleting that Secret makes the API server
refuse the token, after at most its own authentication cache (~10 s).

- `revoke`: one credential, on request (DELETE /api/v1/credentials/{id});
- `revoke_all`: every live one of a member in a workspace (a member
  removed, a user suspended: provisioning.members);
- `sweep`: the Secrets of expired credentials, and of issuances cut short
  (spares never claimed among them, provisioning.spares), which hold
  nothing any more and count in the namespace's quota; every
  replica runs a `Sweeper`, and `tenant-gateway reconcile` sweeps too.
The Secret goes first, then the row and its audit row: a failure in
between leaves the token dead and the call to repeat.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from provisioning.background import Periodic
from provisioning.db import credentials as credential_rows
from provisioning.db.pool import Database
from provisioning.errors import ClusterUnavailable
from provisioning.fleet import Fleet, client_for
from provisioning.kube.client import KubeApi
from provisioning.kube.errors import KubeForbidden, KubeNotFound
from provisioning.models import AuditEvent, BindingSecret, Credential, User

log = logging.getLogger(__name__)

SWEEP_BATCH = 200
SWEEP_INTERVAL_SECONDS = 60.0
UNFINISHED_AFTER_SECONDS = 600.0
"""An issuance not confirmed this long after it began was cut short: its Secret is swept."""


async def unbind(kube: KubeApi, credential: Credential | BindingSecret) -> None:
    """The Secret gone: every token bound to it stops authenticating. A
    plain delete (background propagation, no dry run): the only kind the
    gateway may make (admission.yaml, tenant-gateway-credential-secrets)."""
    try:
        await kube.delete(f"/api/v1/namespaces/{credential.namespace}/secrets/{credential.secret_name}")
    except KubeNotFound:
        pass


async def unbind_quietly(kube: KubeApi, credential: Credential | BindingSecret) -> bool:
    """`unbind` if the cluster lets us now (True); if not, the sweep does,
    once its row says so (its row is on record). Shielded: a cancelled
    request still deletes what it made."""
    try:
        await asyncio.shield(unbind(kube, credential))
    except Exception as error:  # noqa: BLE001 - the sweep finishes it
        log.warning("an issuance's binding Secret was left for the sweep",
                    extra={"namespace": credential.namespace, "error": type(error).__name__})
        return False
    return True


async def revoke(db: Database, kube: KubeApi, credential: Credential, actor: User | None,
                 ip_address: str | None, *, why: str = "revoked") -> bool:
    """Revoke one credential: its Secret first (the API server refuses the
    token from then on, after at most its own authentication cache), then
    its row and `RevokeCredential` audit row. Repeating it is harmless
    (False: it was revoked already)."""
    await unbind(kube, credential)
    async with db.transaction() as connection:
        return await credential_rows.mark_revoked(connection, credential.id, AuditEvent(
            "RevokeCredential", actor.id if actor else None, credential.workspace_id, ip_address,
            {"credential": str(credential.id), "owner": str(credential.user_id), "credential_id": credential.jti,
             "why": why}))


async def revoke_all(db: Database, kube: KubeApi, workspace_id: uuid.UUID, user_id: uuid.UUID,
                     actor: User | None, ip_address: str | None, *, why: str) -> int:
    """Every live credential `user_id` holds in the workspace (a member
    removed, a user suspended). How many."""
    revoked = 0
    for credential in await credential_rows.live_of(db, workspace_id, user_id):
        revoked += await revoke(db, kube, credential, actor, ip_address, why=why)
    return revoked


async def sweep(db: Database, kube: KubeApi | Fleet, batch: int = SWEEP_BATCH) -> int:
    """Delete the binding Secrets of expired credentials (and of issuances
    cut short), each on its own cluster: they hold nothing any more, and
    count in the namespace's quota. How many went. In a fleet, a cluster
    that is down keeps its Secrets for a later sweep; the others are swept."""
    done = []
    down: set[str] = set()
    several = isinstance(kube, Fleet) and len(kube) > 1
    for credential in await credential_rows.to_sweep(db, batch, UNFINISHED_AFTER_SECONDS):
        if credential.cluster in down:
            continue
        try:
            await unbind(client_for(kube, credential.cluster), credential)
        except ClusterUnavailable:
            if not several:
                raise
            log.warning("a cluster is unreachable: its expired credentials' Secrets wait for a later sweep",
                        extra={"cluster": credential.cluster})
            down.add(credential.cluster)
            continue
        except KubeForbidden:
            # The namespace is suspended or being deleted (admission says no):
            # its Secrets go with it, or after the resume.
            continue
        done.append(credential.id)
    if done:
        await credential_rows.mark_swept(db, done)
    return len(done)


class Sweeper(Periodic):
    """`sweep` every `interval` seconds, on every replica (two replicas
    sweeping the same Secret both find it gone or delete it: harmless)."""

    def __init__(self, db: Database, kube: KubeApi | Fleet, *, interval: float = SWEEP_INTERVAL_SECONDS) -> None:
        super().__init__("tenant-gateway-credential-sweep", lambda: sweep(db, kube), interval,
                         done="expired credentials' Secrets swept")
