"""Given a workspace with its owner and an `edit` member, and a gateway admin
who is no member, when each works through the gateway's proxy (kubectl
pointed at `/k8s/{workspace}` with their gateway token, or a plain GET),
then the API server's own audit log, sent to the gateway's audit listener,
puts each of those requests on the timeline of the person who made it, once,
within seconds: the proxy's token is recorded by its jti for the person it
was minted for (the admin acts as the owner's ServiceAccount, yet is
named), and a write is the cluster's event alone, its ProxyWrite row (still
in the gateway's audit log) left out of the timeline."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from devstack.cluster import LocalCluster
from proxy import keys
from tests.support import kubeclients
from tests.support.gatewayclient import Session, admin_session, register_and_login
from tests.support.members import join

pytestmark = pytest.mark.cluster

WAIT_SECONDS = 15.0
"""How long an event may take to be shown before the test gives up (the
webhook's batches wait at most a second in the local cluster)."""


async def timeline(person: Session, query: str | None = None) -> list[dict[str, Any]]:
    """The person's own timeline, or what `query` asks (a gateway admin's own is everyone's)."""
    answer = await person.call("GET", f"/api/v1/activity?limit=500{query or f'&user_id={person.user_id}'}")
    assert answer.status == 200, await answer.text()
    return list((await answer.json())["items"])


async def once_shown(person: Session, expected: Counter[tuple[str, str]]) -> list[dict[str, Any]]:
    """The person's cluster items once every (verb, name) of `expected` is there."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        items = await timeline(person)
        shown = Counter((i["verb"], i["name"]) for i in items if i["source"] == "cluster" and i["name"])
        if all(shown[pair] >= count for pair, count in expected.items()):
            return items
        assert time.monotonic() < deadline, f"after {WAIT_SECONDS} s, {person.email} shows {items}"
        await asyncio.sleep(0.25)


async def proxy_writes(gateway: Any, person: Session, count: int) -> list[dict[str, Any]]:
    """The details of the person's ProxyWrite rows, once the audit writer has stored `count`."""
    db = gateway.server.app[keys.DATABASE]
    deadline = time.monotonic() + WAIT_SECONDS
    while len(rows := await db.fetch("SELECT details FROM audit_logs WHERE action = 'ProxyWrite' AND user_id = $1",
                                     uuid.UUID(person.user_id))) < count:
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.1)
    return [json.loads(row["details"]) for row in rows]


async def proxied_get(person: Session, workspace: dict[str, Any], name: str) -> None:
    answer = await person.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}"
                                      f"/configmaps/{name}")
    assert answer.status == 200, await answer.text()


async def test_work_through_the_proxy_is_on_each_person_s_timeline_once(
        cluster: LocalCluster, make_gateway: Callable[..., Awaitable[Any]], database_url: str,
        tmp_path: Path) -> None:
    gateway = await make_gateway(**cluster.audit_environment())
    owner = await register_and_login(gateway)
    workspace = await owner.init()
    member = await join(gateway, uuid.UUID(workspace["id"]), "edit", owner.user_id)
    admin = await admin_session(gateway, database_url)
    proxied = kubeclients.kubeconfig_for_proxy(tmp_path, str(gateway.make_url(f"/k8s/{workspace['id']}")),
                                               member.token, workspace["namespace"], gateway.ca_file)

    # The member: kubectl through the proxy creates and deletes, a GET reads between.
    made = await asyncio.to_thread(kubeclients.kubectl, cluster, proxied, "create", "configmap", "via-proxy",
                                   "--from-literal=a=b")
    assert made.returncode == 0, made.stderr
    await proxied_get(member, workspace, "via-proxy")
    # The owner, and a gateway admin acting as the owner's account, each read it once.
    await proxied_get(owner, workspace, "via-proxy")
    await proxied_get(admin, workspace, "via-proxy")
    gone = await asyncio.to_thread(kubeclients.kubectl, cluster, proxied, "delete", "configmap", "via-proxy",
                                   "--wait=false")
    assert gone.returncode == 0, gone.stderr

    mine = await once_shown(member, Counter({("create", "via-proxy"): 1, ("get", "via-proxy"): 1,
                                             ("delete", "via-proxy"): 1}))
    clustered = [i for i in mine if i["source"] == "cluster" and i["name"] == "via-proxy"]
    assert Counter(i["verb"] for i in clustered) == Counter({"create": 1, "get": 1, "delete": 1})
    for item in clustered:
        assert (item["user_id"], item["workspace_id"], item["via"], item["credential_id"]) == (
            member.user_id, workspace["id"], "proxy", None)
        assert item["namespace"] == workspace["namespace"] and item["resource"] == "configmaps"
    by_verb = {item["verb"]: item for item in clustered}
    assert by_verb["create"]["code"] == 201 and by_verb["create"]["user_agent"].startswith("kubectl")
    # Each write once: its ProxyWrite row stays in the gateway's own audit log, as written, naming
    # the event shown...
    written = await proxy_writes(gateway, member, 2)
    assert sorted(details["method"] for details in written) == ["DELETE", "POST"]
    assert {details["audit_id"] for details in written} == {by_verb["create"]["audit_id"],
                                                             by_verb["delete"]["audit_id"]}
    # ...and is left out of the timeline.
    mine = await timeline(member)
    assert not [i for i in mine if i["source"] == "gateway" and i["action"] == "ProxyWrite"], mine

    # The owner's read is theirs, the admin's the admin's, though both went as `sa-tenant-admin`.
    for person in (owner, admin):
        items = await once_shown(person, Counter({("get", "via-proxy"): 1}))
        reads = [i for i in items if i["source"] == "cluster" and i["name"] == "via-proxy"]
        assert [(i["verb"], i["user_id"], i["via"]) for i in reads] == [("get", person.user_id, "proxy")]
    # The workspace's admin sees the whole workspace: three reads, each under its person; nothing of it unattributed.
    everyone = await timeline(owner, f"&workspace_id={workspace['id']}")
    reads = [i for i in everyone if i["source"] == "cluster" and i["verb"] == "get" and i["name"] == "via-proxy"]
    assert sorted(i["user_id"] for i in reads) == sorted([member.user_id, owner.user_id, admin.user_id])
    assert not [i for i in everyone if i["name"] == "via-proxy" and i["user_id"] is None], everyone
