"""A workspace's members through its routes (proxy/routes/members.py),
against PostgreSQL, with a FAKE cluster (tests/fakes/kube.py FakeCluster)
where a member's ServiceAccount and RoleBinding are made and deleted: the
cluster ring checks that the API server enforces them.

Members with an account are added as test setup (tests.support.members.join:
the row an accepted invitation makes), since accepting needs single sign-on.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import yaml

from devstack.processes import free_port
from provisioning.db import repositories as repo
from proxy import keys
from tests.fakes.apiserver import FakeAPIServer
from tests.fakes.kube import FakeCluster
from tests.support.express import recording_api_server
from tests.support.gatewayclient import (Session, admin_session, error_of, k8s_error, register_and_login,
                                         unique_email)
from tests.support.lanes import BOTH_LANES
from tests.support.members import join, team_workspace

PROVIDERS = [{"name": name, "issuer": f"https://127.0.0.1:{free_port()}/realms/{name}", "client_id": "gateway",
              "client_secret": "s"} for name in ("org-a", "org-b")]
"""Two identity providers, never reached: a group binding only names one."""


def members_path(workspace_id: uuid.UUID) -> str:
    return f"/api/v1/workspaces/{workspace_id}/members"


async def roster(session: Session, workspace_id: uuid.UUID) -> dict[str, Any]:
    answer = await session.call("GET", members_path(workspace_id))
    assert answer.status == 200, await answer.text()
    return dict(await answer.json())


def roles_of(body: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """email -> (role, status)"""
    return {m["email"]: (m["role"], m["status"]) for m in body["members"]}


async def audited(gateway: Any, workspace_id: uuid.UUID, action: str) -> list[dict[str, Any]]:
    """The workspace's audit rows of `action`, newest first."""
    return list(await repo.query_audit(gateway.server.app[keys.DATABASE], workspace_id=workspace_id, action=action))


async def test_every_member_sees_the_roster_and_a_stranger_is_told_no_such_workspace(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster())
    owner, workspace_id = await team_workspace(gateway)
    editor = await join(gateway, workspace_id, "edit", owner.user_id)
    viewer = await join(gateway, workspace_id, "view", owner.user_id)
    for someone in (owner, editor, viewer):
        body = await roster(someone, workspace_id)
        assert set(body) == {"members", "groups"} and body["groups"] == []
        assert roles_of(body) == {owner.email: ("admin", "active"), editor.email: ("edit", "active"),
                                  viewer.email: ("view", "active")}
        for member in body["members"]:
            assert {"user_id", "email", "role", "added_by", "added_at", "status"} <= set(member)
            assert member["added_by"] == owner.user_id
    stranger = await register_and_login(gateway)
    for path in (members_path(workspace_id), f"/api/v1/workspaces/{workspace_id}",
                 members_path(uuid.uuid4())):
        assert await error_of(await stranger.call("GET", path)) == (404, "not_found")


async def test_an_invitation_answers_the_same_whether_or_not_the_email_has_an_account(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster())
    owner, workspace_id = await team_workspace(gateway)
    known = (await register_and_login(gateway)).email
    unknown = unique_email()
    answers = []
    for email in (known, unknown):
        answer = await owner.call("POST", members_path(workspace_id), json={"email": email, "role": "edit"})
        assert answer.status == 201, await answer.text()
        answers.append(await answer.json())
    assert answers == [{"email": known, "role": "edit", "provider": None, "status": "invited"},
                       {"email": unknown, "role": "edit", "provider": None, "status": "invited"}]
    # Neither is a member before signing in through a provider that verified the email.
    listed = roles_of(await roster(owner, workspace_id))
    assert listed[known] == listed[unknown] == ("edit", "invited")
    rows = await audited(gateway, workspace_id, "AddMember")
    assert sorted(r["details"]["email"] for r in rows) == sorted((known, unknown))
    assert all(r["user_id"] == owner.user_id and r["details"]["status"] == "invited" for r in rows)


async def test_inviting_a_member_or_an_invited_email_again_is_409(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster())
    owner, workspace_id = await team_workspace(gateway)
    editor = await join(gateway, workspace_id, "edit", owner.user_id)
    email = unique_email()
    assert (await owner.call("POST", members_path(workspace_id), json={"email": email, "role": "view"})).status == 201
    for again in (email, email.upper(), owner.email, editor.email):
        answer = await owner.call("POST", members_path(workspace_id), json={"email": again, "role": "admin"})
        assert await error_of(answer) == (409, "already_member"), again
    assert roles_of(await roster(owner, workspace_id))[email] == ("view", "invited")


async def test_a_bad_addition_is_400_and_adds_nothing(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster(), oidc_providers=PROVIDERS)
    owner, workspace_id = await team_workspace(gateway)
    path = members_path(workspace_id)
    for body, code in (
        ({"email": unique_email(), "role": "owner"}, "unknown_role"),
        ({"email": unique_email(), "role": "Admin"}, "unknown_role"),
        ({"email": unique_email(), "role": 2}, "unknown_role"),
        ({"email": unique_email()}, "unknown_role"),
        ({"email": unique_email(), "role": "view", "provider": "org-c"}, "unknown_provider"),
        ({"email": unique_email(), "role": "view", "provider": 7}, "unknown_provider"),
        ({"email": "not an email", "role": "view"}, "invalid_email"),
        ({"email": "nobody@", "role": "view"}, "invalid_email"),
        ({"email": 5, "role": "view"}, "invalid_email"),
        ({"email": unique_email(), "group": "devs", "provider": "org-a", "role": "view"}, "invalid_member"),
        ({"role": "view"}, "invalid_member"),
        ({"group": "devs", "provider": "org-c", "role": "view"}, "unknown_provider"),
        ({"group": "devs", "role": "view"}, "unknown_provider"),
        ({"group": "", "provider": "org-a", "role": "view"}, "invalid_member"),
        ({"group": "devs", "provider": "org-a", "role": "superuser"}, "unknown_role"),
    ):
        assert await error_of(await owner.call("POST", path, json=body)) == (400, code), body
    listed = await roster(owner, workspace_id)
    assert len(listed["members"]) == 1 and listed["groups"] == []
    assert await audited(gateway, workspace_id, "AddMember") == []


async def test_a_group_of_a_provider_is_bound_once(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster(), oidc_providers=PROVIDERS)
    owner, workspace_id = await team_workspace(gateway)
    path = members_path(workspace_id)
    answer = await owner.call("POST", path, json={"group": "devs", "provider": "org-a", "role": "edit"})
    assert answer.status == 201, await answer.text()
    bound = await answer.json()
    assert {k: bound[k] for k in ("group", "provider", "role", "added_by")} == {
        "group": "devs", "provider": "org-a", "role": "edit", "added_by": owner.user_id}
    again = await owner.call("POST", path, json={"group": "devs", "provider": "org-a", "role": "view"})
    assert await error_of(again) == (409, "already_member")
    # The same name at another provider is another group.
    other = await owner.call("POST", path, json={"group": "devs", "provider": "org-b", "role": "view"})
    assert other.status == 201, await other.text()
    groups = (await roster(owner, workspace_id))["groups"]
    assert sorted((g["provider"], g["group"], g["role"]) for g in groups) == [("org-a", "devs", "edit"),
                                                                              ("org-b", "devs", "view")]
    assert {r["details"].get("provider") for r in await audited(gateway, workspace_id, "AddMember")} == {
        "org-a", "org-b"}
    gone = await owner.call("DELETE", f"/api/v1/workspaces/{workspace_id}/groups/org-b/devs")
    assert gone.status == 204
    assert [g["provider"] for g in (await roster(owner, workspace_id))["groups"]] == ["org-a"]
    missing = await owner.call("DELETE", f"/api/v1/workspaces/{workspace_id}/groups/org-b/devs")
    assert await error_of(missing) == (404, "not_found")


async def test_edit_and_view_members_may_not_manage_members(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster(), oidc_providers=PROVIDERS)
    owner, workspace_id = await team_workspace(gateway)
    editor = await join(gateway, workspace_id, "edit", owner.user_id)
    viewer = await join(gateway, workspace_id, "view", owner.user_id)
    path = members_path(workspace_id)
    invited = unique_email()
    assert (await owner.call("POST", path, json={"email": invited, "role": "view"})).status == 201
    for someone, other in ((editor, viewer), (viewer, editor)):
        for method, target, body in (
            ("POST", path, {"email": unique_email(), "role": "view"}),
            ("POST", path, {"group": "devs", "provider": "org-a", "role": "admin"}),
            ("PATCH", f"{path}/{other.user_id}", {"role": "admin"}),
            ("PATCH", f"{path}/{someone.user_id}", {"role": "admin"}),  # nor raise themselves
            ("DELETE", f"{path}/{other.user_id}", None),
            ("DELETE", f"{path}/{owner.user_id}", None),
            ("DELETE", f"/api/v1/workspaces/{workspace_id}/invitations/{invited}", None),
        ):
            answer = await someone.call(method, target, json=body)
            assert await error_of(answer) == (403, "workspace_admin_required"), (method, target)
    assert roles_of(await roster(owner, workspace_id)) == {
        owner.email: ("admin", "active"), editor.email: ("edit", "active"), viewer.email: ("view", "active"),
        invited: ("view", "invited")}


async def test_a_workspace_admin_and_a_gateway_admin_manage_members(make_gateway: Any, database_url: str) -> None:
    gateway = await make_gateway(kube=FakeCluster())
    owner, workspace_id = await team_workspace(gateway)
    second = await join(gateway, workspace_id, "admin", owner.user_id)
    root = await admin_session(gateway, database_url)  # not a member
    for manager in (second, root):
        email = unique_email()
        answer = await manager.call("POST", members_path(workspace_id), json={"email": email, "role": "view"})
        assert answer.status == 201, await answer.text()
        assert roles_of(await roster(manager, workspace_id))[email] == ("view", "invited")


async def test_a_role_changes_and_the_owner_stays_an_admin(make_gateway: Any) -> None:
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube)
    owner, workspace_id = await team_workspace(gateway)
    member = await join(gateway, workspace_id, "edit", owner.user_id)
    path = f"{members_path(workspace_id)}/{member.user_id}"
    changed = await owner.call("PATCH", path, json={"role": "view"})
    assert changed.status == 200, await changed.text()
    assert (await changed.json())["role"] == "view"
    assert roles_of(await roster(member, workspace_id))[member.email] == ("view", "active")
    (row,) = await audited(gateway, workspace_id, "ChangeRole")
    assert row["user_id"] == owner.user_id
    assert row["details"] == {"member": member.user_id, "from": "edit", "to": "view"}
    assert kube.objects == {}  # no account made yet: nothing to rebind
    for role in ("edit", "view"):
        demoted = await owner.call("PATCH", f"{members_path(workspace_id)}/{owner.user_id}", json={"role": role})
        assert await error_of(demoted) == (409, "owner_stays_admin")
    assert await error_of(await owner.call("PATCH", path, json={"role": "root"})) == (400, "unknown_role")
    nobody = f"{members_path(workspace_id)}/{uuid.uuid4()}"
    assert await error_of(await owner.call("PATCH", nobody, json={"role": "view"})) == (404, "not_found")
    assert len(await audited(gateway, workspace_id, "ChangeRole")) == 1


async def test_a_removed_member_is_told_no_such_workspace(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster())
    owner, workspace_id = await team_workspace(gateway)
    member = await join(gateway, workspace_id, "admin", owner.user_id)
    assert (await member.call("GET", f"/api/v1/workspaces/{workspace_id}")).status == 200
    removed = await owner.call("DELETE", f"{members_path(workspace_id)}/{member.user_id}")
    assert removed.status == 204, await removed.text()
    for path in (members_path(workspace_id), f"/api/v1/workspaces/{workspace_id}"):
        assert await error_of(await member.call("GET", path)) == (404, "not_found")
    assert [w["id"] for w in await (await member.call("GET", "/api/v1/workspaces")).json()] == []
    (row,) = await audited(gateway, workspace_id, "RemoveMember")
    assert row["user_id"] == owner.user_id
    assert row["details"]["member"] == member.user_id and row["details"]["why"] == "removed"
    again = await owner.call("DELETE", f"{members_path(workspace_id)}/{member.user_id}")
    assert await error_of(again) == (404, "not_found")
    owner_gone = await owner.call("DELETE", f"{members_path(workspace_id)}/{owner.user_id}")
    assert await error_of(owner_gone) == (409, "owner_stays_admin")


async def test_any_member_may_leave(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster())
    owner, workspace_id = await team_workspace(gateway)
    viewer = await join(gateway, workspace_id, "view", owner.user_id)
    left = await viewer.call("DELETE", f"{members_path(workspace_id)}/{viewer.user_id}")
    assert left.status == 204, await left.text()
    assert await error_of(await viewer.call("GET", members_path(workspace_id))) == (404, "not_found")
    (row,) = await audited(gateway, workspace_id, "RemoveMember")
    assert row["user_id"] == viewer.user_id and row["details"]["why"] == "left"
    assert roles_of(await roster(owner, workspace_id)) == {owner.email: ("admin", "active")}


async def test_listings_name_every_workspace_of_the_caller_with_their_role(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster())
    owner, workspace_id = await team_workspace(gateway)
    other_owner, other_id = await team_workspace(gateway)
    member, _ = await team_workspace(gateway)  # owns one, and is a member of two more
    await join(gateway, workspace_id, "edit", owner.user_id, member)
    await join(gateway, other_id, "view", other_owner.user_id, member)
    listed = await (await member.call("GET", "/api/v1/workspaces")).json()
    me = await (await member.call("GET", "/api/v1/me")).json()
    for found in (listed, me["workspaces"]):
        roles = {w["id"]: w["role"] for w in found}
        assert len(roles) == 3 and roles[str(workspace_id)] == "edit" and roles[str(other_id)] == "view"
        assert sorted(roles.values()) == ["admin", "edit", "view"]
        # Each is the workspace's own answer: its owner is its owner, not the caller.
        assert {w["id"]: w["user_id"] for w in found}[str(workspace_id)] == owner.user_id
        assert {w["id"]: w["user_id"] for w in found}[str(other_id)] == other_owner.user_id
    owners = await (await owner.call("GET", "/api/v1/workspaces")).json()
    assert [(w["id"], w["role"]) for w in owners] == [(str(workspace_id), "admin")]
    shown = await (await member.call("GET", f"/api/v1/workspaces/{workspace_id}")).json()
    assert shown["role"] == "edit" and shown["user_id"] == owner.user_id


async def test_a_members_credential_is_their_own_account_bound_to_their_role(make_gateway: Any) -> None:
    """Made at their first credential; a role change rebinds it; removal deletes both."""
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube)
    owner, workspace_id = await team_workspace(gateway)
    member = await join(gateway, workspace_id, "edit", owner.user_id)
    namespace = f"tenant-{owner.user_id}"
    account = f"member-{member.user_id}"
    assert kube.objects == {}
    kubeconfig = yaml.safe_load(await member.kubeconfig(str(workspace_id)))
    assert kubeconfig["users"][0]["name"] == account
    assert kube.token_accounts == [account]
    assert kube.names(namespace, "serviceaccounts") == {account}
    binding = await kube.get(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{account}")
    assert binding["roleRef"]["name"] == "tenant-edit"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    token = await (await member.call("GET", f"/api/v1/workspaces/credentials/token?workspace_id={workspace_id}")).json()
    assert (token["service_account"], token["role"]) == (account, "edit")
    assert kube.token_accounts == [account, account]
    (issued, _) = await audited(gateway, workspace_id, "IssueKubeconfig")
    assert issued["user_id"] == member.user_id and issued["details"]["service_account"] == account

    changed = await owner.call("PATCH", f"{members_path(workspace_id)}/{member.user_id}", json={"role": "view"})
    assert changed.status == 200, await changed.text()
    binding = await kube.get(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{account}")
    assert binding["roleRef"]["name"] == "tenant-view"

    removed = await owner.call("DELETE", f"{members_path(workspace_id)}/{member.user_id}")
    assert removed.status == 204, await removed.text()
    assert kube.names(namespace, "serviceaccounts") == set() and kube.names(namespace, "rolebindings") == set()
    refused = await member.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace_id}")
    assert await error_of(refused) == (404, "not_found")

    # The owner's credential is still the workspace's own account.
    assert yaml.safe_load(await owner.kubeconfig())["users"][0]["name"] == "sa-tenant-admin"


async def test_suspending_a_member_deletes_their_account_and_only_theirs(make_gateway: Any, database_url: str) -> None:
    """Their downloaded kubeconfigs stop authenticating; the workspace's own
    account (the owner's) is untouched; resumed, they are given a new one
    at their next credential."""
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube)
    owner, workspace_id = await team_workspace(gateway)
    member = await join(gateway, workspace_id, "edit", owner.user_id)
    namespace, account = f"tenant-{owner.user_id}", f"member-{member.user_id}"
    await member.kubeconfig(str(workspace_id))
    assert kube.names(namespace, "serviceaccounts") == {account}
    root = await admin_session(gateway, database_url)
    suspended = await root.call("POST", f"/api/v1/users/{member.user_id}/suspend")
    assert suspended.status == 200, await suspended.text()
    assert kube.objects == {}
    db = gateway.server.app[keys.DATABASE]
    workspace = await repo.get_workspace(db, workspace_id)
    assert workspace is not None and workspace.service_account_uid == "uid-1"  # the owner's account stays
    (row,) = [r for r in await audited(gateway, workspace_id, "SuspendUser")]
    assert row["details"]["service_account"] == account and row["details"]["target_user"] == member.user_id
    assert yaml.safe_load(await owner.kubeconfig())["users"][0]["name"] == "sa-tenant-admin"


@BOTH_LANES
async def test_through_the_proxy_a_member_is_their_own_account_until_removed(
        make_gateway: Any, fake_api_server: FakeAPIServer, express_lane: bool) -> None:
    """The proxy's token is the member's own account's, made at their first
    request; the owner's stays the workspace's. Removed, the member is told
    what a stranger is, on both paths, once the change reaches the gateway."""
    seen, (_server, upstream) = await recording_api_server(fake_api_server)
    kube = FakeCluster()
    gateway = await make_gateway(kube=kube, upstream=upstream)
    owner, workspace_id = await team_workspace(gateway)
    member = await join(gateway, workspace_id, "view", owner.user_id)
    path = f"/k8s/{workspace_id}/api/v1/namespaces/tenant-{owner.user_id}/configmaps"
    account = f"member-{member.user_id}"
    for _ in range(2):  # cold, then warm
        for someone in (member, owner):
            answer = await gateway.get(path, headers=someone.bearer)
            assert answer.status == 200, await answer.text()
    tokens = dict(zip(kube.issued, kube.token_accounts))
    assert [tokens[request["Authorization"].removeprefix("Bearer ")] for request in seen] == [
        account, "sa-tenant-admin", account, "sa-tenant-admin"]
    assert kube.names(f"tenant-{owner.user_id}", "rolebindings") == {account}

    removed = await owner.call("DELETE", f"{members_path(workspace_id)}/{member.user_id}")
    assert removed.status == 204
    seen.clear()
    async with asyncio.timeout(10):  # the member_changed event reaches this gateway's caches
        while True:
            answer = await gateway.get(path, headers=member.bearer)
            if answer.status != 200:
                break
            await asyncio.sleep(0.05)
    assert await k8s_error(answer) == (404, "not_found")
    # (Until the event arrives, a warm request may still carry the old token:
    # its account is deleted, so the API server refuses it. The cluster ring checks that.)


async def test_an_invitation_can_be_withdrawn_and_the_roles_are_described(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster())
    owner, workspace_id = await team_workspace(gateway)
    email = unique_email()
    assert (await owner.call("POST", members_path(workspace_id), json={"email": email, "role": "view"})).status == 201
    withdrawn = await owner.call("DELETE", f"/api/v1/workspaces/{workspace_id}/invitations/{email}")
    assert withdrawn.status == 204, await withdrawn.text()
    assert email not in roles_of(await roster(owner, workspace_id))
    again = await owner.call("DELETE", f"/api/v1/workspaces/{workspace_id}/invitations/{email}")
    assert await error_of(again) == (404, "not_found")
    (row,) = await audited(gateway, workspace_id, "RemoveMember")
    assert row["details"] == {"email": email, "status": "invited"}
    described = await (await owner.call("GET", "/api/v1/roles")).json()
    assert [(d["role"], d["cluster_role"]) for d in described] == [
        ("admin", "tenant-admin"), ("edit", "tenant-edit"), ("view", "tenant-view")]
    assert all(d["description"] for d in described)


async def test_a_workspace_has_as_many_members_and_invitations_as_its_tier_allows(make_gateway: Any) -> None:
    gateway = await make_gateway(kube=FakeCluster(), tiers="basic: {hard: {requests.cpu: '4'}, members: 3}\n")
    owner, workspace_id = await team_workspace(gateway)
    await join(gateway, workspace_id, "edit", owner.user_id)
    path = members_path(workspace_id)
    assert (await owner.call("POST", path, json={"email": unique_email(), "role": "view"})).status == 201
    answer = await owner.call("POST", path, json={"email": unique_email(), "role": "view"})
    assert await error_of(answer) == (409, "member_limit")
    invited = [m for m in (await roster(owner, workspace_id))["members"] if m["status"] == "invited"]
    answer = await owner.call("DELETE", f"/api/v1/workspaces/{workspace_id}/invitations/{invited[0]['email']}")
    assert answer.status == 204
    assert (await owner.call("POST", path, json={"email": unique_email(), "role": "view"})).status == 201
