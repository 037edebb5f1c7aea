"""Two real clusters as one gateway's fleet, as the two-cluster tests use
them: `alpha` is the session's whole cluster (with its node), `beta` a
second control plane (tests/conftest.py's `second_cluster`), each named in a
GATEWAY_CLUSTERS file (devstack.fleet) the test gateways and replicas read."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, Iterator, Mapping

from kubernetes import client

from devstack.cluster import LocalCluster
from devstack.fleet import Kind, Member, write_clusters_file
from proxy import keys
from tests.support import kubeclients
from tests.support.environment import gateway_environment
from tests.support.gatewayclient import Session, register_and_login

ALPHA, BETA = "alpha", "beta"
LABELS = {ALPHA: {"region": "north", "environment": "test"}, BETA: {"region": "south", "environment": "test"}}


def clusters_file(path: Path, clusters: Mapping[str, LocalCluster], kinds: Mapping[str, Kind] | None = None) -> Path:
    """A GATEWAY_CLUSTERS file naming `clusters` (name -> cluster), each
    shared unless `kinds` says otherwise, with LABELS."""
    kinds = kinds or {}
    return write_clusters_file(path, [Member.of(name, cluster, kinds.get(name, "shared"), LABELS.get(name))
                                      for name, cluster in clusters.items()])


def fleet_environment(database_url: str, clusters: Path) -> dict[str, str]:
    """gateway_environment with GATEWAY_CLUSTERS instead of the single
    cluster's GATEWAY_KUBECONFIG (setting both is a start-up error)."""
    env = gateway_environment(Path("unused"), database_url)
    del env["GATEWAY_KUBECONFIG"]
    return {**env, "GATEWAY_CLUSTERS": str(clusters)}


@contextlib.contextmanager
def apiserver_down(cluster: LocalCluster) -> Iterator[None]:
    """The cluster's API server stopped for the block (connections refused),
    then started again on its port: the cluster is shared by the session."""
    cluster.stop_apiserver()
    try:
        yield
    finally:
        cluster.restart_apiserver()


def admin_core(cluster: LocalCluster) -> client.CoreV1Api:
    """The cluster's own administrator, to see what is really there."""
    return client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))


def has_namespace(cluster: LocalCluster, namespace: str) -> bool:
    return cluster.kubectl_run("get", "namespace", namespace, check=False).returncode == 0


async def init(session: Session, cluster: str | None = None, tier: str | None = None) -> Any:
    """POST /api/v1/workspaces/init with the optional `cluster` and `tier`: the raw answer."""
    body = {key: value for key, value in (("cluster", cluster), ("tier", tier)) if value is not None}
    return await session.call("POST", "/api/v1/workspaces/init", json=body)


async def tenant_on(gateway: Any, cluster: str | None, tier: str | None = None) -> tuple[Session, dict[str, Any]]:
    """A new user and their workspace, placed on `cluster` (None: by the
    gateway's default placement), returned once this gateway has heard its
    workspace_changed event (tests.support.gatewayclient.tenant says why)."""
    provisioned: set[str] = set()
    gateway.server.app[keys.EVENTS].subscribe(
        lambda message: provisioned.add(str(message.get("id"))) if message.get("status") == "provisioned" else None)
    user = await register_and_login(gateway)
    answer = await init(user, cluster, tier)
    assert answer.status in (200, 201), await answer.text()
    workspace = dict(await answer.json())
    async with asyncio.timeout(10):
        while workspace["id"] not in provisioned:
            await asyncio.sleep(0.01)
    return user, workspace
