"""Given hostile members of a team workspace, each holding nothing but the
kubeconfig the gateway issued them (their own ServiceAccount), when they
use the public Kubernetes API directly, then their role holds (RBAC,
deploy/kubernetes/clusterroles.yaml) and no member, however high their
role, takes over another member's account or binding
(tenant-gateway-member-accounts, deploy/kubernetes/admission.yaml):

- a viewer changes nothing and reads no Secret;
- an editor grants nobody anything: no RoleBindings, no tokens;
- an admin opens the namespace to nobody outside it, and cannot create,
  change or delete a member's ServiceAccount or RoleBinding (the owner's
  `sa-tenant-admin`/`tenant-admin` included), bind anything to a member's
  account, squat the account of a member to come, or run a pod as one.

Members other than the owner join through SSO only (an invitation accepted
when a provider-verified email signs in, played with the Keycloak helper in
the SSO tests). Here they are added as test setup by inserting their
membership rows directly (tests.support.teams.add_member) for password
accounts registered through the gateway; everything after that is the real
gateway, the real credentials and the API server.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from kubernetes import client

from devstack.cluster import LocalCluster
from provisioning import manifests
from tests.support import kubeclients
from tests.support.pods import restricted
from tests.support.teams import Member, join
from tests.support.tenants import Tenant, onboard, refusal

pytestmark = pytest.mark.cluster
RBAC_GROUP = "rbac.authorization.k8s.io"
MEMBERS_POLICY = "managed by the gateway"
BOUND_BY_GATEWAY = "bound by the gateway alone"


def binding(name: str, subject: dict[str, str], role: str = "tenant-view") -> dict[str, Any]:
    return {"metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [subject]}


def account(namespace: str, name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def pod(name: str, **spec: Any) -> dict[str, Any]:
    """A pod every other wall admits (Pod Security `restricted`, pulled
    Always), so the wall under test is what refuses."""
    return restricted({"metadata": {"name": name},
                       "spec": {"containers": [{"name": "c", "image": "registry.invalid/none",
                                                "imagePullPolicy": "Always"}], **spec}})


def forbidden(call: Callable[[], object], *reasons: str) -> str:
    status, message = refusal(call)
    assert status == 403, (status, message)
    assert not reasons or any(reason in message for reason in reasons), message
    return message


async def test_a_viewer_changes_nothing_and_reads_no_secret(cluster: LocalCluster, gateway: Any, database_url: str,
                                                            tmp_path: Path) -> None:
    owner = await onboard(gateway, tmp_path)
    ns = owner.namespace
    owner.core.create_namespaced_secret(ns, {"metadata": {"name": "db"}, "stringData": {"password": "hunter2"}})
    viewer = await join(gateway, database_url, tmp_path, owner, "view")
    core, rbac, apps = viewer.core, viewer.rbac, client.AppsV1Api(viewer.api)
    moves: dict[str, Callable[[], object]] = {
        "configmap": lambda: core.create_namespaced_config_map(ns, {"metadata": {"name": "x"}}),
        "secret": lambda: core.create_namespaced_secret(ns, {"metadata": {"name": "x"}}),
        "pod": lambda: core.create_namespaced_pod(ns, pod("x")),
        "service account": lambda: core.create_namespaced_service_account(ns, {"metadata": {"name": "x"}}),
        "deployment": lambda: apps.create_namespaced_deployment(ns, {
            "metadata": {"name": "x"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                                                "template": {"metadata": {"labels": {"a": "b"}}, **pod("x")}}}),
        "role binding": lambda: rbac.create_namespaced_role_binding(ns, binding("x", account(ns, "default"))),
        "token": lambda: core.create_namespaced_service_account_token("default", ns, {"spec": {}}),
        "read a secret": lambda: core.read_namespaced_secret("db", ns),
        "list secrets": lambda: core.list_namespaced_secret(ns),
        "delete the quota": lambda: core.delete_namespaced_resource_quota(manifests.QUOTA_NAME, ns),
        "change the namespace": lambda: core.patch_namespace(ns, {"metadata": {"labels": {"x": "y"}}}),
        "own binding": lambda: rbac.delete_namespaced_role_binding(viewer.account, ns),
    }
    for what, move in moves.items():
        assert refusal(move)[0] == 403, what
    # It reads what it is meant to.
    assert [c.metadata.name for c in core.list_namespaced_config_map(ns).items]
    assert viewer.account in [b.metadata.name for b in rbac.list_namespaced_role_binding(ns).items]


async def test_an_editor_grants_nobody_anything(cluster: LocalCluster, gateway: Any, database_url: str,
                                                tmp_path: Path) -> None:
    owner = await onboard(gateway, tmp_path)
    ns = owner.namespace
    editor = await join(gateway, database_url, tmp_path, owner, "edit")
    viewer = await join(gateway, database_url, tmp_path, owner, "view")
    core, rbac = editor.core, editor.rbac
    core.create_namespaced_service_account(ns, {"metadata": {"name": "worker"}})  # made for workloads: allowed
    token = {"spec": {"expirationSeconds": 3600}}
    moves: dict[str, Callable[[], object]] = {
        "bind its worker": lambda: rbac.create_namespaced_role_binding(ns, binding("w", account(ns, "worker"))),
        "bind itself higher": lambda: rbac.create_namespaced_role_binding(
            ns, binding("up", account(ns, editor.account), "tenant-admin")),
        "a role": lambda: rbac.create_namespaced_role(ns, {"metadata": {"name": "r"}, "rules": []}),
        "its own binding": lambda: rbac.patch_namespaced_role_binding(
            editor.account, ns, {"metadata": {"labels": {"x": "y"}}}),
        "the viewer's binding": lambda: rbac.delete_namespaced_role_binding(viewer.account, ns),
        "a token for its worker": lambda: core.create_namespaced_service_account_token("worker", ns, token),
        "a token for itself": lambda: core.create_namespaced_service_account_token(editor.account, ns, token),
        "a token for the owner": lambda: core.create_namespaced_service_account_token(
            manifests.TENANT_SERVICE_ACCOUNT, ns, token),
        "a token for the viewer": lambda: core.create_namespaced_service_account_token(viewer.account, ns, token),
        "unlabel the namespace": lambda: core.patch_namespace(ns, {"metadata": {"labels": {
            manifests.WORKSPACE_LABEL: None}}}),
    }
    for what, move in moves.items():
        assert refusal(move)[0] == 403, what
    legacy = {"metadata": {"name": "forever", "annotations": {"kubernetes.io/service-account.name": editor.account}},
              "type": "kubernetes.io/service-account-token"}
    assert refusal(lambda: core.create_namespaced_secret(ns, legacy))[0] in (403, 422)
    # Nor does it delete or replace a member's account behind the gateway's back.
    forbidden(lambda: core.delete_namespaced_service_account(viewer.account, ns), MEMBERS_POLICY)
    forbidden(lambda: core.delete_namespaced_service_account(editor.account, ns), MEMBERS_POLICY)
    forbidden(lambda: core.delete_namespaced_service_account(manifests.TENANT_SERVICE_ACCOUNT, ns), MEMBERS_POLICY)
    forbidden(lambda: core.create_namespaced_service_account(ns, {"metadata": {"name": f"member-{uuid.uuid4()}"}}),
              MEMBERS_POLICY)
    forbidden(lambda: core.create_namespaced_pod(ns, pod("as-viewer", serviceAccountName=viewer.account)),
              "member-* account")
    # What an editor is for still works.
    core.create_namespaced_config_map(ns, {"metadata": {"name": "fine"}})


async def admins(gateway: Any, database_url: str, tmp_path: Path) -> tuple[Tenant, Member, Member, Tenant]:
    """An owner, an admin member, an edit member, and another tenant."""
    owner = await onboard(gateway, tmp_path)
    return (owner, await join(gateway, database_url, tmp_path, owner, "admin"),
            await join(gateway, database_url, tmp_path, owner, "edit"), await onboard(gateway, tmp_path))


async def test_an_admin_member_opens_the_namespace_to_nobody_outside_it(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    owner, admin, _editor, stranger = await admins(gateway, database_url, tmp_path)
    ns, rbac = owner.namespace, admin.rbac
    group = {"apiGroup": RBAC_GROUP, "kind": "Group"}
    outsiders = [
        account(stranger.namespace, manifests.TENANT_SERVICE_ACCOUNT),
        account(stranger.namespace, f"member-{uuid.uuid4()}"),
        account("kube-system", "default"),
        {"apiGroup": RBAC_GROUP, "kind": "User", "name": stranger.session.email},
        {"apiGroup": RBAC_GROUP, "kind": "User", "name": f"system:serviceaccount:{stranger.namespace}:sa-tenant-admin"},
        {**group, "name": "system:authenticated"},
        {**group, "name": f"system:serviceaccounts:{ns}"},
    ]
    for number, outsider in enumerate(outsiders):
        forbidden(lambda: rbac.create_namespaced_role_binding(ns, binding(f"open-{number}", outsider, "tenant-admin")),
                  # Another namespace's gateway-managed account: the members' policy refuses it too.
                  "only that namespace's own ServiceAccounts", BOUND_BY_GATEWAY)
    # Nor anything beyond the tenant roles, even to its own workloads (RBAC's escalation check).
    admin.core.create_namespaced_service_account(ns, {"metadata": {"name": "worker"}})
    for role in ("cluster-admin", "admin", "tenant-gateway"):
        assert refusal(lambda: rbac.create_namespaced_role_binding(
            ns, binding(f"up-{role}", account(ns, "worker"), role)))[0] == 403, role
    assert refusal(lambda: stranger.core.list_namespaced_config_map(ns))[0] == 403


async def test_an_admin_member_cannot_touch_another_members_account_or_binding(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    owner, admin, editor, _stranger = await admins(gateway, database_url, tmp_path)
    ns, core, rbac = owner.namespace, admin.core, admin.rbac
    members = {"the editor's": editor.account, "its own": admin.account}
    owners = (manifests.TENANT_SERVICE_ACCOUNT, manifests.TENANT_ROLEBINDING)
    moves: dict[str, Callable[[], object]] = {}
    for whose, name in members.items():
        moves |= {
            f"delete {whose} binding": lambda name=name: rbac.delete_namespaced_role_binding(name, ns),  # type: ignore[misc]
            f"patch {whose} binding": lambda name=name: rbac.patch_namespaced_role_binding(  # type: ignore[misc]
                name, ns, {"metadata": {"labels": {"x": "y"}}}),
            f"delete {whose} account": lambda name=name: core.delete_namespaced_service_account(name, ns),  # type: ignore[misc]
            f"patch {whose} account": lambda name=name: core.patch_namespaced_service_account(  # type: ignore[misc]
                name, ns, {"metadata": {"labels": {"x": "y"}}}),
        }
    moves |= {
        # The editor's binding taken over for another account (its role cannot change in place) ...
        "replace the editor's binding": lambda: rbac.replace_namespaced_role_binding(
            editor.account, ns, {**binding(editor.account, account(ns, "default"), "tenant-edit"),
                                 "subjects": [account(ns, editor.account), account(ns, "default")]}),
        # ... the editor raised behind the gateway's back by another binding naming its account.
        "bind the editor": lambda: rbac.create_namespaced_role_binding(
            ns, binding("promote", account(ns, editor.account), "tenant-admin")),
        "bind the owner's account": lambda: rbac.create_namespaced_role_binding(
            ns, binding("again", account(ns, manifests.TENANT_SERVICE_ACCOUNT), "tenant-admin")),
        # The account and binding of a member to come, squatted before the gateway makes them.
        "squat an account": lambda: core.create_namespaced_service_account(
            ns, {"metadata": {"name": f"member-{uuid.uuid4()}"}}),
        "squat a binding": lambda: rbac.create_namespaced_role_binding(
            ns, binding(f"member-{uuid.uuid4()}", account(ns, "default"))),
        "delete the owner's account": lambda: core.delete_namespaced_service_account(owners[0], ns),
        "patch the owner's account": lambda: core.patch_namespaced_service_account(
            owners[0], ns, {"automountServiceAccountToken": True}),
        "delete the owner's binding": lambda: rbac.delete_namespaced_role_binding(owners[1], ns),
        "patch the owner's binding": lambda: rbac.patch_namespaced_role_binding(
            owners[1], ns, {"metadata": {"labels": {"x": "y"}}}),
    }
    for what, move in moves.items():
        message = forbidden(move, MEMBERS_POLICY, BOUND_BY_GATEWAY)
        assert "tenant-gateway-member-accounts" in message, (what, message)

    # A binding of its own, widened later to a member's account, is refused too.
    core.create_namespaced_service_account(ns, {"metadata": {"name": "worker"}})
    rbac.create_namespaced_role_binding(ns, binding("workers", account(ns, "worker")))
    forbidden(lambda: rbac.patch_namespaced_role_binding("workers", ns, {"subjects": [
        account(ns, "worker"), account(ns, editor.account)]}), BOUND_BY_GATEWAY)

    # No pod runs as a member's account, nor hands out its token.
    for name in (editor.account, admin.account):
        forbidden(lambda: core.create_namespaced_pod(ns, pod("as-member", serviceAccountName=name)), "member-* account")
        forbidden(lambda: core.create_namespaced_pod(ns, pod("as-member", serviceAccount=name)), "member-* account")
    assert refusal(lambda: core.create_namespaced_service_account_token(
        editor.account, ns, {"spec": {"expirationSeconds": 600}}))[0] == 403

    # Everything is as the gateway made it, and the editor is still an editor.
    admin_rbac = client.RbacAuthorizationV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    for name, role in ((editor.account, "tenant-edit"), (admin.account, "tenant-admin"),
                       (manifests.TENANT_ROLEBINDING, "tenant-admin")):
        shown = admin_rbac.read_namespaced_role_binding(name, ns)
        assert shown.role_ref.name == role and not (shown.metadata.labels or {}).get("x"), name
    names = [b.metadata.name for b in admin_rbac.list_namespaced_role_binding(ns).items]
    assert "promote" not in names and "again" not in names
    assert refusal(lambda: editor.rbac.create_namespaced_role_binding(ns, binding("x", account(ns, "worker"))))[0] == 403
    # What an admin is for still works: its own workloads' bindings, Secrets.
    rbac.create_namespaced_role_binding(ns, binding("workers-edit", account(ns, "worker"), "tenant-edit"))
    core.create_namespaced_secret(ns, {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
