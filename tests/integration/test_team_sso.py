"""Team workspaces through single sign-on (issue 36), against the real
Keycloak with two organisations (devstack.keycloak: org-a and org-b both
have a `developers` group; alice@shared.example is in both realms; carol's
email is not verified).

Given a workspace whose admin binds org-a's `developers` group or invites
people by email, when those people sign in through Keycloak, then they land
in the workspace with that role, each as a ServiceAccount of their own the
API server itself holds to the role; the same group name or email at the
other organisation grants nothing; and unbinding the group, or the
organisation taking them out of it, ends their access.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from devstack.cluster import LocalCluster
from tests.support.gatewayclient import Session, error_of, tenant
from tests.support.keycloak_admin import out_of_group
from tests.support.kubeclients import kubectl
from tests.support.team_signin import (bearer_session, browser_session, kubeconfig_file, refused_within,
                                       roles_of)

pytestmark = [pytest.mark.cluster, pytest.mark.keycloak]


def both(keycloak: Any) -> list[dict[str, Any]]:
    """Both organisations, neither making gateway admins (who may see every
    workspace): here what people may do follows from membership alone."""
    return [keycloak.provider_config("org-a", admin_groups=[]), keycloak.provider_config("org-b", admin_groups=[])]


async def test_a_group_of_one_organisation_grants_its_role_and_unbinding_it_ends_the_access(
        make_gateway: Callable[..., Any], keycloak: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    gateway = await make_gateway(oidc_providers=both(keycloak))
    owner, workspace = await tenant(gateway)
    ns, members = workspace["namespace"], f"/api/v1/workspaces/{workspace['id']}/members"
    bound = await owner.call("POST", members, json={"group": "developers", "provider": "org-a", "role": "edit"})
    assert bound.status == 201, await bound.text()
    assert {k: v for k, v in (await bound.json()).items() if k in ("group", "provider", "role")} == {
        "group": "developers", "provider": "org-a", "role": "edit"}

    unknown = await owner.call("POST", members, json={"group": "developers", "provider": "org-c", "role": "edit"})
    assert await error_of(unknown) == (400, "unknown_provider")

    bob = await bearer_session(gateway, keycloak, "org-a", "bob")
    assert (await roles_of(bob)).get(workspace["id"]) == "edit"
    # Through the proxy, his ID token is his own account too.
    proxied = f"/k8s/{workspace['id']}/api/v1/namespaces/{ns}/configmaps"
    assert (await bob.call("GET", proxied)).status == 200
    roster = await (await bob.call("GET", members)).json()
    listed = {m["email"]: m for m in roster["members"]}
    assert listed["bob@org-a.example"]["role"] == "edit" and listed["bob@org-a.example"]["via"] == "group"
    assert listed["bob@org-a.example"]["status"] == "active" and listed["bob@org-a.example"]["user_id"] == bob.user_id
    assert [(g["provider"], g["group"], g["role"]) for g in roster["groups"]] == [("org-a", "developers", "edit")]

    # His kubeconfig is his own account, and the API server holds it to `edit`.
    config = await kubeconfig_file(bob, workspace["id"], tmp_path / "bob.kubeconfig")
    account = f"member-{bob.user_id}"
    assert yaml.safe_load(config.read_text())["users"][0]["name"] == account
    whoami = await asyncio.to_thread(kubectl, cluster, config, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert whoami.stdout.strip() == f"system:serviceaccount:{ns}:{account}", whoami.stderr
    made = await asyncio.to_thread(kubectl, cluster, config, "create", "configmap", "from-bob", "--from-literal=a=b")
    assert made.returncode == 0, made.stderr
    escalated = await asyncio.to_thread(kubectl, cluster, config, "create", "rolebinding", "bob-admin",
                                        "--clusterrole=tenant-admin", f"--serviceaccount={ns}:{account}")
    assert escalated.returncode != 0 and "forbidden" in escalated.stderr.lower(), escalated.stderr

    # The same group name in org-b is another organisation's: nothing.
    for username in ("erin", "alice"):
        outsider = await bearer_session(gateway, keycloak, "org-b", username)
        assert workspace["id"] not in await roles_of(outsider)
        assert (await outsider.call("GET", members)).status == 404
        assert (await outsider.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={workspace['id']}")
                ).status == 404

    # Unbound: his membership goes, and his kubeconfig with it.
    unbinding = time.monotonic()
    gone = await owner.call("DELETE", f"/api/v1/workspaces/{workspace['id']}/groups/org-a/developers")
    assert gone.status == 204, await gone.text()
    assert await refused_within(cluster, config, ns, 5 - (time.monotonic() - unbinding)) < 5
    assert workspace["id"] not in await roles_of(bob)
    async with asyncio.timeout(5):  # the replica hears member_changed, and forgets the cached membership
        while (answer := await bob.call("GET", proxied)).status == 200:
            await asyncio.sleep(0.1)
    assert answer.status == 404
    roster = await (await owner.call("GET", members)).json()
    assert [m["email"] for m in roster["members"]] == [owner.email] and roster["groups"] == []
    again = await owner.call("DELETE", f"/api/v1/workspaces/{workspace['id']}/groups/org-a/developers")
    assert await error_of(again) == (404, "not_found")
    # Signing in again grants nothing: the binding is gone.
    assert workspace["id"] not in await roles_of(await bearer_session(gateway, keycloak, "org-a", "bob"))


async def test_leaving_the_group_at_the_organisation_ends_the_membership_at_the_next_sign_in(
        make_gateway: Callable[..., Any], keycloak: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    """Given bob a member through org-a's `developers`, when org-a's
    administrator takes him out of the group and he signs in again, then he
    is no member and his kubeconfig is refused; his older ID token, which
    still lists the group, shown to a replica that has not seen it, does not
    make him one again."""
    gateway = await make_gateway(oidc_providers=both(keycloak))
    owner, workspace = await tenant(gateway)
    ns, members = workspace["namespace"], f"/api/v1/workspaces/{workspace['id']}/members"
    assert (await owner.call("POST", members, json={"group": "developers", "provider": "org-a", "role": "view"})
            ).status == 201
    before = await bearer_session(gateway, keycloak, "org-a", "bob")
    assert (await roles_of(before)).get(workspace["id"]) == "view"
    config = await kubeconfig_file(before, workspace["id"], tmp_path / "bob.kubeconfig")
    viewed = await asyncio.to_thread(kubectl, cluster, config, "get", "configmaps")
    assert viewed.returncode == 0, viewed.stderr
    refused = await asyncio.to_thread(kubectl, cluster, config, "create", "configmap", "x", "--from-literal=a=b")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr

    with out_of_group(keycloak, "org-a", "bob", "developers"):
        await asyncio.sleep(1.1)  # issue times are whole seconds: the next token is newer
        after = await bearer_session(gateway, keycloak, "org-a", "bob")
        assert after.user_id == before.user_id
        assert workspace["id"] not in await roles_of(after)
        assert await refused_within(cluster, config, ns, 5) < 5
        replica = await make_gateway(oidc_providers=both(keycloak))
        old = await roles_of(Session(replica, "", before.email, before.token, ""))
        assert workspace["id"] not in old
    roster = await (await owner.call("GET", members)).json()
    assert [m["email"] for m in roster["members"]] == [owner.email]


async def test_invitations_are_accepted_by_a_verified_email_of_the_right_organisation_only(
        make_gateway: Callable[..., Any], keycloak: Any) -> None:
    gateway = await make_gateway(oidc_providers=both(keycloak))
    owner, workspace = await tenant(gateway)
    members = f"/api/v1/workspaces/{workspace['id']}/members"
    answers = []
    for email in ("dave@org-a.example", "nobody@nowhere.example"):
        invited = await owner.call("POST", members, json={"email": email, "role": "view"})
        answers.append((invited.status, await invited.json()))
    # The same answer for an email of an account-to-be and one of nobody.
    assert answers == [(201, {"email": email, "role": "view", "provider": None, "status": "invited"})
                       for email in ("dave@org-a.example", "nobody@nowhere.example")]
    only_b = await owner.call("POST", members, json={"email": "alice@shared.example", "role": "edit",
                                                     "provider": "org-b"})
    assert only_b.status == 201 and (await only_b.json())["provider"] == "org-b"
    assert (await owner.call("POST", members, json={"email": "carol@org-a.example", "role": "view"})).status == 201

    # dave signs in through org-a's login form and lands in the workspace.
    dave = await browser_session(gateway, keycloak, "org-a", "dave")
    assert (await roles_of(dave)).get(workspace["id"]) == "view"
    # alice of org-a has that email too, but the invitation is org-b's.
    alice_a = await bearer_session(gateway, keycloak, "org-a", "alice")
    assert workspace["id"] not in await roles_of(alice_a)
    # carol's email is not verified: no sign-in, so no acceptance.
    carol = keycloak.password_grant("org-a", "carol")["id_token"]
    answer = await gateway.get("/api/v1/me", headers={"Authorization": f"Bearer {carol}"})
    assert answer.status == 401 and (await answer.json())["error"]["code"] == "email_not_verified"

    roster = await (await owner.call("GET", members)).json()
    status = {m["email"]: (m["status"], m["role"]) for m in roster["members"]}
    assert status == {owner.email: ("active", "admin"), "dave@org-a.example": ("active", "view"),
                      "nobody@nowhere.example": ("invited", "view"), "alice@shared.example": ("invited", "edit"),
                      "carol@org-a.example": ("invited", "view")}
    # org-b's alice is the one invited.
    alice_b = await bearer_session(gateway, keycloak, "org-b", "alice")
    assert alice_b.user_id != alice_a.user_id
    assert (await roles_of(alice_b)).get(workspace["id"]) == "edit"
