"""Spare binding Secrets (provisioning.spares): made ahead, each claimed
by one issuance only, counted among the workspace's live credentials,
swept when never claimed, and revoked as any issuance's Secret is. Against
PostgreSQL, with the FAKE cluster of tests/fakes/kube.py (it checks each
token is bound to a Secret that is there, by name and uid); the cluster
ring (tests/integration/test_revocation.py) shows the API server refusing
a revoked token bound to a spare.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from dataclasses import replace
from typing import Any

from provisioning import revocation, spares
from provisioning.db import credentials as credential_rows
from provisioning.db import repositories as repo
from proxy import keys
from tests.fakes.kube import FakeCluster
from tests.support.gatewayclient import error_of
from tests.support.members import team_workspace

ROUTE = "/api/v1/credentials"
KUBECONFIG = "/api/v1/workspaces/credentials/kubeconfig"


async def issued(owner: Any, workspace_id: uuid.UUID) -> None:
    answer = await owner.call("GET", f"{KUBECONFIG}?workspace_id={workspace_id}")
    assert answer.status == 200, await answer.text()


async def spare_rows(db: Any, workspace_id: uuid.UUID) -> list[Any]:
    return list(await db.fetch("SELECT * FROM credentials WHERE workspace_id = $1 AND user_id IS NULL "
                               "AND secret_deleted_at IS NULL", workspace_id))


async def test_after_an_issuance_the_workspace_keeps_spares_and_the_next_one_binds_to_one(make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube, GATEWAY_CREDENTIAL_SPARES="3")
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    await issued(owner, workspace_id)  # no spare yet: it made its own Secret
    await app[keys.SPARES].idle()
    made = await spare_rows(app[keys.DATABASE], workspace_id)
    assert len(made) == 3 and all(row["secret_uid"] == kube.secrets[row["secret_name"]] for row in made)
    secrets_before = set(kube.secrets)
    await issued(owner, workspace_id)
    newest = (await (await owner.call("GET", ROUTE)).json())[0]
    # Bound to a spare made before it, and it is that spare now: its id, its Secret's name.
    assert kube.bound_to[-1] == f"credential-{newest['id']}" and kube.bound_to[-1] in secrets_before
    assert uuid.UUID(newest["id"]) in {row["id"] for row in made}
    rows = await repo.query_audit(app[keys.DATABASE], workspace_id=workspace_id, action="IssueKubeconfig")
    assert rows[0]["details"]["credential"] == newest["id"]
    await app[keys.SPARES].idle()
    assert len(await spare_rows(app[keys.DATABASE], workspace_id)) == 3  # topped up again


async def test_concurrent_issuances_each_get_a_secret_of_their_own_and_revoking_one_deletes_only_it(
        make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube, GATEWAY_CREDENTIAL_SPARES="4", GATEWAY_RATE_KUBECONFIG="100/60")
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    await issued(owner, workspace_id)
    await app[keys.SPARES].idle()
    await asyncio.gather(*(issued(owner, workspace_id) for _ in range(12)))  # more than the spares
    mine = await (await owner.call("GET", ROUTE)).json()
    assert len(mine) == 13
    names = [f"credential-{c['id']}" for c in mine]
    assert sorted(kube.bound_to) == sorted(names)  # one token per Secret, none bound twice
    assert all(name in kube.secrets for name in names)
    lost = mine[5]
    assert (await owner.call("DELETE", f"{ROUTE}/{lost['id']}")).status == 204
    assert kube.unbound == [f"credential-{lost['id']}"]
    assert all(name in kube.secrets for name in names if name != f"credential-{lost['id']}")


async def test_two_issuances_racing_for_the_last_spare_never_share_it(make_gateway: Any) -> None:
    """At the database itself: many claims at once (each on its own
    connection) against three spares; each spare goes to one claimer, the
    rest begin rows of their own."""
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube, GATEWAY_CREDENTIAL_SPARES="3")
    app = gateway.server.app
    db = app[keys.DATABASE]
    owner, workspace_id = await team_workspace(gateway)
    await issued(owner, workspace_id)
    await app[keys.SPARES].idle()
    spare_ids = {row["id"] for row in await spare_rows(db, workspace_id)}
    assert len(spare_ids) == 3
    template = (await credential_rows.listed(db, user_id=None, workspace_id=workspace_id))[0]

    async def claim() -> uuid.UUID:
        wanted = replace(template, id=uuid.uuid4(), jti=None)
        begun = await credential_rows.begin(db, wanted, within=1000, claimable_seconds=spares.CLAIMABLE_SECONDS)
        assert begun is not None
        assert (begun.secret_uid is not None) == (begun.id in spare_ids)
        return begun.id

    got = await asyncio.gather(*(claim() for _ in range(10)))
    assert len(set(got)) == 10 and set(got) & spare_ids == spare_ids  # every spare claimed, each once


async def test_spares_count_among_live_credentials_and_leave_one_place_free(make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube, GATEWAY_CREDENTIAL_SPARES="8",
                                 tiers="basic: {hard: {requests.cpu: '4'}, liveCredentials: 4}\n")
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    await issued(owner, workspace_id)
    await app[keys.SPARES].idle()
    assert len(await spare_rows(app[keys.DATABASE], workspace_id)) == 2  # 1 live + 2 spares + 1 free place
    for _ in range(3):
        await issued(owner, workspace_id)
        await app[keys.SPARES].idle()
    assert await error_of(await owner.call("GET", f"{KUBECONFIG}?workspace_id={workspace_id}")) == (
        409, "too_many_credentials")
    assert len(kube.secrets) == 4 and await spare_rows(app[keys.DATABASE], workspace_id) == []


async def test_a_spare_never_claimed_is_no_longer_claimable_and_then_swept(make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube, GATEWAY_CREDENTIAL_SPARES="1")
    app = gateway.server.app
    db = app[keys.DATABASE]
    owner, workspace_id = await team_workspace(gateway)
    await issued(owner, workspace_id)
    await app[keys.SPARES].idle()
    (spare,) = await spare_rows(db, workspace_id)
    # Test setup: made longer ago than a spare is claimable, not yet as long as the sweep waits.
    await db.fetch("UPDATE credentials SET issued_at = now() - make_interval(secs => $2) WHERE id = $1",
                   spare["id"], spares.CLAIMABLE_SECONDS + 1)
    assert await revocation.sweep(db, kube) == 0
    await issued(owner, workspace_id)
    assert kube.bound_to[-1] != spare["secret_name"] and spare["secret_name"] in kube.secrets
    await db.fetch("UPDATE credentials SET issued_at = now() - make_interval(secs => $2) WHERE id = $1",
                   spare["id"], revocation.UNFINISHED_AFTER_SECONDS + 1)
    assert await revocation.sweep(db, kube) == 1
    assert kube.unbound == [spare["secret_name"]]
    assert await credential_rows.listed(db, user_id=None, workspace_id=workspace_id) != []  # issuances untouched


async def test_no_spares_when_the_setting_is_zero(make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube, GATEWAY_CREDENTIAL_SPARES="0")
    app = gateway.server.app
    owner, workspace_id = await team_workspace(gateway)
    await issued(owner, workspace_id)
    await issued(owner, workspace_id)
    await app[keys.SPARES].idle()
    assert len(kube.secrets) == 2 and await spare_rows(app[keys.DATABASE], workspace_id) == []


class FailingSecretCreates(FakeCluster):
    """FAKE: Secret creates fail after the first (an API server refusing or
    timing out mid-way; a real one cannot be made to at a chosen create)."""

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/secrets") and self.secrets:
            raise ConnectionResetError("the API server went away")
        return await super().create(path, body)


async def test_a_spare_that_cannot_be_made_leaves_nothing_claimable(make_gateway: Any) -> None:
    kube = FailingSecretCreates()
    gateway = await make_gateway(kube=kube, GATEWAY_CREDENTIAL_SPARES="2")
    app = gateway.server.app
    db = app[keys.DATABASE]
    owner, workspace_id = await team_workspace(gateway)
    await issued(owner, workspace_id)
    await app[keys.SPARES].idle()
    rows = await db.fetch("SELECT * FROM credentials WHERE workspace_id = $1 AND user_id IS NULL", workspace_id)
    # Its row was on record; nothing was made, so it is marked gone at once and never claimed.
    assert len(rows) == 1 and rows[0]["secret_uid"] is None and rows[0]["secret_deleted_at"] is not None
    assert datetime.datetime.now(datetime.timezone.utc) - rows[0]["issued_at"] < datetime.timedelta(minutes=1)


async def test_spares_are_made_only_once_the_workspace_is_quiet(make_gateway: Any) -> None:
    """A pool of this replica's own, beside the gateway's: while issuances
    keep coming (here: a quiet period longer than the test) nothing is
    made; a stop leaves nothing behind; a quiet workspace is topped up."""
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube, GATEWAY_CREDENTIAL_SPARES="0")
    db = gateway.server.app[keys.DATABASE]
    _owner, workspace_id = await team_workspace(gateway)
    workspace = await repo.get_workspace(db, workspace_id)
    assert workspace is not None
    waiting = spares.SparePool(db, 3, quiet_seconds=3600)
    waiting.after_issuance(kube, workspace, 30)
    waiting.after_issuance(kube, workspace, 30)  # one top-up per workspace, however many ask
    await asyncio.sleep(0.1)
    assert kube.secrets == {} and await spare_rows(db, workspace_id) == []
    await waiting.stop(timeout=1.0)
    await waiting.idle()
    quiet = spares.SparePool(db, 3, quiet_seconds=0)
    quiet.after_issuance(kube, workspace, 30)
    await quiet.idle()
    assert len(await spare_rows(db, workspace_id)) == 3 == len(kube.secrets)
