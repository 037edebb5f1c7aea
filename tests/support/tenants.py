"""A hostile tenant as the attack tests play it: a registered user whose
workspace exists, holding the kubeconfig the gateway issued it, talking to
the API server directly with the official client."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provisioning import manifests
from tests.support import kubeclients
from tests.support.gatewayclient import Session, register_and_login


def refusal(call: Callable[[], object]) -> tuple[int, str]:
    """(status, message) of a call the API server answers; (200, "") if it succeeds."""
    try:
        call()
    except ApiException as error:
        return int(error.status), str(error.body)
    return 200, ""


@dataclass
class Tenant:
    session: Session
    workspace_id: str
    namespace: str
    api: client.ApiClient  # its real issued kubeconfig

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def rbac(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.api)


async def onboard(gateway: Any, tmp_path: Path, tier: str | None = None) -> Tenant:
    session = await register_and_login(gateway)
    workspace = await session.init(tier)
    path = tmp_path / f"{session.user_id}.kubeconfig"
    path.write_text(await session.kubeconfig())
    return Tenant(session, workspace["id"], workspace["namespace"], kubeclients.from_kubeconfig(path))


# A tier whose namespaces enforce Pod Security `baseline`, not `restricted`:
# where admission policies that `restricted` makes moot (volume kinds) still
# stand between a tenant and the node.
BASELINE_TIERS = "basic: {requests.cpu: '4'}\nrelaxed: {hard: {requests.cpu: '4'}, podSecurity: baseline}\n"


# What a workspace onboarded before the shared bounds existed was given.
OLD_QUOTA = {"requests.cpu": "4", "limits.memory": "8Gi"}


# The container defaults it was given (no ephemeral storage).
OLD_DEFAULTS = {"type": "Container", "default": {"cpu": "500m", "memory": "512Mi"},
                "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}


def old_limit_range(admin: client.CoreV1Api, tenant: Tenant) -> None:
    """Turn a fresh workspace's LimitRange into what onboarding used to write."""
    admin.patch_namespaced_limit_range(manifests.LIMITRANGE_NAME, tenant.namespace,
                                       {"spec": {"limits": [OLD_DEFAULTS]}})


def made_long_ago(admin: client.CoreV1Api, tenant: Tenant) -> None:
    """Turn a fresh workspace's quota into what onboarding used to write."""
    quota = admin.read_namespaced_resource_quota(manifests.QUOTA_NAME, tenant.namespace)
    assert quota.spec is not None
    quota.spec.hard = dict(OLD_QUOTA)
    admin.replace_namespaced_resource_quota(manifests.QUOTA_NAME, tenant.namespace, quota)


async def quota_enforced(core: client.CoreV1Api, namespace: str) -> dict[str, str]:
    """Wait until the quota controller has counted the namespace against the
    quota's current `hard` (admission refuses everything the quota names
    while its status is unknown); the quota's `hard`."""
    while True:
        quota = core.read_namespaced_resource_quota(manifests.QUOTA_NAME, namespace)
        wanted = dict(quota.spec.hard or {}) if quota.spec else {}
        if quota.status and quota.status.hard and set(quota.status.hard) == set(wanted):
            return wanted
        await asyncio.sleep(0.2)
