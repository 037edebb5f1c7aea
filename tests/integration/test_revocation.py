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
from proxy import keys
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


async def test_kubeconfigs_bound_to_spares_are_each_their_own_and_revoked_alone(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    """Spare binding Secrets (provisioning.spares), made by the real API
    server under the real admission policies: two kubeconfigs issued after
    the workspace's spares are made are bound to two of them, one each;
    revoking one ends it at the API server, and deletes its Secret and no
    other: the other kubeconfig and the remaining spares stay."""
    tenant = await onboard(gateway, tmp_path)  # its first kubeconfig: the spares are made after it
    await gateway.server.app[keys.SPARES].idle()
    admin = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))

    def binding_secrets() -> set[str]:
        found = admin.list_namespaced_secret(tenant.namespace,
                                             field_selector=f"type={manifests.CREDENTIAL_SECRET_TYPE}").items
        return {str(s.metadata.name) for s in found if s.metadata is not None}

    before = binding_secrets()
    assert len(before) == 1 + gateway.server.app[keys.SPARES].depth
    paths = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.kubeconfig"
        path.write_text(await tenant.session.kubeconfig())
        paths.append(path)
    tokens = [yaml.safe_load(p.read_text())["users"][0]["user"]["token"] for p in paths]
    bound = [claims(t)["kubernetes.io"]["secret"]["name"] for t in tokens]  # type: ignore[index]
    assert bound[0] != bound[1] and set(bound) <= before  # spares made before either was issued
    listed = {c["id"]: c for c in await (await tenant.session.call("GET", "/api/v1/credentials")).json()}
    assert {manifests.credential_secret_name(i) for i in listed} >= set(bound)  # each is its issuance's own
    await gateway.server.app[keys.SPARES].idle()
    lost_id = bound[0].removeprefix("credential-")
    lost, kept = (client.CoreV1Api(kubeclients.from_kubeconfig(p)) for p in paths)
    assert refusal(lambda: lost.list_namespaced_config_map(tenant.namespace))[0] == 200
    held = binding_secrets()
    assert (await tenant.session.call("DELETE", f"/api/v1/credentials/{lost_id}")).status == 204
    assert binding_secrets() == held - {bound[0]}
    await _until_refused(lost, tenant.namespace)
    assert refusal(lambda: kept.list_namespaced_config_map(tenant.namespace))[0] == 200
