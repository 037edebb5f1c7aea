"""Team workspaces on the real cluster (issue 36): each member is a
ServiceAccount of their own, bound to their role's ClusterRole, so the API
server enforces the role on every path, a downloaded kubeconfig and the
gateway's /k8s proxy alike.

Members other than the owner join through SSO only (an invitation accepted
when a provider-verified email signs in, played with the Keycloak helper in
tests/integration/test_keycloak.py and test_sso.py). Here they are added as
test setup by inserting their membership rows directly
(tests.support.teams.add_member) for password accounts registered through
the gateway; everything after that goes through the real gateway API,
kubectl and the API server.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devstack.cluster import LocalCluster
from provisioning import manifests
from tests.support import kubeclients
from tests.support.gatewayclient import PASSWORD, admin_session, login
from tests.support.teams import fresh_kubeconfig, join, kubectl, refused, team, until_refused
from tests.support.tenants import onboard
from tests.support.watches import open_watch, until_closed

pytestmark = pytest.mark.cluster
SCRIPT = str(Path(sys.executable).with_name("tenant-gateway"))


async def whoami(cluster: LocalCluster, kubeconfig: Path) -> str:
    shown = await kubectl(cluster, kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


async def works(cluster: LocalCluster, kubeconfig: Path, *args: str) -> None:
    done = await kubectl(cluster, kubeconfig, *args)
    assert done.returncode == 0, (args, done.stderr)


def members_path(workspace_id: str, user_id: str = "") -> str:
    return f"/api/v1/workspaces/{workspace_id}/members" + (f"/{user_id}" if user_id else "")


@pytest.fixture(autouse=True)
def no_token_cache_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accounts remade at once after a revocation (the 15 s wait for the API
    server's token cache is unit-tested; here it would only slow the ring)."""
    from provisioning import members, suspension

    monkeypatch.setattr(members, "TOKEN_CACHE_GRACE_SECONDS", 0.0)
    monkeypatch.setattr(suspension, "TOKEN_CACHE_GRACE_SECONDS", 0.0)


async def test_a_team_of_three_acts_each_as_their_own_account_on_both_paths(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    crew = await team(gateway, database_url, tmp_path)
    owner, ns, wid = crew.owner, crew.owner.namespace, crew.owner.workspace_id

    # The kubeconfig names the account; the API server knows each person as their own.
    direct = {"admin": crew.owner_kubeconfig, "edit": crew.edit.kubeconfig, "view": crew.view.kubeconfig}
    accounts = {"admin": manifests.TENANT_SERVICE_ACCOUNT, "edit": crew.edit.account, "view": crew.view.account}
    for role, path in direct.items():
        config = yaml.safe_load(path.read_text())
        assert config["users"][0]["name"] == accounts[role]
        assert config["contexts"][0]["context"]["user"] == accounts[role]
        assert await whoami(cluster, path) == f"system:serviceaccount:{ns}:{accounts[role]}"
    assert crew.edit.account == f"member-{crew.edit.session.user_id}"
    for member in (crew.edit, crew.view):
        bound = client.RbacAuthorizationV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig)) \
            .read_namespaced_role_binding(member.account, ns)
        assert bound.role_ref.name == f"tenant-{member.role}"

    server = str(gateway.make_url(f"/k8s/{wid}"))
    sessions = {"admin": owner.session, "edit": crew.edit.session, "view": crew.view.session}
    proxied = {role: kubeclients.kubeconfig_for_proxy(tmp_path, server, session.token, ns, gateway.ca_file)
               for role, session in sessions.items()}
    for lane, configs in (("direct", direct), ("proxy", proxied)):
        if lane == "proxy":
            for role, path in configs.items():
                assert await whoami(cluster, path) == f"system:serviceaccount:{ns}:{accounts[role]}", lane
        view = await kubectl(cluster, configs["view"], "create", "configmap", f"by-view-{lane}")
        assert refused(view) and "forbidden" in view.stderr.lower(), (lane, view.stderr)
        await works(cluster, configs["view"], "get", "configmaps")

        edit = await kubectl(cluster, configs["edit"], "create", "configmap", f"by-edit-{lane}")
        assert edit.returncode == 0, (lane, edit.stderr)
        worker = f"worker-{lane}"
        await works(cluster, configs["edit"], "create", "serviceaccount", worker)
        binding = await kubectl(cluster, configs["edit"], "create", "rolebinding", f"by-edit-{lane}",
                          "--clusterrole=tenant-view", f"--serviceaccount={ns}:{worker}")
        assert refused(binding) and "forbidden" in binding.stderr.lower(), (lane, binding.stderr)

        admin = await kubectl(cluster, configs["admin"], "create", "rolebinding", f"by-admin-{lane}",
                        "--clusterrole=tenant-view", f"--serviceaccount={ns}:{worker}")
        assert admin.returncode == 0, (lane, admin.stderr)

    # The roster says who is who.
    listed = await (await owner.session.call("GET", members_path(wid))).json()
    roles = {m["user_id"]: m["role"] for m in listed["members"] if "user_id" in m}
    assert roles == {owner.session.user_id: "admin", crew.edit.session.user_id: "edit",
                     crew.view.session.user_id: "view"}, listed


async def test_a_removed_member_is_refused_at_once_and_the_others_keep_working(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    crew = await team(gateway, database_url, tmp_path)
    ns, wid = crew.owner.namespace, crew.owner.workspace_id
    workspace = {"id": wid, "namespace": ns}
    await works(cluster, crew.edit.kubeconfig, "create", "configmap", "before")
    watch = await open_watch(gateway, crew.edit.session, workspace)
    other = await open_watch(gateway, crew.view.session, workspace)
    closed = asyncio.create_task(until_closed(watch, 10))

    removed = await crew.owner.session.call("DELETE", members_path(wid, crew.edit.session.user_id))
    assert removed.status == 204, await removed.text()
    assert await until_refused(cluster, crew.edit.kubeconfig, ns, within=5) < 5
    assert await closed < 5  # the proxy's watch of the removed member ended
    # Their objects are gone; their session no longer reaches the workspace.
    gone = cluster.kubectl_run("-n", ns, "get", f"serviceaccount/{crew.edit.account}",
                               f"rolebinding/{crew.edit.account}", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stdout
    proxied = await crew.edit.session.call("GET", f"/k8s/{wid}/api/v1/namespaces/{ns}/configmaps")
    assert proxied.status == 404
    again = await crew.edit.session.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={wid}")
    assert again.status == 404

    # The others keep working, and the other member's watch is still open.
    await works(cluster, crew.owner_kubeconfig, "create", "configmap", "after")
    await works(cluster, crew.view.kubeconfig, "get", "configmap", "after")
    with pytest.raises(TimeoutError):  # read until the test gave up: nobody cut it
        await until_closed(other, 1)


async def test_a_lowered_role_holds_at_the_next_request(cluster: LocalCluster, gateway: Any, database_url: str,
                                                        tmp_path: Path) -> None:
    crew = await team(gateway, database_url, tmp_path)
    ns, wid = crew.owner.namespace, crew.owner.workspace_id
    await works(cluster, crew.edit.kubeconfig, "create", "configmap", "first")

    changed = await crew.owner.session.call("PATCH", members_path(wid, crew.edit.session.user_id),
                                            json={"role": "view"})
    assert changed.status == 200, await changed.text()
    assert (await changed.json())["role"] == "view"
    lowered = await kubectl(cluster, crew.edit.kubeconfig, "create", "configmap", "second")
    assert refused(lowered) and "forbidden" in lowered.stderr.lower(), lowered.stderr
    await works(cluster, crew.edit.kubeconfig, "get", "configmap", "first")  # still reads
    binding = cluster.kubectl_run("-n", ns, "get", "rolebinding", crew.edit.account, "-o",
                                  "jsonpath={.roleRef.name}").stdout
    assert binding == "tenant-view"
    # And back up: the same kubeconfig writes again.
    raised = await crew.owner.session.call("PATCH", members_path(wid, crew.edit.session.user_id),
                                           json={"role": "edit"})
    assert raised.status == 200
    await works(cluster, crew.edit.kubeconfig, "create", "configmap", "third")


async def test_a_suspended_user_loses_every_workspace_and_a_resumed_one_gets_new_kubeconfigs(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    """Carol owns a workspace and is a member of two others: suspending her
    account ends her kubeconfigs in all three; once resumed she signs in
    again and fresh kubeconfigs work (her accounts are made again)."""
    carol = await onboard(gateway, tmp_path)
    alice, bob = await onboard(gateway, tmp_path), await onboard(gateway, tmp_path)
    in_alice = await join(gateway, database_url, tmp_path, alice, "edit", carol.session)
    in_bob = await join(gateway, database_url, tmp_path, bob, "view", carol.session)
    own = tmp_path / f"{carol.session.user_id}.kubeconfig"
    bob_edit = await join(gateway, database_url, tmp_path, bob, "edit")
    for path, ns in ((own, carol.namespace), (in_alice.kubeconfig, alice.namespace),
                     (in_bob.kubeconfig, bob.namespace)):
        await works(cluster, path, "-n", ns, "get", "configmaps")

    root = await admin_session(gateway, database_url)
    suspended = await root.call("POST", f"/api/v1/users/{carol.session.user_id}/suspend")
    assert suspended.status == 200, await suspended.text()
    for path, ns in ((own, carol.namespace), (in_alice.kubeconfig, alice.namespace),
                     (in_bob.kubeconfig, bob.namespace)):
        assert await until_refused(cluster, path, ns, within=5) < 5
    # Nobody else lost anything.
    await works(cluster, bob_edit.kubeconfig, "create", "configmap", "still")
    await works(cluster, tmp_path / f"{alice.session.user_id}.kubeconfig", "get", "configmaps")

    resumed = await root.call("POST", f"/api/v1/users/{carol.session.user_id}/resume")
    assert resumed.status == 200, await resumed.text()
    again = await login(gateway, carol.session.email, PASSWORD)
    for member in (in_alice, in_bob):
        member.session = again
    fresh_alice = await fresh_kubeconfig(in_alice, tmp_path)
    await works(cluster, fresh_alice, "create", "configmap", "back")
    assert await whoami(cluster, fresh_alice) == in_alice.username
    fresh_bob = await fresh_kubeconfig(in_bob, tmp_path)
    assert refused(await kubectl(cluster, fresh_bob, "create", "configmap", "back"))  # still a viewer there
    await works(cluster, fresh_bob, "get", "configmap", "still")
    (tmp_path / "carol-own.kubeconfig").write_text(await again.kubeconfig())
    await works(cluster, tmp_path / "carol-own.kubeconfig", "create", "configmap", "mine")


async def test_workspace_suspension_ends_members_kubeconfigs_and_resume_gives_them_new_ones(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    crew = await team(gateway, database_url, tmp_path)
    ns, wid = crew.owner.namespace, crew.owner.workspace_id
    root = await admin_session(gateway, database_url)
    suspended = await root.call("POST", f"/api/v1/workspaces/{wid}/suspend")
    assert suspended.status == 200, await suspended.text()
    for member in (crew.edit, crew.view):
        assert await until_refused(cluster, member.kubeconfig, ns, within=5) < 5
        denied = await member.session.call("GET", f"/api/v1/workspaces/credentials/kubeconfig?workspace_id={wid}")
        assert denied.status == 403
    accounts = cluster.kubectl_run("-n", ns, "get", "serviceaccounts", "-o", "name").stdout
    assert "member-" not in accounts

    resumed = await root.call("POST", f"/api/v1/workspaces/{wid}/resume")
    assert resumed.status == 200, await resumed.text()
    edit, view = await fresh_kubeconfig(crew.edit, tmp_path), await fresh_kubeconfig(crew.view, tmp_path)
    await works(cluster, edit, "create", "configmap", "resumed")
    assert await whoami(cluster, edit) == crew.edit.username
    assert refused(await kubectl(cluster, view, "create", "configmap", "nope"))
    await works(cluster, view, "get", "configmap", "resumed")
    # The old ones stay dead (their accounts were deleted, not merely unbound).
    stale = await kubectl(cluster, crew.edit.kubeconfig, "get", "configmaps")
    assert refused(stale), stale.stderr


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env})


async def test_reconcile_rebinds_a_members_missing_binding_and_deletes_a_strangers(
        cluster: LocalCluster, gateway: Any, gateway_env: dict[str, str], database_url: str, tmp_path: Path) -> None:
    crew = await team(gateway, database_url, tmp_path)
    ns, wid = crew.owner.namespace, crew.owner.workspace_id
    rbac = client.RbacAuthorizationV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    core = client.CoreV1Api(rbac.api_client)
    rbac.delete_namespaced_role_binding(crew.edit.account, ns)
    stranger = f"member-{uuid.uuid4()}"
    core.create_namespaced_service_account(ns, manifests.service_account(ns, wid, stranger))
    rbac.create_namespaced_role_binding(ns, manifests.role_binding(ns, wid, "tenant-edit", stranger))
    assert refused(await kubectl(cluster, crew.edit.kubeconfig, "create", "configmap", "unbound"))

    first = run(gateway_env, "reconcile")
    assert first.returncode == 0, first.stdout + first.stderr
    (line,) = first.stdout.splitlines()
    assert line.startswith(f"{wid} {ns}: "), line
    assert f"RoleBinding {crew.edit.account} bound to tenant-edit (was missing)" in line, line
    assert f"RoleBinding and ServiceAccount {stranger} deleted (no longer a member)" in line, line
    assert rbac.read_namespaced_role_binding(crew.edit.account, ns).role_ref.name == "tenant-edit"
    names = [b.metadata.name for b in rbac.list_namespaced_role_binding(ns).items]
    assert stranger not in names and crew.view.account in names
    assert stranger not in [a.metadata.name for a in core.list_namespaced_service_account(ns).items]
    # The member's own kubeconfig works again; nothing is left to do.
    await works(cluster, crew.edit.kubeconfig, "create", "configmap", "rebound")
    again = run(gateway_env, "reconcile")
    assert (again.returncode, again.stdout) == (0, ""), again.stdout + again.stderr

