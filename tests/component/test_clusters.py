"""One gateway, two clusters (GATEWAY_CLUSTERS): each workspace's requests,
tokens and credentials go to its own cluster and never the other's; a
cluster that is down answers 503 naming it for its workspaces alone and
leaves the replica ready; placement's refusals; the combined kubeconfig;
the admins' cluster view.

Cluster `a` is a FAKE token issuer (tests/fakes/kube.py) with a FAKE API
server (tests/fakes/apiserver.py) as its pass-through upstream; cluster
`b` is the same, or, where it must be down, a real client to an address
where nothing listens (the ring's no-cluster kubeconfig). The cluster ring
shows the same with two real clusters."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from provisioning import revocation
from provisioning.db import repositories as repo
from provisioning.errors import ClusterUnavailable, Conflict
from provisioning.models import AuditEvent
from proxy import keys
from tests.fakes.apiserver import FakeAPIServer
from tests.fakes.kube import FakeCluster
from tests.support.gatewayclient import Session, admin_session, metric, metrics_text, register_and_login
from tests.support.members import join

TIERS = """
basic: {requests.cpu: "1"}
eu-only: {hard: {requests.cpu: "1"}, cluster_selector: {region: eu}}
hard: {hard: {requests.cpu: "8"}, dedicated: true}
"""


def fleet(b_kubeconfig: Path | None = None) -> list[dict[str, Any]]:
    return [
        {"name": "a", "public_server": "https://a.example:6443", "labels": {"region": "eu"}},
        {"name": "b", "public_server": "https://b.example:6443", "labels": {"region": "us"},
         **({"kubeconfig": str(b_kubeconfig)} if b_kubeconfig else {})},
        {"name": "d", "kind": "dedicated", "public_server": "https://d.example:6443"},
    ]


async def recorder(fake_api_server: FakeAPIServer, name: str, seen: list[tuple[str, str, str]]) -> Any:
    """A FAKE API server that notes (its name, path, token) of each request it takes."""
    async def answer(request: web.Request) -> web.Response:
        seen.append((name, request.path, request.headers.get("Authorization", "")))
        return web.json_response({"kind": "ConfigMapList", "items": [], "metadata": {"cluster": name}})

    _server, upstream = await fake_api_server(answer)
    return upstream


async def on_cluster(gateway: Any, cluster: str, person: Session | None = None) -> tuple[Session, uuid.UUID, str]:
    """A signed-in owner and their provisioned workspace on `cluster`,
    made in the database directly (no cluster here to onboard on), once
    the gateway has heard of it."""
    heard: set[str] = set()
    gateway.server.app[keys.EVENTS].subscribe(lambda message: heard.add(str(message.get("id"))))
    person = person or await register_and_login(gateway)
    db = gateway.server.app[keys.DATABASE]
    workspace, _ = await repo.claim_workspace(db, uuid.UUID(person.user_id), f"tenant-{person.user_id}",
                                              "sa-tenant-admin", "basic", cluster=cluster)
    await repo.finish_provisioning(db, workspace.id, f"uid-{cluster}", AuditEvent(
        "WorkspaceProvisioned", workspace.user_id, workspace.id, None, {}))
    async with asyncio.timeout(10):
        while str(workspace.id) not in heard:
            await asyncio.sleep(0.01)
    return person, workspace.id, workspace.namespace


async def two_clusters(make_gateway: Any, fake_api_server: FakeAPIServer) -> tuple[Any, dict[str, FakeCluster],
                                                                                    list[tuple[str, str, str]]]:
    seen: list[tuple[str, str, str]] = []
    kubes = {"a": FakeCluster(), "b": FakeCluster(), "d": FakeCluster()}
    upstreams = {name: await recorder(fake_api_server, name, seen) for name in kubes}
    gateway = await make_gateway(clusters=fleet(), kube=kubes, upstream=upstreams, tiers=TIERS)
    return gateway, kubes, seen


async def test_each_workspace_reaches_its_own_cluster_with_a_token_its_cluster_minted(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    gateway, kubes, seen = await two_clusters(make_gateway, fake_api_server)
    for cluster in ("a", "b"):
        owner, workspace_id, namespace = await on_cluster(gateway, cluster)
        answer = await gateway.get(f"/k8s/{workspace_id}/api/v1/namespaces/{namespace}/configmaps",
                                   headers=owner.bearer)
        assert answer.status == 200, await answer.text()
        assert (await answer.json())["metadata"]["cluster"] == cluster
        assert seen[-1] == (cluster, f"/api/v1/namespaces/{namespace}/configmaps",
                            f"Bearer {kubes[cluster].issued[-1]}")
        listed = await owner.call("GET", f"/api/v1/workspaces/{workspace_id}")
        assert (await listed.json())["cluster"] == cluster
    assert [len(kubes[name].issued) for name in ("a", "b", "d")] == [1, 1, 0]
    text = await metrics_text(gateway)
    assert metric(text, 'tenant_gateway_cluster_token_requests_total{cluster="a",result="success"}') == 1
    assert metric(text, 'tenant_gateway_cluster_token_requests_total{cluster="b",result="success"}') == 1
    for cluster in ("a", "b"):
        assert metric(text, f'tenant_gateway_cluster_proxied_requests_total{{cluster="{cluster}",kind="read"}}') == 1


@pytest.mark.parametrize("crafted", [
    "/api/v1/namespaces/{other}/configmaps",  # the other workspace's namespace, on the other cluster
    "/api/v1/namespaces/{mine}/configmaps/../../{other}/configmaps",
    "/api/v1/namespaces/{mine}/configmaps?cluster=b",
    "/apis/cluster.x-k8s.io/v1beta1/namespaces/{mine}/clusters/b/proxy/api/v1/namespaces/{other}/configmaps",
])
async def test_a_workspace_of_cluster_a_never_reaches_cluster_b_whatever_its_path(
        make_gateway: Any, fake_api_server: FakeAPIServer, crafted: str) -> None:
    """An attack: a path crafted for B, under a workspace of A. The path is
    relative to A's API server; nothing in it chooses a cluster."""
    gateway, kubes, seen = await two_clusters(make_gateway, fake_api_server)
    _victim, _victim_id, other = await on_cluster(gateway, "b")
    attacker, workspace_id, mine = await on_cluster(gateway, "a")
    answer = await gateway.get(f"/k8s/{workspace_id}" + crafted.format(mine=mine, other=other),
                               headers=attacker.bearer)
    assert answer.status in (200, 400, 403, 404), await answer.text()
    assert all(name == "a" for name, _path, _token in seen), seen
    assert kubes["b"].issued == []


async def test_a_cluster_down_is_a_503_naming_it_for_its_workspaces_alone_and_the_replica_stays_ready(
        make_gateway: Any, fake_api_server: FakeAPIServer, no_cluster_kubeconfig: Path) -> None:
    seen: list[tuple[str, str, str]] = []
    gateway = await make_gateway(clusters=fleet(no_cluster_kubeconfig),
                                 kube={"a": FakeCluster(), "d": FakeCluster()},
                                 upstream={"a": await recorder(fake_api_server, "a", seen),
                                           "d": await recorder(fake_api_server, "d", seen)})
    up_owner, up_id, up_namespace = await on_cluster(gateway, "a")
    down_owner, down_id, down_namespace = await on_cluster(gateway, "b")
    down = await gateway.get(f"/k8s/{down_id}/api/v1/namespaces/{down_namespace}/configmaps",
                             headers=down_owner.bearer)
    body = await down.json()
    assert down.status == 503 and body["error"]["code"] == "cluster_unavailable", body
    assert "cluster b" in body["error"]["message"] and "cluster b" in body["message"], body
    issued = await down_owner.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={down_id}")
    refusal = (await issued.json())["error"]
    assert issued.status == 503 and refusal["code"] == "cluster_unavailable" and "cluster b" in refusal["message"]
    up = await gateway.get(f"/k8s/{up_id}/api/v1/namespaces/{up_namespace}/configmaps", headers=up_owner.bearer)
    assert up.status == 200, await up.text()
    ready = await gateway.get("/readyz")
    report = await ready.json()
    assert ready.status == 200 and report["status"] == "degraded" and report["degraded"] == ["b"], report
    assert report["checks"]["clusters"] == {"a": "ok", "b": "unavailable", "d": "ok"}
    admin = await admin_session(gateway, gateway.server.app[keys.SETTINGS].database_url.reveal())
    view = {c["name"]: c for c in await (await admin.call("GET", "/api/v1/clusters")).json()}
    assert (view["a"]["reachable"], view["a"]["version"], view["b"]["reachable"], view["b"]["version"]) == (
        True, "v0.0.0-fake", False, None)


async def test_the_admins_see_each_cluster_its_workspaces_and_who_holds_a_dedicated_one(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    gateway, _kubes, _seen = await two_clusters(make_gateway, fake_api_server)
    await on_cluster(gateway, "a")
    await on_cluster(gateway, "a")
    db = gateway.server.app[keys.DATABASE]
    holder = await register_and_login(gateway)
    held, _ = await repo.claim_workspace(db, uuid.UUID(holder.user_id), f"tenant-{holder.user_id}",
                                         "sa-tenant-admin", "hard", cluster="d", dedicated=True)
    member = await register_and_login(gateway)
    assert (await member.call("GET", "/api/v1/clusters")).status == 403
    admin = await admin_session(gateway, gateway.server.app[keys.SETTINGS].database_url.reveal())
    answer = await admin.call("GET", "/api/v1/clusters")
    assert answer.status == 200
    assert await answer.json() == [
        {"name": "a", "labels": {"region": "eu"}, "kind": "shared", "reachable": True, "version": "v0.0.0-fake",
         "workspaces": 2, "dedicated_to": None},
        {"name": "b", "labels": {"region": "us"}, "kind": "shared", "reachable": True, "version": "v0.0.0-fake",
         "workspaces": 0, "dedicated_to": None},
        {"name": "d", "labels": {}, "kind": "dedicated", "reachable": True, "version": "v0.0.0-fake",
         "workspaces": 1, "dedicated_to": str(held.id)},
    ]


async def test_placement_refusals_are_clear_and_one_dedicated_cluster_holds_one_workspace(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    gateway, _kubes, _seen = await two_clusters(make_gateway, fake_api_server)
    person = await register_and_login(gateway)
    for body, expected in (
        ({"cluster": "nowhere"}, (400, "unknown_cluster")),
        ({"cluster": "Not A Name"}, (400, "unknown_cluster")),
        ({"cluster": "d"}, (403, "cluster_not_allowed")),
        ({"tier": "eu-only", "cluster": "b"}, (403, "cluster_not_allowed")),
        ({"labels": {"region": "mars"}}, (400, "no_matching_cluster")),
        ({"labels": ["region"]}, (400, "invalid_labels")),
    ):
        answer = await person.call("POST", "/api/v1/workspaces/init", json=body)
        assert (answer.status, (await answer.json())["error"]["code"]) == expected, body
    # The dedicated cluster is held: the next dedicated workspace has nowhere to go.
    db = gateway.server.app[keys.DATABASE]
    holder = await register_and_login(gateway)
    await repo.claim_workspace(db, uuid.UUID(holder.user_id), f"tenant-{holder.user_id}", "sa-tenant-admin",
                               "hard", cluster="d", dedicated=True)
    refused = await person.call("POST", "/api/v1/workspaces/init", json={"tier": "hard"})
    error = (await refused.json())["error"]
    assert refused.status == 409 and error["code"] == "no_free_cluster" and "no free dedicated cluster" in error[
        "message"], error
    # Whatever Python read, the database keeps one workspace per dedicated cluster.
    with pytest.raises(Conflict) as raced:
        await repo.claim_workspace(db, uuid.UUID(person.user_id), f"tenant-{person.user_id}", "sa-tenant-admin",
                                   "hard", cluster="d", dedicated=True)
    assert raced.value.code == "no_free_cluster"
    assert await repo.workspaces_of(db, uuid.UUID(person.user_id)) == []


async def test_the_combined_kubeconfig_has_each_workspace_on_its_own_cluster_each_credential_issued_there(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    gateway, kubes, _seen = await two_clusters(make_gateway, fake_api_server)
    owner, a_id, a_namespace = await on_cluster(gateway, "a")
    other, b_id, b_namespace = await on_cluster(gateway, "b")
    await join(gateway, b_id, "edit", other.user_id, person=owner)
    answer = await owner.call("GET", "/api/v1/workspaces/credentials/kubeconfig?all=true")
    assert answer.status == 200, await answer.text()
    config = yaml.safe_load(await answer.text())
    names = sorted([f"a/{a_namespace}", f"b/{b_namespace}"])
    assert [c["name"] for c in config["contexts"]] == names
    servers = {c["name"]: c["cluster"]["server"] for c in config["clusters"]}
    assert servers == {f"a/{a_namespace}": "https://a.example:6443", f"b/{b_namespace}": "https://b.example:6443"}
    tokens = {u["name"]: u["user"]["token"] for u in config["users"]}
    assert tokens[f"a/{a_namespace}"] == kubes["a"].issued[-1] and tokens[f"b/{b_namespace}"] == kubes["b"].issued[-1]
    # The member's own account in B was made on B, and only there.
    assert kubes["b"].names(b_namespace, "serviceaccounts") and not kubes["a"].names(b_namespace, "serviceaccounts")
    # Each one a credential of its own, audited: listed with its workspace.
    listed = await (await owner.call("GET", "/api/v1/credentials")).json()
    assert sorted(c["workspace_id"] for c in listed) == sorted([str(a_id), str(b_id)])
    exec_form = yaml.safe_load(await (await owner.call(
        "GET", "/api/v1/workspaces/credentials/kubeconfig?all=true&format=exec")).text())
    assert {u["name"]: u["user"]["exec"]["args"][-1] for u in exec_form["users"]} == {
        f"a/{a_namespace}": str(a_id), f"b/{b_namespace}": str(b_id)}
    refused = await owner.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?all=true&workspace_id={a_id}")
    assert refused.status == 400


async def test_each_credential_records_its_cluster_and_the_sweep_goes_on_past_a_cluster_that_is_down(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    gateway, kubes, _seen = await two_clusters(make_gateway, fake_api_server)
    on_a, a_id, _ = await on_cluster(gateway, "a")
    on_b, b_id, _ = await on_cluster(gateway, "b")
    for person, workspace_id in ((on_a, a_id), (on_b, b_id)):
        answer = await person.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace_id}")
        assert answer.status == 200, await answer.text()
    db = gateway.server.app[keys.DATABASE]
    await gateway.server.app[keys.SPARES].idle()
    rows = await db.fetch("SELECT workspace_id, cluster FROM credentials")
    # Each issuance's row and each spare's made after it (provisioning.spares), on its workspace's cluster.
    assert {(row["workspace_id"], row["cluster"]) for row in rows} == {(a_id, "a"), (b_id, "b")}
    held = {name: len(kubes[name].secrets) for name in ("a", "b")}
    assert held["a"] > 1 and [row["cluster"] for row in rows].count("a") == held["a"]
    # Test setup: all expired, and b's API server gone (a FAKE that cannot be reached on cue).
    await db.fetch("UPDATE credentials SET expires_at = now() - interval '1 minute'")
    fleet = gateway.server.app[keys.FLEET]

    async def unreachable(path: str) -> dict[str, Any]:
        raise ClusterUnavailable()

    kubes["b"].delete = unreachable  # type: ignore[method-assign]
    assert await revocation.sweep(db, fleet) == held["a"]  # a's; b's wait for a later sweep
    assert kubes["a"].secrets == {} and kubes["b"].unbound == [] and len(kubes["b"].secrets) == held["b"]
    del kubes["b"].delete
    assert await revocation.sweep(db, fleet) == held["b"]
    assert kubes["b"].secrets == {}


async def test_a_suspended_users_accounts_go_on_every_cluster_they_are_a_member_on(
        make_gateway: Any, fake_api_server: FakeAPIServer, database_url: str) -> None:
    gateway, kubes, _seen = await two_clusters(make_gateway, fake_api_server)
    owner_a, a_id, a_namespace = await on_cluster(gateway, "a")
    owner_b, b_id, b_namespace = await on_cluster(gateway, "b")
    person = await join(gateway, a_id, "edit", owner_a.user_id)
    await join(gateway, b_id, "view", owner_b.user_id, person=person)
    for workspace_id in (a_id, b_id):  # their first credential makes their account there
        answer = await person.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace_id}")
        assert answer.status == 200, await answer.text()
    account = "/serviceaccounts/"
    assert any(account in path and a_namespace in path for path in kubes["a"].objects)
    assert any(account in path and b_namespace in path for path in kubes["b"].objects)
    admin = await admin_session(gateway, database_url)
    assert (await admin.call("POST", f"/api/v1/users/{person.user_id}/suspend")).status == 200
    for name, namespace in (("a", a_namespace), ("b", b_namespace)):
        assert not kubes[name].names(namespace, "serviceaccounts") - {"sa-tenant-admin"}, name
        assert len(kubes[name].unbound) == 1, name  # their credential there revoked, on its own cluster
