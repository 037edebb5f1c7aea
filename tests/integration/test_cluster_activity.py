"""Given a workspace with two people, each with a downloaded kubeconfig,
when each uses kubectl straight at the API server (never through the
gateway), then the API server's own audit log, sent to the gateway's audit
listener (devstack.auditing), puts each create, patch and delete on the
activity timeline under the person who did it, within seconds, and each
person sees their own; even when their client chooses the requests' audit
IDs (`Audit-ID`), a non-UUID one or another request's."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
from kubernetes import client

from devstack.cluster import LocalCluster
from tests.support import kubeclients
from tests.support.gatewayclient import Session, register_and_login
from tests.support.members import join

pytestmark = pytest.mark.cluster

ACTIONS = {"create", "patch", "delete"}


async def use_kubectl(cluster: LocalCluster, kubeconfig: Path, name: str) -> None:
    for args in (("create", "configmap", name, "--from-literal=a=b"),
                 ("patch", "configmap", name, "-p", '{"data":{"a":"c"}}'),
                 ("delete", "configmap", name, "--wait=false")):
        done = await asyncio.to_thread(kubeclients.kubectl, cluster, kubeconfig, *args)
        assert done.returncode == 0, done.stderr


async def cluster_items(person: Session, query: str = "") -> list[dict[str, Any]]:
    answer = await person.call("GET", f"/api/v1/activity?limit=500{query}")
    assert answer.status == 200, await answer.text()
    return [item for item in (await answer.json())["items"] if item["source"] == "cluster"]


async def shown_within(person: Session, name: str, seconds: float) -> tuple[list[dict[str, Any]], float]:
    """The person's cluster events on `name` once create, patch and delete are all there."""
    started = time.monotonic()
    while True:
        items = [item for item in await cluster_items(person) if item["name"] == name]
        if ACTIONS <= {item["verb"] for item in items}:
            return items, time.monotonic() - started
        assert time.monotonic() - started < seconds, f"after {seconds} s, {name} shows {items}"
        await asyncio.sleep(0.25)


async def test_kubectl_straight_at_the_api_server_shows_on_each_person_s_timeline(
        cluster: LocalCluster, make_gateway: Callable[..., Awaitable[Any]], tmp_path: Path) -> None:
    gateway = await make_gateway(**cluster.audit_environment())
    owner = await register_and_login(gateway)
    workspace = await owner.init()
    member = await join(gateway, uuid.UUID(workspace["id"]), "edit", owner.user_id)
    configs = {}
    for person, stem in ((owner, "owner"), (member, "member")):
        path = tmp_path / f"{stem}.kubeconfig"
        path.write_text(await person.kubeconfig(workspace["id"]))
        configs[stem] = path
    credentials = {c["user_id"]: c["id"] for c in await (await owner.call(
        "GET", f"/api/v1/credentials?workspace_id={workspace['id']}")).json()}

    await use_kubectl(cluster, configs["owner"], "owner-settings")
    await use_kubectl(cluster, configs["member"], "member-settings")

    for person, name in ((owner, "owner-settings"), (member, "member-settings")):
        items, lag = await shown_within(person, name, seconds=10)
        assert lag < 10
        for item in items:
            assert (item["user_id"], item["workspace_id"], item["credential_id"]) == (
                person.user_id, workspace["id"], credentials[person.user_id])
            assert item["namespace"] == workspace["namespace"] and item["resource"] == "configmaps"
            assert item["user_agent"].startswith("kubectl")
        assert {item["code"] for item in items if item["verb"] in ACTIONS} <= {200, 201}
    # Each sees their own, not the other's; the workspace's admin sees both.
    assert "owner-settings" not in {item["name"] for item in await cluster_items(member)}
    assert "member-settings" not in {item["name"] for item in await cluster_items(owner)}
    both = {item["name"] for item in await cluster_items(owner, f"&workspace_id={workspace['id']}")}
    assert {"owner-settings", "member-settings"} <= both


def with_audit_id(kubeconfig: Path, audit_id: str | None) -> client.CoreV1Api:
    """The official client from the downloaded kubeconfig, sending `Audit-ID`
    on every request when given: the API server takes it as the event's ID."""
    api = kubeclients.from_kubeconfig(kubeconfig)
    if audit_id is not None:
        api.set_default_header("Audit-ID", audit_id)
    return client.CoreV1Api(api)


async def test_audit_ids_the_client_chooses_hide_none_of_its_requests(
        cluster: LocalCluster, make_gateway: Callable[..., Awaitable[Any]], tmp_path: Path) -> None:
    """Given a person's downloaded kubeconfig, used straight at the API server;
    when they create a ConfigMap, patch it as `Audit-ID: not-a-uuid` and
    delete it as the create's audit ID (the same ID and stage as an event
    already stored); then all three are on their timeline, under them."""
    gateway = await make_gateway(**cluster.audit_environment())
    owner = await register_and_login(gateway)
    workspace = await owner.init()
    path = tmp_path / "owner.kubeconfig"
    path.write_text(await owner.kubeconfig(workspace["id"]))
    [credential] = [c["id"] for c in await (await owner.call(
        "GET", f"/api/v1/credentials?workspace_id={workspace['id']}")).json()]
    namespace, name = workspace["namespace"], f"chosen-{uuid.uuid4().hex[:6]}"

    def requests() -> tuple[str, str, str]:
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"a": "b"})
        _, _, made = with_audit_id(path, None).create_namespaced_config_map_with_http_info(namespace, body)
        honest = made["Audit-Id"]
        _, _, patched = with_audit_id(path, "not-a-uuid").patch_namespaced_config_map_with_http_info(
            name, namespace, {"data": {"a": "c"}})
        _, _, deleted = with_audit_id(path, honest).delete_namespaced_config_map_with_http_info(name, namespace)
        return honest, patched["Audit-Id"], deleted["Audit-Id"]

    honest, patched, deleted = await asyncio.to_thread(requests)
    # The API server took each ID as the client sent it.
    assert str(uuid.UUID(honest)) == honest and (patched, deleted) == ("not-a-uuid", honest)

    items, _ = await shown_within(owner, name, seconds=10)
    assert sorted((item["verb"], item["audit_id"], item["code"]) for item in items) == [
        ("create", honest, 201), ("delete", honest, 200), ("patch", "not-a-uuid", 200)]
    for item in items:
        assert (item["user_id"], item["workspace_id"], item["credential_id"], item["via"]) == (
            owner.user_id, workspace["id"], credential, "kubeconfig")
