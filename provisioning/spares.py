"""Spare binding Secrets: a few made ahead per workspace, so an issuance
binds its token to one instead of making one while the person waits.

Each issuance's token is bound to a Secret of its own (provisioning.
credentials); making that Secret is an API call, and in a namespace whose
ResourceQuota counts Secrets (every tier's does) it also updates the
quota, one at a time per namespace: the larger part of an issuance's time
(bench/README.md, "Issuance, and what the binding Secret costs"). After an
issuance, once the workspace has been quiet for a moment, it is topped up
in the background to `depth` spares.

What stays true:
- A spare's row is written before its Secret is made (on record, swept if
  the making is cut short), exactly as an issuance's is.
- A spare goes to one issuance: claimed in the issuance's first statement
  (provisioning.db.credentials.begin), row-locked, only while it has no
  owner. From then on it is that issuance's Secret, named after it; its
  revocation deletes that Secret and no other.
- Spares count among the workspace's live credentials: never more than
  the tier allows (whose quota has room for them), and one place is kept
  free for an issuance that finds none.
- A spare is claimable for `CLAIMABLE_SECONDS` after it is made; the sweep
  takes it (an issuance cut short) only after `UNFINISHED_AFTER_SECONDS`,
  twice that, so no Secret is deleted under an issuance that just claimed
  it. A quiet workspace's spares are thus gone ten minutes after its last
  issuance, and made again at its next.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from typing import Callable

from provisioning import manifests, revocation
from provisioning.background import cancel_and_wait
from provisioning.db import credentials as credential_rows
from provisioning.db.pool import Database
from provisioning.kube.client import KubeApi
from provisioning.models import BindingSecret, Workspace

log = logging.getLogger(__name__)

CLAIMABLE_SECONDS = revocation.UNFINISHED_AFTER_SECONDS / 2
"""How long after it is made a spare may be claimed; half the age at which
the sweep takes it."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def spare_of(workspace: Workspace) -> BindingSecret:
    spare_id = uuid.uuid4()
    return BindingSecret(spare_id, workspace.id, workspace.namespace, manifests.credential_secret_name(spare_id),
                         workspace.cluster)


async def make_one(db: Database, kube: KubeApi, workspace: Workspace, *, depth: int, within: int) -> bool:
    """One spare made, if the workspace keeps fewer than `depth` and has
    room (provisioning.db.credentials.add_spare). False when it needs none.
    A failure after its row is written deletes what may have been made and
    lets the error through; what cannot be deleted now, the sweep deletes."""
    spare = spare_of(workspace)
    unclaimed_after = _now() + datetime.timedelta(seconds=revocation.UNFINISHED_AFTER_SECONDS)
    if not await credential_rows.add_spare(db, spare, unclaimed_after, within=within, depth=depth,
                                           claimable_seconds=CLAIMABLE_SECONDS):
        return False
    try:
        secret = await kube.create(f"/api/v1/namespaces/{workspace.namespace}/secrets", manifests.credential_secret(
            workspace.namespace, str(workspace.id), str(spare.id)))
    except BaseException:
        if await revocation.unbind_quietly(kube, spare):
            await asyncio.shield(credential_rows.mark_swept(db, [spare.id]))
        raise
    await credential_rows.spare_made(db, spare.id, str(secret["metadata"]["uid"]))
    return True


async def top_up(db: Database, kube: KubeApi, workspace: Workspace, *, depth: int, within: int,
                 go_on: Callable[[], bool] = lambda: True) -> int:
    """Spares made, one after another, until the workspace keeps `depth`
    (or has no room for more), or `go_on` says to stop. How many were made."""
    made = 0
    while go_on() and await make_one(db, kube, workspace, depth=depth, within=within):
        made += 1
    return made


QUIET_SECONDS = 0.5
"""How long a workspace goes without an issuance before its spares are
made again: a burst is served from the spares (and past them, each
issuance makes its own), and the Secrets are made after it, not beside it
while people wait (on a machine whose CPU is the bound, that is the
difference). An issuance during a top-up pauses it the same way."""


class SparePool:
    """Each replica's top-ups: at most one per workspace, started after an
    issuance (`after_issuance`) and run once the workspace has been quiet
    for `QUIET_SECONDS`. `depth` 0: no spares, every issuance makes its own
    Secret."""

    def __init__(self, db: Database, depth: int, *, quiet_seconds: float = QUIET_SECONDS) -> None:
        self._db, self.depth, self._quiet = db, depth, quiet_seconds
        self._running: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._last: dict[uuid.UUID, float] = {}
        """Each workspace with a top-up to come: when its last issuance was."""

    def after_issuance(self, kube: KubeApi, workspace: Workspace, within: int) -> None:
        if self.depth == 0:
            return
        self._last[workspace.id] = asyncio.get_running_loop().time()
        if workspace.id not in self._running:
            self._running[workspace.id] = asyncio.create_task(self._top_up(kube, workspace, within),
                                                              name="tenant-gateway-spare-secrets")

    async def _top_up(self, kube: KubeApi, workspace: Workspace, within: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                last = self._last[workspace.id]
                wait = last + self._quiet - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                try:
                    await top_up(self._db, kube, workspace, depth=self.depth, within=within,
                                 go_on=lambda: self._last[workspace.id] == last)
                except Exception as error:  # noqa: BLE001 - the next issuance asks again
                    log.warning("spare binding Secrets not made this time; issuances make their own meanwhile",
                                extra={"namespace": workspace.namespace, "error": type(error).__name__})
                    return
                if self._last[workspace.id] == last:
                    return
        finally:
            self._running.pop(workspace.id, None)
            self._last.pop(workspace.id, None)

    async def idle(self) -> None:
        """Until no top-up is to come (what tests wait for)."""
        while self._running:
            await asyncio.wait(list(self._running.values()))

    async def stop(self, timeout: float) -> None:
        """Top-ups cancelled: a Secret being made is deleted (or left, on
        record, for the sweep)."""
        for task in list(self._running.values()):
            await cancel_and_wait(task, timeout)
