"""One gateway, two real clusters (`../shared/api-contract.md`, "Several
clusters"): alpha, the session's cluster with its node, and beta, a second
control plane with its own CA, ServiceAccount key and issuer
(tests/conftest.py's `second_cluster`). Every gateway here, replicas
included, reads a GATEWAY_CLUSTERS file naming both (tests.support.fleet).
What each cluster really holds is read with that cluster's own admin."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devstack.cluster import SERVICE_ACCOUNT_ISSUER, LocalCluster, fleet_issuer
from provisioning import manifests
from tests.support import kubeclients
from tests.support.fleet import (
    ALPHA,
    BETA,
    LABELS,
    admin_core,
    apiserver_down,
    clusters_file,
    has_namespace,
    init,
    tenant_on,
)
from tests.support.gatewayclient import admin_session, error_of, k8s_error, register_and_login
from tests.support.replicas import tls_session
from tests.support.teams import add_member
from tests.support.tenants import refusal

pytestmark = pytest.mark.cluster
SCRIPT = str(Path(sys.executable).with_name("tenant-gateway"))
DEDICATED_TIERS = "basic: {requests.cpu: '4'}\nisolated: {hard: {requests.cpu: '4'}, dedicated: true}\n"


@pytest.fixture
def gateway_env(fleet_env: dict[str, str]) -> dict[str, str]:
    """Every gateway of this module (and its replicas) serves both clusters."""
    return fleet_env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def configmap_data(cluster: LocalCluster, namespace: str, name: str) -> dict[str, str] | None:
    """A ConfigMap's data as the cluster's own admin reads it; None if it is not there."""
    status, _ = refusal(lambda: admin_core(cluster).read_namespaced_config_map(name, namespace))
    if status == 404:
        return None
    return dict(admin_core(cluster).read_namespaced_config_map(name, namespace).data or {})


async def clusters_view(admin: Any) -> dict[str, dict[str, Any]]:
    answer = await admin.call("GET", "/api/v1/clusters")
    assert answer.status == 200, await answer.text()
    return {entry["name"]: entry for entry in await answer.json()}


async def test_onboarding_onto_each_cluster_by_name_and_by_default_placement(
        cluster: LocalCluster, second_cluster: LocalCluster, gateway: Any, database_url: str) -> None:
    named = await register_and_login(gateway)
    made = await init(named, BETA)
    assert made.status == 201, await made.text()
    on_beta = await made.json()
    assert on_beta["cluster"] == BETA and on_beta["status"] == "provisioned"
    namespace = on_beta["namespace"]
    assert has_namespace(second_cluster, namespace) and not has_namespace(cluster, namespace)
    # Onboarded there as on any cluster: its quota, LimitRange and NetworkPolicy.
    quota = admin_core(second_cluster).read_namespaced_resource_quota(manifests.QUOTA_NAME, namespace)
    assert quota.spec is not None and quota.spec.hard["requests.cpu"] == "4"
    again = await init(named, BETA)
    assert again.status == 200 and (await again.json())["id"] == on_beta["id"]

    # Default placement: the shared cluster with the fewest workspaces (beta has one).
    placed = await register_and_login(gateway)
    made = await init(placed)
    assert made.status == 201, await made.text()
    on_alpha = await made.json()
    assert on_alpha["cluster"] == ALPHA
    assert has_namespace(cluster, on_alpha["namespace"]) and not has_namespace(second_cluster, on_alpha["namespace"])

    # A cluster the gateway does not serve is the caller's mistake, and nothing is made.
    stray = await register_and_login(gateway)
    unknown = await init(stray, "gamma")
    status, _ = await error_of(unknown)
    assert 400 <= status < 500
    listed = await stray.call("GET", "/api/v1/workspaces")
    assert listed.status == 200 and await listed.json() == []

    # Every workspace answer names its cluster.
    mine = await (await named.call("GET", "/api/v1/workspaces")).json()
    assert [(w["id"], w["cluster"]) for w in mine] == [(on_beta["id"], BETA)]

    # The admins' view of the fleet; nobody else's.
    admin = await admin_session(gateway, database_url)
    fleet = await clusters_view(admin)
    assert set(fleet) == {ALPHA, BETA}
    for name in (ALPHA, BETA):
        assert fleet[name]["kind"] == "shared" and fleet[name]["labels"] == LABELS[name]
        assert fleet[name]["reachable"] is True and fleet[name]["version"].startswith("v1.")
        assert fleet[name]["workspaces"] == 1 and fleet[name]["dedicated_to"] is None
    refused = await named.call("GET", "/api/v1/clusters")
    assert (await error_of(refused))[0] == 403


async def test_a_dedicated_tier_takes_the_free_dedicated_cluster_and_refuses_a_second_workspace(
        cluster: LocalCluster, second_cluster: LocalCluster, make_gateway: Any, database_url: str,
        tmp_path: Path) -> None:
    dedicated = clusters_file(tmp_path / "dedicated.yaml", {ALPHA: cluster, BETA: second_cluster}, {BETA: "dedicated"})
    gateway = await make_gateway(GATEWAY_CLUSTERS=str(dedicated), tiers=DEDICATED_TIERS)

    first, workspace = await tenant_on(gateway, None, "isolated")
    assert workspace["cluster"] == BETA
    assert has_namespace(second_cluster, workspace["namespace"]) and not has_namespace(cluster, workspace["namespace"])

    # The only dedicated cluster is taken: 409, and nothing is made anywhere.
    second = await register_and_login(gateway)
    refused = await init(second, tier="isolated")
    assert (await error_of(refused))[0] == 409
    assert not has_namespace(cluster, f"tenant-{second.user_id}")
    assert not has_namespace(second_cluster, f"tenant-{second.user_id}")
    assert await (await second.call("GET", "/api/v1/workspaces")).json() == []

    # Shared tiers never land on a dedicated cluster.
    _, shared = await tenant_on(gateway, None, "basic")
    assert shared["cluster"] == ALPHA

    admin = await admin_session(gateway, database_url)
    fleet = await clusters_view(admin)
    assert fleet[BETA]["kind"] == "dedicated" and fleet[BETA]["dedicated_to"] == workspace["id"]
    assert fleet[BETA]["workspaces"] == 1 and fleet[ALPHA]["dedicated_to"] is None


async def test_kubectl_switches_between_clusters_in_the_combined_kubeconfig(
        cluster: LocalCluster, second_cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    """A person in a workspace on each cluster: one file, one context per
    workspace named <cluster>/<namespace>, each reaching its own cluster."""
    person, on_alpha = await tenant_on(gateway, ALPHA)
    owner, on_beta = await tenant_on(gateway, BETA)
    await add_member(database_url, on_beta["id"], owner.user_id, person.user_id, "edit")

    answer = await person.call("GET", "/api/v1/workspaces/credentials/kubeconfig?all=true")
    assert answer.status == 200, await answer.text()
    text = await answer.text()
    config = yaml.safe_load(text)
    expected = {f"{ALPHA}/{on_alpha['namespace']}": (cluster, on_alpha["namespace"]),
                f"{BETA}/{on_beta['namespace']}": (second_cluster, on_beta["namespace"])}
    contexts = {entry["name"]: entry["context"] for entry in config["contexts"]}
    assert set(contexts) == set(expected)
    clusters = {entry["name"]: entry["cluster"] for entry in config["clusters"]}
    users = {entry["name"] for entry in config["users"]}
    assert len({c["cluster"] for c in contexts.values()}) == 2 and len({c["user"] for c in contexts.values()}) == 2
    assert {c["user"] for c in contexts.values()} <= users
    for name, (local, namespace) in expected.items():
        entry = clusters[contexts[name]["cluster"]]
        assert entry["server"] == local.server and contexts[name]["namespace"] == namespace
        assert base64.b64decode(entry["certificate-authority-data"]) == local.ca_file.read_bytes()

    path = tmp_path / "fleet.kubeconfig"
    path.write_text(text)
    for name, (local, namespace) in expected.items():
        made = await asyncio.to_thread(kubeclients.kubectl, cluster, path, "--context", name,
                                       "create", "configmap", "switched", f"--from-literal=context={name}")
        assert made.returncode == 0, made.stderr
        assert configmap_data(local, namespace, "switched") == {"context": name}
    for name, (local, namespace) in expected.items():
        used = await asyncio.to_thread(kubeclients.kubectl, cluster, path, "config", "use-context", name)
        assert used.returncode == 0, used.stderr
        read = await asyncio.to_thread(kubeclients.kubectl, cluster, path, "get", "configmap", "switched",
                                       "-o", "jsonpath={.data.context}")
        assert read.returncode == 0 and read.stdout == name, read.stderr
    # Each workspace's namespace exists on its own cluster only.
    assert not has_namespace(second_cluster, on_alpha["namespace"])
    assert not has_namespace(cluster, on_beta["namespace"])

    # Names are stable: another download has the same contexts.
    again = yaml.safe_load(await (await person.call(
        "GET", "/api/v1/workspaces/credentials/kubeconfig?all=true")).text())
    assert {entry["name"] for entry in again["contexts"]} == set(expected)


async def test_the_proxy_reaches_each_workspace_cluster_and_never_the_other(
        cluster: LocalCluster, second_cluster: LocalCluster, gateway: Any) -> None:
    alpha_user, on_alpha = await tenant_on(gateway, ALPHA)
    beta_user, on_beta = await tenant_on(gateway, BETA)
    ns_a, ns_b = on_alpha["namespace"], on_beta["namespace"]
    # Each cluster's admin leaves a mark saying which cluster it is.
    cluster.kubectl_run("-n", ns_a, "create", "configmap", "which", "--from-literal=cluster=alpha")
    second_cluster.kubectl_run("-n", ns_b, "create", "configmap", "which", "--from-literal=cluster=beta")

    for user, workspace, namespace, name in ((alpha_user, on_alpha, ns_a, ALPHA), (beta_user, on_beta, ns_b, BETA)):
        answer = await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{namespace}/configmaps/which")
        assert answer.status == 200, await answer.text()
        assert (await answer.json())["data"] == {"cluster": name}
        # A write lands on the workspace's cluster, and only there.
        made = await user.call("POST", f"/k8s/{workspace['id']}/api/v1/namespaces/{namespace}/configmaps",
                               json={"metadata": {"name": "written"}, "data": {"via": name}})
        assert made.status == 201, await made.text()
    assert configmap_data(cluster, ns_a, "written") == {"via": ALPHA}
    assert configmap_data(second_cluster, ns_b, "written") == {"via": BETA}

    # alpha's workspace with paths crafted for beta's: walled, never beta's data.
    base = f"/k8s/{on_alpha['id']}"
    crafted = [
        f"{base}/api/v1/namespaces/{ns_b}/configmaps/which",
        f"{base}/api/v1/namespaces/{ns_b}/configmaps",
        f"{base}/api/v1/namespaces/{ns_a}/../{ns_b}/configmaps/which",
        f"{base}/api/v1/namespaces/{ns_a}/%2e%2e/{ns_b}/configmaps/which",
        f"{base}/%2e%2e/{on_beta['id']}/api/v1/namespaces/{ns_b}/configmaps/which",
        f"{base}/api/v1/namespaces/{ns_b}/configmaps/which?cluster={BETA}",
        f"/k8s/{on_beta['id']}/api/v1/namespaces/{ns_b}/configmaps/which",  # not alpha_user's workspace
    ]
    for path in crafted:
        answer = await alpha_user.call("GET", path, headers={"X-Cluster": BETA, "X-Forwarded-Host": "beta"})
        text = await answer.text()
        assert answer.status in (400, 403, 404), (path, answer.status, text)
        assert '"beta"' not in text, path
    # Nor a write there: beta's namespace is untouched.
    wrote = await alpha_user.call("POST", f"{base}/api/v1/namespaces/{ns_b}/configmaps",
                                  json={"metadata": {"name": "crossed"}, "data": {"from": ALPHA}})
    assert wrote.status in (400, 403, 404)
    assert configmap_data(second_cluster, ns_b, "crossed") is None
    assert configmap_data(cluster, ns_b, "crossed") is None


async def test_a_token_minted_on_one_cluster_is_refused_by_the_other(
        cluster: LocalCluster, second_cluster: LocalCluster, gateway: Any) -> None:
    tokens: dict[str, str] = {}
    namespaces: dict[str, str] = {}
    for name in (ALPHA, BETA):
        user, workspace = await tenant_on(gateway, name)
        config = yaml.safe_load(await user.kubeconfig())
        tokens[name] = config["users"][0]["user"]["token"]
        namespaces[name] = workspace["namespace"]
    locals_ = {ALPHA: cluster, BETA: second_cluster}
    assert kubeclients.claims(tokens[ALPHA])["iss"] == SERVICE_ACCOUNT_ISSUER
    assert kubeclients.claims(tokens[BETA])["iss"] == fleet_issuer(BETA)
    for minted, other in ((ALPHA, BETA), (BETA, ALPHA)):
        own = client.CoreV1Api(kubeclients.from_token(locals_[minted], tokens[minted]))
        assert refusal(lambda: own.list_namespaced_config_map(namespaces[minted]))[0] == 200
        elsewhere = client.CoreV1Api(kubeclients.from_token(locals_[other], tokens[minted]))
        for namespace in namespaces.values():
            assert refusal(lambda: elsewhere.list_namespaced_config_map(namespace))[0] == 401


async def test_one_cluster_down_answers_503_naming_it_and_the_other_is_served_and_suspended(
        cluster: LocalCluster, second_cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    alpha_user, on_alpha = await tenant_on(gateway, ALPHA)
    beta_user, on_beta = await tenant_on(gateway, BETA)
    admin = await admin_session(gateway, database_url)
    on_a = f"/k8s/{on_alpha['id']}/api/v1/namespaces/{on_alpha['namespace']}/configmaps"
    on_b = f"/k8s/{on_beta['id']}/api/v1/namespaces/{on_beta['namespace']}/configmaps"
    for user, path in ((alpha_user, on_a), (beta_user, on_b)):  # both warm: pooled connections, cached tokens
        assert (await user.call("GET", path)).status == 200
    kubeconfig = tmp_path / "alpha.kubeconfig"
    kubeconfig.write_text(await alpha_user.kubeconfig())

    with apiserver_down(second_cluster):
        answer = await beta_user.call("GET", on_b)
        assert (await k8s_error(answer)) == (503, "cluster_unavailable")
        assert BETA in (await answer.json())["message"]
        issued = await beta_user.call("GET", "/api/v1/workspaces/credentials/kubeconfig")
        assert (await error_of(issued))[0] == 503
        assert BETA in (await issued.json())["error"]["message"]
        refused = await init(await register_and_login(gateway), BETA)
        assert (await error_of(refused))[0] == 503

        # alpha is untouched: served, issuing, onboarding.
        assert (await alpha_user.call("GET", on_a)).status == 200
        assert (await alpha_user.call("GET", "/api/v1/workspaces/credentials/kubeconfig")).status == 200
        _, placed = await tenant_on(gateway, ALPHA)
        assert placed["cluster"] == ALPHA

        ready = await gateway.get("/readyz")
        assert ready.status == 200, await ready.text()
        assert BETA in await ready.text() and "degraded" in await ready.text()
        fleet = await clusters_view(admin)
        assert fleet[BETA]["reachable"] is False and fleet[ALPHA]["reachable"] is True

        # Suspension on alpha while beta is down: the kill switch works there at once.
        suspended = await admin.call("POST", f"/api/v1/workspaces/{on_alpha['id']}/suspend")
        assert suspended.status == 200, await suspended.text()
        assert (await k8s_error(await alpha_user.call("GET", on_a)))[0] == 403
        deadline = time.monotonic() + 20
        while (await asyncio.to_thread(kubeclients.kubectl, cluster, kubeconfig, "get", "configmaps")).returncode == 0:
            assert time.monotonic() < deadline, "alpha's kubeconfig still works 20 s after suspension"
            await asyncio.sleep(0.5)

    # beta back: its workspace is served again, with no restart of the gateway.
    deadline = time.monotonic() + 30
    while (answer := await beta_user.call("GET", on_b)).status != 200:
        assert time.monotonic() < deadline, await answer.text()
        await asyncio.sleep(0.5)
    assert (await gateway.get("/readyz")).status == 200


async def test_check_and_reconcile_cover_both_clusters_and_name_the_failing_one(
        cluster: LocalCluster, second_cluster: LocalCluster, gateway: Any, gateway_env: dict[str, str]) -> None:
    checked = await asyncio.to_thread(cli, gateway_env, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert ALPHA in checked.stdout and BETA in checked.stdout

    # A workspace on each whose quota is what onboarding used to write: reconcile brings both to the tier.
    placed = {}
    for name, local in ((ALPHA, cluster), (BETA, second_cluster)):
        _, workspace = await tenant_on(gateway, name)
        quota = admin_core(local).read_namespaced_resource_quota(manifests.QUOTA_NAME, workspace["namespace"])
        assert quota.spec is not None
        quota.spec.hard = {"requests.cpu": "4", "limits.memory": "8Gi"}
        admin_core(local).replace_namespaced_resource_quota(manifests.QUOTA_NAME, workspace["namespace"], quota)
        placed[name] = (local, workspace["namespace"])
    reconciled = await asyncio.to_thread(cli, gateway_env, "reconcile")
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
    for local, namespace in placed.values():
        hard = admin_core(local).read_namespaced_resource_quota(manifests.QUOTA_NAME, namespace).spec.hard
        assert hard["pods"] == "50" and hard["count/deployments.apps"] == "20", hard

    with apiserver_down(second_cluster):
        failing = await asyncio.to_thread(cli, gateway_env, "check")
        assert failing.returncode != 0
        said = failing.stdout + failing.stderr
        assert BETA in said and ALPHA in said, said  # beta named as failing; alpha still checked
        stopped = await asyncio.to_thread(cli, gateway_env, "reconcile")
        assert stopped.returncode == 2 and BETA in stopped.stdout + stopped.stderr


async def test_two_replicas_serve_both_clusters(
        cluster: LocalCluster, second_cluster: LocalCluster, gateway: Any, second_gateway: str,
        database_url: str) -> None:
    """The in-process gateway and a `tenant-gateway serve` process, one database."""
    beta_user = await register_and_login(gateway)
    async with tls_session(gateway, headers=beta_user.bearer) as replica:
        async with replica.post(f"{second_gateway}/api/v1/workspaces/init", json={"cluster": BETA}) as made:
            assert made.status == 201, await made.text()
            on_beta = await made.json()
        assert on_beta["cluster"] == BETA and has_namespace(second_cluster, on_beta["namespace"])
    alpha_user, on_alpha = await tenant_on(gateway, ALPHA)
    paths = {ALPHA: (alpha_user, f"/k8s/{on_alpha['id']}/api/v1/namespaces/{on_alpha['namespace']}/configmaps"),
             BETA: (beta_user, f"/k8s/{on_beta['id']}/api/v1/namespaces/{on_beta['namespace']}/configmaps")}
    for name, (user, path) in paths.items():
        assert (await user.call("GET", path)).status == 200, name
        async with tls_session(gateway, headers=user.bearer) as replica, replica.get(second_gateway + path) as answer:
            assert answer.status == 200, (name, await answer.text())

    # Suspended on one replica, refused on the other at once; alpha's workspace served there still.
    admin = await admin_session(gateway, database_url)
    assert (await admin.call("POST", f"/api/v1/workspaces/{on_beta['id']}/suspend")).status == 200
    deadline = time.monotonic() + 10
    while True:
        async with tls_session(gateway, headers=beta_user.bearer) as replica, \
                replica.get(second_gateway + paths[BETA][1]) as answer:
            if answer.status == 403:
                break
        assert time.monotonic() < deadline, "the replica still serves a suspended workspace"
        await asyncio.sleep(0.2)
    async with tls_session(gateway, headers=alpha_user.bearer) as replica, \
            replica.get(second_gateway + paths[ALPHA][1]) as answer:
        assert answer.status == 200
