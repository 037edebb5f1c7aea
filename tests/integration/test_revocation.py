"""Revoking one kubeconfig, straight at the API server: each issued token is
bound to a Secret of its own (provisioning.credentials), and the API server
itself refuses a token whose Secret is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devstack.cluster import LocalCluster
from provisioning import manifests
from tests.support import kubeclients
from tests.support.kubeclients import claims
from tests.support.tenants import onboard, refusal

pytestmark = pytest.mark.cluster

# The API server caches successful token reviews for about 10 s.
_REVOKED_WITHIN_SECONDS = 15.0


async def _until_refused(core: client.CoreV1Api, namespace: str) -> float:
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        status, _ = refusal(lambda: core.list_namespaced_config_map(namespace))
        if status == 401:
            return loop.time() - started
        assert status == 200, status
        assert loop.time() - started < _REVOKED_WITHIN_SECONDS, "the revoked kubeconfig still works"
        await asyncio.sleep(0.2)


async def test_revoking_one_of_two_kubeconfigs_ends_that_one_at_the_api_server_alone(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    tenant = await onboard(gateway, tmp_path)
    second = tmp_path / "second.kubeconfig"
    second.write_text(await tenant.session.kubeconfig())
    lost = client.CoreV1Api(tenant.api)
    kept = client.CoreV1Api(kubeclients.from_kubeconfig(second))
    assert refusal(lambda: lost.list_namespaced_config_map(tenant.namespace))[0] == 200
    listed = await (await tenant.session.call("GET", "/api/v1/credentials")).json()
    assert len(listed) == 2 and all(c["revoked_at"] is None for c in listed)
    oldest = listed[-1]
    # The token names its Secret, which the API server checks on every request.
    token = yaml.safe_load((tmp_path / f"{tenant.session.user_id}.kubeconfig").read_text())["users"][0]["user"]["token"]
    bound = claims(token)["kubernetes.io"]
    assert bound["secret"]["name"] == manifests.credential_secret_name(oldest["id"])  # type: ignore[index]

    assert (await tenant.session.call("DELETE", f"/api/v1/credentials/{oldest['id']}")).status == 204
    await _until_refused(lost, tenant.namespace)
    assert refusal(lambda: kept.list_namespaced_config_map(tenant.namespace))[0] == 200
    after = {c["id"]: c["revoked_at"] for c in await (await tenant.session.call("GET", "/api/v1/credentials")).json()}
    assert after[oldest["id"]] is not None and after[listed[0]["id"]] is None
