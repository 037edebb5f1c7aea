"""Onboarding's creates as a group: a failing create does not leave the
others running behind the caller's back. Pure (a scripted client, no I/O)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from provisioning import manifests, onboarding
from provisioning.errors import ClusterUnavailable
from provisioning.kube.errors import KubeForbidden, KubeNotFound
from provisioning.onboarding import converge_object, ensure_objects
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


class _QuotaKube:
    """A scripted client whose creates quota admission refuses: `refusals`
    times, and with the object already there or not."""

    def __init__(self, message: str, refusals: int, exists: bool) -> None:
        self.message, self.refusals, self.exists = message, refusals, exists
        self.creates = 0

    async def create(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        self.creates += 1
        if self.creates <= self.refusals:
            raise KubeForbidden(403, "Forbidden", f'serviceaccounts "sa-tenant-admin" is forbidden: {self.message}')
        return {**body, "metadata": {**body["metadata"], "uid": "new"}}

    async def get(self, path: str) -> dict[str, Any]:
        if not self.exists:
            raise KubeNotFound(404, "NotFound", path)
        step = manifests.service_account_step("tenant-u", "wid")
        return {**step.body, "metadata": {**step.body["metadata"], "uid": "old"}}


async def test_an_object_already_there_is_adopted_when_its_count_is_full() -> None:
    # Quota admission judges the create before the API server finds the name
    # taken: a repeated onboarding at the tenant's count is not a second count.
    kube = _QuotaKube("exceeded quota: tenant-quota, requested: count/serviceaccounts=1", refusals=99, exists=True)
    made, done = await converge_object(kube, manifests.service_account_step("tenant-u", "wid"), "wid")  # type: ignore[arg-type]
    assert (made["metadata"]["uid"], done, kube.creates) == ("old", None, 1)


async def test_a_create_before_the_quota_is_counted_is_tried_again() -> None:
    kube = _QuotaKube("status unknown for quota: tenant-quota, resources: count/serviceaccounts",
                      refusals=2, exists=False)
    made, done = await converge_object(kube, manifests.service_account_step("tenant-u", "wid"), "wid")  # type: ignore[arg-type]
    assert (made["metadata"]["uid"], done, kube.creates) == ("new", "created", 3)


async def test_a_count_that_stays_full_is_503_not_a_gateway_permission_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onboarding, "QUOTA_COUNTING_SECONDS", 0.3)
    kube = _QuotaKube("exceeded quota: tenant-quota", refusals=99, exists=False)
    with pytest.raises(ClusterUnavailable):
        await converge_object(kube, manifests.service_account_step("tenant-u", "wid"), "wid")  # type: ignore[arg-type]
    assert kube.creates > 1


async def test_other_refusals_are_not_retried() -> None:
    kube = _QuotaKube("User cannot create resource", refusals=99, exists=False)
    with pytest.raises(KubeForbidden):
        await converge_object(kube, manifests.service_account_step("tenant-u", "wid"), "wid")  # type: ignore[arg-type]
    assert kube.creates == 1
