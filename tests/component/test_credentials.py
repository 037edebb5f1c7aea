"""Issued credentials and revoking one (proxy/routes/credentials.py,
provisioning.credentials, provisioning.revocation), against PostgreSQL,
with a FAKE cluster (tests/fakes/kube.py) that makes and deletes the
binding Secrets and checks each token is bound to one that is there. The
cluster ring shows the API server refusing a revoked token.

Members with an account are added as test setup (tests.support.members.join),
since accepting an invitation needs single sign-on.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from provisioning import revocation
from provisioning.db import repositories as repo
from proxy import keys
from tests.fakes.kube import FakeCluster
from tests.support.databases import stop_postgres
from tests.support.gatewayclient import Session, error_of
from tests.support.members import join, team_workspace

ROUTE = "/api/v1/credentials"


async def issue(session: Session, workspace_id: uuid.UUID, agent: str = "kubectl-test/1") -> None:
    answer = await session.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace_id}",
                                headers={"User-Agent": agent})
    assert answer.status == 200, await answer.text()


async def listed(session: Session, query: str = "") -> list[dict[str, Any]]:
    answer = await session.call("GET", ROUTE + query)
    assert answer.status == 200, await answer.text()
    return list(await answer.json())


async def test_each_issuance_is_bound_to_a_secret_of_its_own_and_listed_without_its_token(
        make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube)
    owner, workspace_id = await team_workspace(gateway)
    await issue(owner, workspace_id, "first/1")
    await issue(owner, workspace_id, "second/2")
    mine = await listed(owner)
    assert [c["user_agent"] for c in mine] == ["second/2", "first/1"]  # newest first
    for credential in mine:
        assert set(credential) >= {"id", "user_id", "workspace_id", "kind", "issued_at", "expires_at", "revoked_at",
                                   "ip_address", "user_agent", "last_used_at"}
        assert (credential["user_id"], credential["workspace_id"], credential["kind"], credential["revoked_at"]) == (
            owner.user_id, str(workspace_id), "kubeconfig", None)
        assert f"credential-{credential['id']}" in kube.secrets
    assert kube.bound_to == [f"credential-{c['id']}" for c in reversed(mine)]
    assert not any(token in str(mine) for token in kube.issued)
    rows = await repo.query_audit(gateway.server.app[keys.DATABASE], workspace_id=workspace_id,
                                  action="IssueKubeconfig")
    assert {r["details"]["credential"] for r in rows} == {c["id"] for c in mine}


async def test_revoking_one_deletes_its_secret_and_leaves_the_other(make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube)
    owner, workspace_id = await team_workspace(gateway)
    await issue(owner, workspace_id)
    await issue(owner, workspace_id)
    lost, kept = await listed(owner)
    assert (await owner.call("DELETE", f"{ROUTE}/{lost['id']}")).status == 204
    assert kube.unbound == [f"credential-{lost['id']}"] and f"credential-{kept['id']}" in kube.secrets
    after = {c["id"]: c["revoked_at"] for c in await listed(owner)}
    assert after[lost["id"]] is not None and after[kept["id"]] is None
    # Again: nothing left to do, and still done.
    assert (await owner.call("DELETE", f"{ROUTE}/{lost['id']}")).status == 204
    rows = await repo.query_audit(gateway.server.app[keys.DATABASE], workspace_id=workspace_id,
                                  action="RevokeCredential")
    assert [r["details"]["credential"] for r in rows] == [lost["id"]]


async def test_a_workspace_admin_sees_and_revokes_its_members_credentials_and_others_do_not(
        make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube)
    owner, workspace_id = await team_workspace(gateway)
    editor = await join(gateway, workspace_id, "edit", owner.user_id)
    viewer = await join(gateway, workspace_id, "view", owner.user_id)
    for person in (owner, editor, viewer):
        await issue(person, workspace_id)
    whole = await listed(owner, f"?workspace_id={workspace_id}")
    assert {c["user_id"] for c in whole} == {owner.user_id, editor.user_id, viewer.user_id}
    editors = await listed(owner, f"?workspace_id={workspace_id}&user_id={editor.user_id}")
    assert [c["user_id"] for c in editors] == [editor.user_id]
    # A member who is not an admin sees their own, however they ask.
    assert {c["user_id"] for c in await listed(viewer, f"?workspace_id={workspace_id}")} == {viewer.user_id}
    answer = await viewer.call("GET", f"{ROUTE}?workspace_id={workspace_id}&user_id={editor.user_id}")
    assert await error_of(answer) == (403, "workspace_admin_required")
    # ...and cannot revoke another's: it is not theirs to see.
    assert await error_of(await viewer.call("DELETE", f"{ROUTE}/{editors[0]['id']}")) == (404, "not_found")
    assert await error_of(await viewer.call("DELETE", f"{ROUTE}/{uuid.uuid4()}")) == (404, "not_found")
    assert (await owner.call("DELETE", f"{ROUTE}/{editors[0]['id']}")).status == 204
    assert kube.unbound == [f"credential-{editors[0]['id']}"]


async def test_removing_a_member_revokes_each_of_their_credentials(make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube)
    owner, workspace_id = await team_workspace(gateway)
    editor = await join(gateway, workspace_id, "edit", owner.user_id)
    await issue(editor, workspace_id)
    await issue(editor, workspace_id)
    answer = await owner.call("DELETE", f"/api/v1/workspaces/{workspace_id}/members/{editor.user_id}")
    assert answer.status == 204, await answer.text()
    theirs = await listed(owner, f"?workspace_id={workspace_id}&user_id={editor.user_id}")
    assert len(theirs) == 2 and all(c["revoked_at"] is not None for c in theirs)
    assert sorted(kube.unbound) == sorted(f"credential-{c['id']}" for c in theirs)


async def test_a_workspace_holds_as_many_live_credentials_as_its_tier_allows(make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube, tiers="basic: {hard: {requests.cpu: '4'}, liveCredentials: 2}\n")
    owner, workspace_id = await team_workspace(gateway)
    await issue(owner, workspace_id)
    await issue(owner, workspace_id)
    answer = await owner.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace_id}")
    assert await error_of(answer) == (409, "too_many_credentials")
    assert len(kube.secrets) == 2
    first = (await listed(owner))[-1]
    assert (await owner.call("DELETE", f"{ROUTE}/{first['id']}")).status == 204
    await issue(owner, workspace_id)


async def test_the_secrets_of_expired_credentials_are_swept(make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube)
    owner, workspace_id = await team_workspace(gateway)
    await issue(owner, workspace_id)
    await issue(owner, workspace_id)
    old, new = (await listed(owner))[::-1]
    db = gateway.server.app[keys.DATABASE]
    # Test setup: the first one's two hours are over.
    await db.fetch("UPDATE credentials SET expires_at = now() - interval '1 minute' WHERE id = $1",
                   uuid.UUID(old["id"]))
    assert await revocation.sweep(db, kube) == 1
    assert kube.unbound == [f"credential-{old['id']}"] and f"credential-{new['id']}" in kube.secrets
    assert await revocation.sweep(db, kube) == 0


class HeldTokenRequests(FakeCluster):
    """FAKE: bound TokenRequests wait until released, so the database can
    go down while several issuances are between their Secret and their
    audit row (a real API server answers too fast to aim at that moment)."""

    def __init__(self, held: int) -> None:
        super().__init__()
        self.held, self.arrived, self.release = held, asyncio.Event(), asyncio.Event()

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/token") and (body.get("spec") or {}).get("boundObjectRef"):
            self.held -= 1
            if self.held == 0:
                self.arrived.set()
            await self.release.wait()
        return await super().create(path, body)


async def test_the_database_down_mid_issuance_is_503_for_every_caller_and_no_token_leaves(
        make_gateway: Any, migrated_own_postgres: Any) -> None:
    kube = HeldTokenRequests(4)
    gateway = await make_gateway(kube=kube, GATEWAY_DATABASE_URL=migrated_own_postgres.get_uri(),
                                 GATEWAY_DATABASE_TIMEOUT_SECONDS="2")
    owner, workspace_id = await team_workspace(gateway)
    calls = [asyncio.create_task(owner.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace_id}"))
             for _ in range(4)]
    async with asyncio.timeout(20):
        await kube.arrived.wait()
    assert len(kube.secrets) == 4
    await stop_postgres(migrated_own_postgres)
    try:
        kube.release.set()  # four tokens minted, none of their audit rows can be written
        answers = await asyncio.gather(*calls)
        assert [await error_of(answer) for answer in answers] == [(503, "database_unavailable")] * 4
        assert len(kube.issued) == 4 and kube.secrets == {}  # each token died with its Secret
    finally:
        await asyncio.to_thread(migrated_own_postgres.ensure_postgres_running)


async def test_a_suspension_committed_while_the_token_is_minted_wins_and_no_token_leaves(make_gateway: Any) -> None:
    kube = HeldTokenRequests(1)
    gateway = await make_gateway(kube=kube)
    db = gateway.server.app[keys.DATABASE]
    owner, workspace_id = await team_workspace(gateway)
    call = asyncio.create_task(owner.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace_id}"))
    async with asyncio.timeout(20):
        await kube.arrived.wait()
    # As a suspension's own commit would land (provisioning.suspension): the row first.
    await db.fetchrow("UPDATE workspaces SET status = 'suspended' WHERE id = $1", workspace_id)
    kube.release.set()
    assert await error_of(await call) == (403, "workspace_suspended")
    assert len(kube.issued) == 1 and kube.secrets == {}  # minted, never handed out, its Secret gone
    assert await listed(owner) == []
    assert await repo.query_audit(db, workspace_id=workspace_id, action="IssueKubeconfig") == []
