"""Requests made through the gateway's proxy, joined to their person in the
cluster's audit (provisioning.db.proxy_tokens, provisioning.db.cluster_events)
and shown once on the activity timeline (provisioning.db.activity), against
a real PostgreSQL. The proxy's tokens come from a FAKE token issuer that
shapes them as the API server's JWTs (tests/fakes/kube.py, `with_jti`), and
its requests go to a FAKE API server that records what it is sent: the
component ring has no cluster. The audit events are posted as the API
server's webhook posts them (tests/support/audit_webhook.py); the cluster
ring has the real API server send them (tests/integration/test_proxied_activity.py).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import uuid
from typing import Any

import pytest
from aiohttp import web

from provisioning.cluster_audit import RetentionSweeper
from provisioning.db import proxy_tokens as proxy_token_rows
from provisioning.db.pool import Database
from provisioning.db.proxy_tokens import ProxyToken
from provisioning.errors import NotFound
from provisioning.kube.tokens import credential_id
from proxy import keys
from proxy.passthrough.token_cache import TokenKey
from proxy.passthrough.token_minting import mint
from tests.fakes.apiserver import FakeAPIServer, RecordingAPIServer
from tests.fakes.kube import FakeTokenIssuer
from tests.support.audit_webhook import AuditPki, client_context, event, event_list, make_audit_pki, post
from tests.support.gatewayclient import Session, provisioned_workspace

HOUR = datetime.timedelta(hours=1)


@pytest.fixture(scope="session")
def audit_pki(tmp_path_factory: pytest.TempPathFactory) -> AuditPki:
    return make_audit_pki(tmp_path_factory.mktemp("audit-pki"))


def jti_of(token: str) -> str:
    found = credential_id(token)
    assert found is not None
    return found


async def timeline(person: Session, query: str = "") -> list[dict[str, Any]]:
    answer = await person.call("GET", f"/api/v1/activity?limit=500{query}")
    assert answer.status == 200, await answer.text()
    return list((await answer.json())["items"])


async def proxy_writes(db: Database, count: int) -> list[dict[str, Any]]:
    """The details of the ProxyWrite rows, once the audit writer has stored `count` of them."""
    async with asyncio.timeout(10):
        while len(rows := await db.fetch("SELECT details FROM audit_logs WHERE action = 'ProxyWrite'")) < count:
            await asyncio.sleep(0.05)
    return [json.loads(row["details"]) for row in rows]


async def send_events(gateway: Any, audit_pki: AuditPki, *events: dict[str, Any]) -> None:
    status = await post(gateway.server.app[keys.AUDIT_ADDRESS], client_context(audit_pki.ca, audit_pki.client),
                        event_list(*events))
    assert status == 204


async def test_a_proxy_token_is_recorded_for_its_person_and_their_requests_are_theirs_once(
        make_gateway: Any, api_server: RecordingAPIServer, audit_pki: AuditPki) -> None:
    seen, upstream = api_server
    issuer = FakeTokenIssuer(with_jti=True)
    gateway = await make_gateway(kube=issuer, upstream=upstream, **audit_pki.env())
    db = gateway.server.app[keys.DATABASE]
    person, path = await provisioned_workspace(gateway)
    namespace = f"tenant-{person.user_id}"

    # A read and a write through the proxy, with the one token the cache minted.
    assert (await person.call("GET", path)).status == 200
    assert (await person.call("POST", path, json={"metadata": {"name": "made"}})).status == 200
    assert len(issuer.issued) == 1
    jti = jti_of(issuer.issued[0])
    recorded = [dict(r) for r in await db.fetch("SELECT * FROM proxy_tokens")]
    assert [(r["jti"], str(r["user_id"]), r["service_account"], r["cluster"]) for r in recorded] == [
        (jti, person.user_id, "sa-tenant-admin", "default")]
    workspace_id = recorded[0]["workspace_id"]
    # The read goes unnamed (the API server names it); the write names its event, and its row says which.
    assert "Audit-Id" not in seen[0]
    audit_id = seen[1]["Audit-Id"]
    assert str(uuid.UUID(audit_id)) == audit_id
    assert [details["audit_id"] for details in await proxy_writes(db, 1)] == [audit_id]

    # Before the cluster's event arrives, the gateway's row stands for the write.
    written = [i for i in await timeline(person) if i["action"] == "ProxyWrite"]
    assert [(i["source"], i["via"], i["audit_id"]) for i in written] == [("gateway", "proxy", audit_id)]

    await send_events(gateway, audit_pki,
                      event(verb="list", namespace=namespace, jti=jti, code=200, time="2025-06-01T10:00:01Z"),
                      event(verb="create", namespace=namespace, name="made", jti=jti, audit_id=audit_id,
                            time="2025-06-01T10:00:02Z"))
    events = [dict(r) for r in await db.fetch("SELECT * FROM cluster_events ORDER BY time")]
    assert [(r["verb"], str(r["user_id"]), r["workspace_id"], r["credential_id"], r["via"]) for r in events] == [
        ("list", person.user_id, workspace_id, None, "proxy"), ("create", person.user_id, workspace_id, None, "proxy")]

    # Then each request is on the person's timeline once, as the cluster's event.
    items = await timeline(person)
    assert not [i for i in items if i["action"] == "ProxyWrite"], items
    clustered = [(i["verb"], i["name"], i["via"], i["user_id"], i["audit_id"])
                 for i in items if i["source"] == "cluster"]
    assert clustered == [("create", "made", "proxy", person.user_id, audit_id),
                         ("list", None, "proxy", person.user_id, events[0]["audit_id_text"])]
    # The gateway's own record is as it was written.
    assert len(await db.fetch("SELECT 1 FROM audit_logs WHERE action = 'ProxyWrite'")) == 1
    # Other rows of the gateway's are `via` gateway.
    assert {i["via"] for i in items if i["source"] == "gateway"} == {"gateway"}


async def test_a_write_sent_again_with_a_fresh_token_names_a_new_event(
        make_gateway: Any, fake_api_server: FakeAPIServer, audit_pki: AuditPki) -> None:
    """A FAKE API server refuses the first token (401), as a real one does a
    token of a replaced account: the body-less write goes again, as another
    request, so with another audit id, and its row names the one that counted."""
    sent: list[tuple[str, str]] = []

    async def refuse_the_first(request: web.Request) -> web.Response:
        sent.append((request.headers["Authorization"], request.headers["Audit-Id"]))
        return web.json_response({}, status=401 if len(sent) == 1 else 200)

    _server, upstream = await fake_api_server(refuse_the_first)
    gateway = await make_gateway(kube=FakeTokenIssuer(with_jti=True), upstream=upstream, **audit_pki.env())
    db = gateway.server.app[keys.DATABASE]
    person, path = await provisioned_workspace(gateway)
    assert (await person.call("DELETE", f"{path}/gone")).status == 200
    assert len(sent) == 2 and sent[0][0] != sent[1][0] and sent[0][1] != sent[1][1]
    assert [(details["audit_id"], details["status"]) for details in await proxy_writes(db, 1)] == [(sent[1][1], 200)]
    # Both tokens are the person's.
    assert {str(r["user_id"]) for r in await db.fetch("SELECT user_id FROM proxy_tokens")} == {person.user_id}
    assert len(await db.fetch("SELECT 1 FROM proxy_tokens")) == 2


async def test_a_gateway_row_gives_way_only_to_its_own_event_of_the_same_person(
        make_gateway: Any, api_server: RecordingAPIServer, audit_pki: AuditPki) -> None:
    """An event with the row's audit id that is not the person's (a token the
    gateway did not issue), or is theirs but not through the proxy (an
    `Audit-ID` chosen by their kubeconfig's client), leaves the row on their
    timeline: an action is shown once, never not at all. A long request's two
    stages are one item."""
    seen, upstream = api_server
    issuer = FakeTokenIssuer(with_jti=True)
    gateway = await make_gateway(kube=issuer, upstream=upstream, **audit_pki.env())
    person, path = await provisioned_workspace(gateway)
    namespace = f"tenant-{person.user_id}"
    assert (await person.call("POST", path, json={})).status == 200
    audit_id = seen[0]["Audit-Id"]
    await proxy_writes(gateway.server.app[keys.DATABASE], 1)
    await send_events(gateway, audit_pki, event(namespace=namespace, name="x", jti="minted-elsewhere",
                                                audit_id=audit_id))
    items = await timeline(person)
    assert [i["audit_id"] for i in items if i["action"] == "ProxyWrite"] == [audit_id]
    # Nor does the person's own event sent straight at the API server with the row's ID as its `Audit-ID`
    # (which the API server takes as given): only the proxy's token, which no client holds, names the row's event.
    workspace_id = path.split("/")[2]
    issued = await person.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace_id}")
    assert issued.status == 200, await issued.text()
    [kubeconfig_jti] = [r["jti"] for r in await gateway.server.app[keys.DATABASE].fetch(
        "SELECT jti FROM credentials WHERE user_id = $1 AND kind = 'kubeconfig'", uuid.UUID(person.user_id))]
    await send_events(gateway, audit_pki, event(verb="delete", namespace=namespace, name="y", jti=kubeconfig_jti,
                                                audit_id=audit_id, code=200))
    items = await timeline(person)
    assert [i["audit_id"] for i in items if i["action"] == "ProxyWrite"] == [audit_id]
    assert [(i["via"], i["name"]) for i in items if i["source"] == "cluster"] == [("kubeconfig", "y")]

    watch = str(uuid.uuid4())
    jti = jti_of(issuer.issued[0])
    await send_events(gateway, audit_pki, event(verb="watch", namespace=namespace, jti=jti, audit_id=watch,
                                                stage="ResponseStarted", code=200, time="2025-06-01T10:00:00Z"))
    started = [i for i in await timeline(person) if i["audit_id"] == watch]
    assert [(i["verb"], i["time"][:19]) for i in started] == [("watch", "2025-06-01T10:00:00")]
    await send_events(gateway, audit_pki, event(verb="watch", namespace=namespace, jti=jti, audit_id=watch,
                                                stage="ResponseComplete", code=200, time="2025-06-01T10:05:00Z",
                                                received="2025-06-01T10:00:00Z"))
    ended = [i for i in await timeline(person) if i["audit_id"] == watch]
    assert [(i["verb"], i["time"][:19]) for i in ended] == [("watch", "2025-06-01T10:05:00")]


async def test_minting_records_before_handing_out_and_refuses_a_token_it_cannot_record(
        make_gateway: Any, audit_pki: AuditPki) -> None:
    gateway = await make_gateway(kube=FakeTokenIssuer(), **audit_pki.env())
    db: Database = gateway.server.app[keys.DATABASE]
    person, _ = await provisioned_workspace(gateway)
    namespace = f"tenant-{person.user_id}"
    key = TokenKey(namespace, "sa-tenant-admin", "uid-1", uuid.UUID(person.user_id).int)
    issuer = FakeTokenIssuer(with_jti=True)
    issued = await mint(issuer, key, 3600, db)
    row = await db.fetchrow("SELECT * FROM proxy_tokens WHERE jti = $1", issued.credential_id)
    assert row is not None and row["expires_at"] == issued.expires_at
    # Not recorded where no audit is received (None), nor a token without a jti.
    await mint(issuer, key, 3600, None)
    await mint(FakeTokenIssuer(), key, 3600, db)
    assert len(await db.fetch("SELECT 1 FROM proxy_tokens")) == 1
    # A workspace that is gone: the token is not handed out.
    with pytest.raises(NotFound):
        await mint(issuer, key._replace(namespace="tenant-gone"), 3600, db)


async def test_proxy_tokens_are_swept_a_retention_after_they_expired(make_gateway: Any, audit_pki: AuditPki) -> None:
    gateway = await make_gateway(kube=FakeTokenIssuer(), **audit_pki.env())
    db: Database = gateway.server.app[keys.DATABASE]
    person, _ = await provisioned_workspace(gateway)
    now = datetime.datetime.now(datetime.timezone.utc)
    for jti, expired in (("old", now - datetime.timedelta(days=31)), ("recent", now - datetime.timedelta(days=29)),
                         ("live", now + HOUR)):
        assert await proxy_token_rows.record(db, ProxyToken(jti, "default", uuid.UUID(person.user_id),
                                                            f"tenant-{person.user_id}", "sa-tenant-admin", expired))
    assert await RetentionSweeper(db, 30).sweep_once(batch=1) == 1
    assert sorted(r["jti"] for r in await db.fetch("SELECT jti FROM proxy_tokens")) == ["live", "recent"]
