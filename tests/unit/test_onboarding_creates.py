"""Onboarding's creates as a group: a failing create does not leave the
others running behind the caller's back. Pure (a scripted client, no I/O)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from provisioning import manifests
from provisioning.errors import ClusterUnavailable
from provisioning.onboarding import ensure_objects
from provisioning.tiers import parse_tiers


class _ScriptedKube:
    """Creates answer at once, except that the RoleBinding's takes a while
    and the quota's fails straight away."""

    def __init__(self) -> None:
        self.landed: list[str] = []

    async def create(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        kind = body["kind"]
        if kind == "ResourceQuota":
            raise ClusterUnavailable("the API server answered 503")
        if kind == "RoleBinding":
            await asyncio.sleep(0.05)
        self.landed.append(kind)
        return {**body, "metadata": {**body["metadata"], "uid": kind.lower()}}


async def test_a_failed_create_is_raised_only_once_every_other_create_has_landed() -> None:
    # The caller holds the workspace's status lock until this returns: a
    # create still in flight after it would land after a suspension that was
    # waiting for the lock had listed what to delete (a RoleBinding left in a
    # suspended namespace).
    tier = parse_tiers("basic: {requests.cpu: '4'}")["basic"]
    kube = _ScriptedKube()
    steps = manifests.onboarding_steps("tenant-u", "wid", tier, "tenant-admin")
    with pytest.raises(ClusterUnavailable):
        await ensure_objects(kube, steps, "wid")  # type: ignore[arg-type]
    assert "RoleBinding" in kube.landed
    assert sorted(kube.landed) == sorted(s.kind for s in steps if s.kind != "ResourceQuota")
