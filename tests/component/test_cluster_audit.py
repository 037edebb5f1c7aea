"""The cluster's audit webhook received (proxy.server.audit_listener) and
the activity timeline (proxy.routes.activity), against a real PostgreSQL,
with real client certificates (devstack.pki) and credentials issued through
a FAKE cluster (tests/fakes/kube.py). Its tokens are not JWTs, so each
credential's jti is written as test setup, as a real issuance records it.
The cluster ring has the API server send these events itself.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import aiohttp
import pytest

from provisioning.db.pool import Database
from proxy import keys
from tests.fakes.kube import FakeCluster
from tests.support.audit_webhook import AuditPki, client_context, event, event_list, make_audit_pki, post
from tests.support.databases import stop_postgres
from tests.support.gatewayclient import Session, error_of
from tests.support.members import join, team_workspace


@pytest.fixture(scope="session")
def audit_pki(tmp_path_factory: pytest.TempPathFactory) -> AuditPki:
    return make_audit_pki(tmp_path_factory.mktemp("audit-pki"))


async def credential_with_jti(gateway: Any, person: Session, workspace_id: uuid.UUID) -> tuple[str, str]:
    """Issue a kubeconfig (FAKE cluster) and give its row a jti: (credential id, jti)."""
    answer = await person.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace_id}")
    assert answer.status == 200, await answer.text()
    listed = await (await person.call("GET", f"/api/v1/credentials?user_id={person.user_id}")).json()
    credential_id, jti = listed[0]["id"], f"jti-{uuid.uuid4()}"
    await gateway.server.app[keys.DATABASE].fetch("UPDATE credentials SET jti = $1 WHERE id = $2", jti,
                                                  uuid.UUID(credential_id))
    return credential_id, jti


async def stored(db: Database) -> list[dict[str, Any]]:
    return [dict(row) for row in await db.fetch("SELECT * FROM cluster_events ORDER BY time, id")]


async def timeline(person: Session, query: str = "") -> dict[str, Any]:
    answer = await person.call("GET", f"/api/v1/activity{query}")
    assert answer.status == 200, await answer.text()
    return dict(await answer.json())


async def test_events_are_stored_against_the_credential_s_person_and_shown_to_them(
        make_gateway: Any, audit_pki: AuditPki) -> None:
    gateway = await make_gateway(kube=FakeCluster(), **audit_pki.env())
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    member = await join(gateway, workspace_id, "edit", owner.user_id)
    owner_credential, owner_jti = await credential_with_jti(gateway, owner, workspace_id)
    member_credential, member_jti = await credential_with_jti(gateway, member, workspace_id)
    namespace = f"tenant-{owner.user_id}"
    batch = event_list(
        event(namespace=namespace, name="a", jti=owner_jti, time="2025-06-01T10:00:01Z"),
        event(verb="patch", namespace=namespace, name="b", jti=member_jti, code=200, time="2025-06-01T10:00:02Z"),
        # A token the gateway did not issue, in the tenant's namespace: kept, with no person.
        event(verb="delete", namespace=namespace, name="c", jti="minted-by-the-tenant", code=200,
              time="2025-06-01T10:00:03Z"),
        # Neither the gateway's nor in a tenant namespace: not kept.
        event(verb="get", namespace="kube-system", name="d", time="2025-06-01T10:00:04Z"),
    )
    assert await post(app[keys.AUDIT_ADDRESS], client_context(audit_pki.ca, audit_pki.client), batch) == 204

    rows = await stored(app[keys.DATABASE])
    assert [(r["name"], str(r["user_id"]) if r["user_id"] else None, str(r["credential_id"])
             if r["credential_id"] else None, r["workspace_id"]) for r in rows] == [
        ("a", owner.user_id, owner_credential, workspace_id), ("b", member.user_id, member_credential, workspace_id),
        ("c", None, None, workspace_id)]
    assert rows[0]["source_ip"].compressed == "127.0.0.1" and rows[0]["user_agent"] == "kubectl/v1.34.0 (test)"

    mine = (await timeline(member))["items"]
    clustered = [item for item in mine if item["source"] == "cluster"]
    assert [(i["verb"], i["name"], i["code"], i["credential_id"], i["resource"]) for i in clustered] == [
        ("patch", "b", 200, member_credential, "configmaps")]
    assert {item["user_id"] for item in mine} == {member.user_id}
    assert any(item["source"] == "gateway" and item["action"] == "IssueKubeconfig" for item in mine)
    # The workspace admin sees the workspace: both people, and the unattributed event.
    everyone = (await timeline(owner, f"?workspace_id={workspace_id}&limit=500"))["items"]
    assert [i["name"] for i in everyone if i["source"] == "cluster"] == ["c", "b", "a"]  # newest first
    # Their own, without the workspace: only theirs.
    assert {i["user_id"] for i in (await timeline(owner))["items"]} == {owner.user_id}
    # A member who is not an admin may not ask for another's.
    refused = await member.call("GET", f"/api/v1/activity?workspace_id={workspace_id}&user_id={owner.user_id}")
    assert await error_of(refused) == (403, "workspace_admin_required")
    used = {c["id"]: c["last_used_at"] for c in await (await owner.call(
        "GET", f"/api/v1/credentials?workspace_id={workspace_id}")).json()}
    assert used[owner_credential] is not None and used[owner_credential].startswith("2025-06-01T10:00:01")
    assert used[member_credential] is not None


async def test_posts_without_the_right_client_certificate_are_refused_in_the_handshake(
        make_gateway: Any, audit_pki: AuditPki) -> None:
    gateway = await make_gateway(kube=FakeCluster(), **audit_pki.env())
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    batch = event_list(event(namespace=f"tenant-{owner.user_id}", jti="x"))
    for pair in (None, audit_pki.stranger):
        with pytest.raises(aiohttp.ClientError):
            await post(app[keys.AUDIT_ADDRESS], client_context(audit_pki.ca, pair), batch)
    assert await stored(app[keys.DATABASE]) == []
    # The public listener takes no audit events either.
    assert (await owner.call("POST", "/audit", json=batch)).status == 404


async def test_duplicates_are_stored_once_and_bad_bodies_are_refused(make_gateway: Any, audit_pki: AuditPki) -> None:
    gateway = await make_gateway(kube=FakeCluster(), **audit_pki.env())
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    _, jti = await credential_with_jti(gateway, owner, workspace_id)
    context = client_context(audit_pki.ca, audit_pki.client)
    namespace = f"tenant-{owner.user_id}"
    first = event(namespace=namespace, name="x", jti=jti)
    started = event(namespace=namespace, name="x", jti=jti, audit_id=first["auditID"], stage="ResponseStarted")
    batch = event_list(first, first, started)
    assert await post(app[keys.AUDIT_ADDRESS], context, batch) == 204
    assert await post(app[keys.AUDIT_ADDRESS], context, batch) == 204  # a retried batch
    assert sorted(r["stage"] for r in await stored(app[keys.DATABASE])) == ["ResponseComplete", "ResponseStarted"]
    for raw in (b"not json", b"[]", json.dumps({"kind": "Event", "apiVersion": "audit.k8s.io/v1"}).encode(),
                b"\xff\xfe"):
        assert await post(app[keys.AUDIT_ADDRESS], context, None, raw=raw) == 400
    assert await post(app[keys.AUDIT_ADDRESS], context, batch, path="/other") == 404


async def test_an_audit_id_the_client_chose_hides_none_of_its_requests(
        make_gateway: Any, audit_pki: AuditPki) -> None:
    """Given a person whose kubeconfig talks straight to the API server, which
    takes a request's auditID from its `Audit-ID` header; when they send one
    request as `not-a-uuid` and two more reusing an earlier request's ID (and
    stage); then every request is stored and on their timeline, under them,
    and the API server's retry of the same batch adds nothing."""
    gateway = await make_gateway(kube=FakeCluster(), **audit_pki.env())
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    credential, jti = await credential_with_jti(gateway, owner, workspace_id)
    context = client_context(audit_pki.ca, audit_pki.client)
    namespace = f"tenant-{owner.user_id}"
    earlier = event(namespace=namespace, name="honest", jti=jti, time="2025-06-01T10:00:01.000001Z")
    batch = event_list(
        earlier,
        event(verb="delete", namespace=namespace, name="chosen", jti=jti, code=200, audit_id="not-a-uuid",
              time="2025-06-01T10:00:02Z"),
        # The earlier request's ID and stage again, on other requests: one a microsecond later, otherwise alike.
        event(verb="delete", namespace=namespace, name="reused", jti=jti, code=200, audit_id=earlier["auditID"],
              time="2025-06-01T10:00:03Z"),
        event(namespace=namespace, name="honest", jti=jti, audit_id=earlier["auditID"],
              time="2025-06-01T10:00:01.000002Z"))
    assert await post(app[keys.AUDIT_ADDRESS], context, batch) == 204
    assert await post(app[keys.AUDIT_ADDRESS], context, batch) == 204  # the API server's retry

    rows = await stored(app[keys.DATABASE])
    assert [(r["name"], r["audit_id_text"], str(r["user_id"])) for r in rows] == [
        ("honest", earlier["auditID"], owner.user_id), ("honest", earlier["auditID"], owner.user_id),
        ("chosen", "not-a-uuid", owner.user_id), ("reused", earlier["auditID"], owner.user_id)]
    shown = [(i["verb"], i["name"], i["audit_id"], i["user_id"], i["credential_id"])
             for i in (await timeline(owner, "?limit=500"))["items"] if i["source"] == "cluster"]
    assert shown == [("delete", "reused", earlier["auditID"], owner.user_id, credential),
                     ("delete", "chosen", "not-a-uuid", owner.user_id, credential),
                     ("create", "honest", earlier["auditID"], owner.user_id, credential),
                     ("create", "honest", earlier["auditID"], owner.user_id, credential)]
    # An ID far past any UUID's length is kept, cut, and its request stored all the same.
    long_id = "x" * 5000
    assert await post(app[keys.AUDIT_ADDRESS], context, event_list(
        event(namespace=namespace, name="long", jti=jti, audit_id=long_id))) == 204
    assert [r["audit_id_text"] for r in await stored(app[keys.DATABASE]) if r["name"] == "long"] == ["x" * 128]


async def test_a_long_request_s_start_gives_way_only_to_its_own_end(make_gateway: Any, audit_pki: AuditPki) -> None:
    """Given a watch that has started; when another request reuses its audit
    ID and ends, then the watch stays on the timeline; once the watch
    itself ends (received at the same time as it started), it is one item."""
    gateway = await make_gateway(kube=FakeCluster(), **audit_pki.env())
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    _, jti = await credential_with_jti(gateway, owner, workspace_id)
    context = client_context(audit_pki.ca, audit_pki.client)
    namespace = f"tenant-{owner.user_id}"
    watch = str(uuid.uuid4())
    started = event(verb="watch", namespace=namespace, jti=jti, code=200, audit_id=watch, stage="ResponseStarted",
                    time="2025-06-01T10:00:00Z")
    # Another watch, as alike as a client can make it, that began a second later and has ended.
    impostor = event(verb="watch", namespace=namespace, jti=jti, code=200, audit_id=watch,
                     time="2025-06-01T10:00:02Z", received="2025-06-01T10:00:01Z")
    assert await post(app[keys.AUDIT_ADDRESS], context, event_list(started, impostor)) == 204

    async def shown() -> list[tuple[str, str]]:
        items = (await timeline(owner, "?limit=500"))["items"]
        return [(i["verb"], i["time"][:19]) for i in items if i["audit_id"] == watch]

    assert await shown() == [("watch", "2025-06-01T10:00:02"), ("watch", "2025-06-01T10:00:00")]
    ended = event(verb="watch", namespace=namespace, jti=jti, code=200, audit_id=watch, time="2025-06-01T10:05:00Z",
                  received="2025-06-01T10:00:00Z")
    assert await post(app[keys.AUDIT_ADDRESS], context, event_list(ended)) == 204
    assert await shown() == [("watch", "2025-06-01T10:05:00"), ("watch", "2025-06-01T10:00:02")]


async def test_the_previous_release_s_rows_and_writes_go_on_working_beside_these(
        make_gateway: Any, audit_pki: AuditPki) -> None:
    """Migration 0019 only adds: during a rollout, replicas of the previous
    release go on storing events their way (a UUID `audit_id`, deduplicated
    on it and the stage); their rows, and those stored before the upgrade,
    are on the timeline with their ID, and never stop the new rows."""
    gateway = await make_gateway(kube=FakeCluster(), **audit_pki.env())
    app, db = gateway.server.app, gateway.server.app[keys.DATABASE]
    owner, workspace_id = await team_workspace(gateway)
    credential, jti = await credential_with_jti(gateway, owner, workspace_id)
    old_id = uuid.uuid4()
    for _ in range(2):  # the previous release's INSERT, as it was, and its retry
        await db.fetch(
            """INSERT INTO cluster_events (audit_id, stage, time, verb, resource, namespace, name, code, jti,
                                           credential_id, user_id, workspace_id, via)
               VALUES ($1, 'ResponseComplete', '2025-06-01T10:00:00Z', 'create', 'configmaps', $2, 'old', 201, $3,
                       $4, $5, $6, 'kubeconfig')
               ON CONFLICT (audit_id, stage) DO NOTHING""",
            old_id, f"tenant-{owner.user_id}", jti, uuid.UUID(credential), uuid.UUID(owner.user_id), workspace_id)
    same = event(namespace=f"tenant-{owner.user_id}", name="new", jti=jti, audit_id=str(old_id),
                 time="2025-06-01T10:00:01Z")
    assert await post(app[keys.AUDIT_ADDRESS], client_context(audit_pki.ca, audit_pki.client), event_list(same)) == 204
    assert [(r["name"], r["audit_id"], r["audit_id_text"]) for r in await stored(db)] == [
        ("old", old_id, None), ("new", None, str(old_id))]
    shown = [(i["name"], i["audit_id"]) for i in (await timeline(owner))["items"] if i["source"] == "cluster"]
    assert shown == [("new", str(old_id)), ("old", str(old_id))]


async def test_a_5_mb_batch_is_taken_and_a_bigger_one_is_413(make_gateway: Any, audit_pki: AuditPki) -> None:
    gateway = await make_gateway(kube=FakeCluster(), **audit_pki.env())
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    _, jti = await credential_with_jti(gateway, owner, workspace_id)
    context = client_context(audit_pki.ca, audit_pki.client)
    events = [event(namespace=f"tenant-{owner.user_id}", name=f"cm-{n}", jti=jti, padding=1500) for n in range(2600)]
    body = json.dumps(event_list(*events)).encode()
    assert 5_000_000 < len(body) < 6 * 1024 * 1024
    assert await post(app[keys.AUDIT_ADDRESS], context, None, raw=body) == 204
    assert len(await stored(app[keys.DATABASE])) == 2600
    more = json.dumps(event_list(*events, *events[:600])).encode()
    assert await post(app[keys.AUDIT_ADDRESS], context, None, raw=more) == 413


async def test_the_timeline_pages_newest_first_with_an_opaque_cursor(make_gateway: Any, audit_pki: AuditPki) -> None:
    gateway = await make_gateway(kube=FakeCluster(), **audit_pki.env())
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    _, jti = await credential_with_jti(gateway, owner, workspace_id)
    same_time = "2025-06-01T10:00:00Z"  # ties are broken by the row, never lost or repeated
    batch = event_list(*(event(namespace=f"tenant-{owner.user_id}", name=f"cm-{n}", jti=jti, time=same_time)
                         for n in range(7)))
    assert await post(app[keys.AUDIT_ADDRESS], client_context(audit_pki.ca, audit_pki.client), batch) == 204
    everything = (await timeline(owner, "?limit=500"))["items"]
    seen: list[dict[str, Any]] = []
    query = "?limit=2"
    while True:
        page = await timeline(owner, query)
        assert len(page["items"]) <= 2
        seen += page["items"]
        if page["next"] is None:
            break
        query = f"?limit=2&cursor={page['next']}"
    assert seen == everything and len(everything) >= 8  # 7 cluster events and the issuance
    times = [item["time"] for item in everything]
    assert times == sorted(times, reverse=True)
    since = (await timeline(owner, "?since=2025-06-01T10:00:00Z&limit=500"))["items"]
    assert len(since) == len(everything)
    assert (await timeline(owner, "?since=2999-01-01T00:00:00Z"))["items"] == []
    for bad in ("?cursor=nonsense", "?limit=0", "?limit=501", "?since=yesterday", "?user_id=1"):
        assert (await owner.call("GET", f"/api/v1/activity{bad}")).status == 400, bad
    gateway.session.cookie_jar.clear()  # signed out
    assert (await gateway.get("/api/v1/activity")).status == 401


async def test_the_database_down_is_503_and_the_retry_is_stored(
        make_gateway: Any, audit_pki: AuditPki, migrated_own_postgres: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster(), GATEWAY_DATABASE_URL=migrated_own_postgres.get_uri(),
                                 GATEWAY_DATABASE_TIMEOUT_SECONDS="2", **audit_pki.env())
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    _, jti = await credential_with_jti(gateway, owner, workspace_id)
    context = client_context(audit_pki.ca, audit_pki.client)
    batch = event_list(event(namespace=f"tenant-{owner.user_id}", name="during-outage", jti=jti))
    await stop_postgres(migrated_own_postgres)
    try:
        assert await post(app[keys.AUDIT_ADDRESS], context, batch) == 503
    finally:
        await asyncio.to_thread(migrated_own_postgres.ensure_postgres_running)
    # The API server retries (10 s, then longer): here, until stored.
    async with asyncio.timeout(30):
        while await post(app[keys.AUDIT_ADDRESS], context, batch) != 204:
            await asyncio.sleep(0.5)
    assert [r["name"] for r in await stored(app[keys.DATABASE])] == ["during-outage"]
