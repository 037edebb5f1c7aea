"""Given a hostile tenant holding nothing but the kubeconfig the gateway
issued it, when it uses the public Kubernetes API directly, then the
admission policies in deploy/kubernetes/admission.yaml hold the walls:

- it cannot open its namespace to anyone outside it (RoleBinding subjects);
- a suspended namespace refuses every change by every identity but the
  gateway and cluster administrators, and suspension completes while
  accomplices race it or pin what it deletes with finalizers;
- no pod runs as the gateway-managed ServiceAccount or projects a token
  longer than a kubeconfig's 2 h;
- no pod mounts storage with the node's identity, and no claim binds an
  administrator's volume by name, label or the empty class;
- no pod picks its node or tolerates the control plane, on create or by a
  later update;
- no pod takes the cluster's own (system-) priority classes;
- no pod carries a finalizer that is not Kubernetes' own (one would keep a
  deleted pod in etcd outside the pods quota);
- no ExternalName Service points shared infrastructure elsewhere;
- the gateway's own credential cannot hand a tenant namespace to the
  garbage collector.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from kubernetes import client

from devstack.cluster import LocalCluster
from devstack.node import NODE_NAME
from provisioning import manifests
from tests.support import kubeclients
from tests.support.gatewayclient import admin_session
from tests.support.pods import pod_manifest, restricted
from tests.support.tenants import BASELINE_TIERS, Tenant, onboard, refusal

pytestmark = pytest.mark.cluster
RBAC_GROUP = "rbac.authorization.k8s.io"


def binding(name: str, *subjects: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "tenant-admin"},
            "subjects": list(subjects)}


def own_account(tenant: Tenant, name: str) -> dict[str, str]:
    tenant.core.create_namespaced_service_account(tenant.namespace, {"metadata": {"name": name}})
    return {"kind": "ServiceAccount", "name": name, "namespace": tenant.namespace}


# -- 1. the wall between tenants ------------------------------------------------

async def test_a_tenant_cannot_open_its_namespace_to_anyone_outside_it(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    alice, mallory = await onboard(gateway, tmp_path), await onboard(gateway, tmp_path)
    group = {"apiGroup": RBAC_GROUP, "kind": "Group"}
    outsiders = [
        {"kind": "ServiceAccount", "name": manifests.TENANT_SERVICE_ACCOUNT, "namespace": mallory.namespace},
        {"kind": "ServiceAccount", "name": "default", "namespace": "kube-system"},
        {"apiGroup": RBAC_GROUP, "kind": "User", "name": "mallory@example.test"},
        {"apiGroup": RBAC_GROUP, "kind": "User", "name": "system:anonymous"},
        {**group, "name": "system:authenticated"},
        {**group, "name": "system:unauthenticated"},
        {**group, "name": "system:serviceaccounts"},
        {**group, "name": f"system:serviceaccounts:{mallory.namespace}"},
        {**group, "name": f"system:serviceaccounts:{alice.namespace}"},  # a group, not a ServiceAccount
    ]
    for number, outsider in enumerate(outsiders):
        status, message = refusal(lambda: alice.rbac.create_namespaced_role_binding(
            alice.namespace, binding(f"open-{number}", outsider)))
        # (Another namespace's sa-tenant-admin: the members' policy refuses it as well, whichever says so first.)
        assert status == 403 and ("only that namespace's own ServiceAccounts" in message
                                  or "bound by the gateway alone" in message), (outsider, status, message)

    # Its own ServiceAccounts may be bound; a binding cannot be widened later ...
    worker = own_account(alice, "worker")
    alice.rbac.create_namespaced_role_binding(alice.namespace, binding("workers", worker))
    widened = {"subjects": [worker, outsiders[0]]}
    assert refusal(lambda: alice.rbac.patch_namespaced_role_binding("workers", alice.namespace, widened))[0] == 403
    # ... not even the gateway's own binding.
    assert refusal(lambda: alice.rbac.patch_namespaced_role_binding(
        manifests.TENANT_ROLEBINDING, alice.namespace, widened))[0] == 403
    # So mallory's credential stays outside alice's namespace.
    assert refusal(lambda: mallory.core.list_namespaced_secret(alice.namespace))[0] == 403


# -- 2. suspension against accomplices ------------------------------------------

def cluster_operator_token(cluster: LocalCluster) -> str:
    """An identity the cluster (not the gateway) granted `edit` everywhere:
    not a cluster administrator, so a suspended namespace is closed to it too."""
    name = f"ops-{uuid.uuid4().hex[:8]}"
    cluster.kubectl_run("-n", "default", "create", "serviceaccount", name)
    cluster.kubectl_run("create", "clusterrolebinding", name, "--clusterrole=edit", f"--serviceaccount=default:{name}")
    return cluster.kubectl_run("-n", "default", "create", "token", name).stdout.strip()


def keep_trying(attempts: list[int], stop: threading.Event, *moves: Callable[[int], object]) -> None:
    number = 0
    while not stop.is_set():
        number += 1
        for move in moves:
            refusal(lambda: move(number))
        attempts.append(number)


async def test_suspension_completes_while_accomplices_keep_trying_and_then_only_admins_act(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    alice, bob = await onboard(gateway, tmp_path), await onboard(gateway, tmp_path)
    worker = own_account(alice, "worker")
    operator = client.CoreV1Api(kubeclients.from_token(cluster, cluster_operator_token(cluster)))
    ns = alice.namespace

    stop, attempts = threading.Event(), list[int]()
    racers = [
        # The tenant's own token re-creating bindings to its accounts as fast as it can ...
        threading.Thread(target=keep_trying, args=(attempts, stop,
            lambda n: alice.rbac.create_namespaced_role_binding(ns, binding(f"again-{n}", worker)),
            lambda n: alice.core.create_namespaced_config_map(ns, {"metadata": {"name": f"alice-{n}"}}))),
        # ... another tenant, and an identity the cluster granted rights everywhere.
        threading.Thread(target=keep_trying, args=(attempts, stop,
            lambda n: bob.rbac.create_namespaced_role_binding(ns, binding(f"bob-{n}", worker)),
            lambda n: operator.create_namespaced_config_map(ns, {"metadata": {"name": f"ops-{n}"}}))),
    ]
    for racer in racers:
        racer.start()
    try:
        while not attempts:  # the race is on before the suspension starts
            await asyncio.sleep(0.05)
        root = await admin_session(gateway, database_url)
        suspended = await root.call("POST", f"/api/v1/workspaces/{alice.workspace_id}/suspend")
        assert suspended.status == 200, await suspended.text()
    finally:
        stop.set()
        for racer in racers:
            racer.join()

    admin = kubeclients.from_kubeconfig(cluster.admin_kubeconfig)
    assert client.RbacAuthorizationV1Api(admin).list_namespaced_role_binding(ns).items == []
    # Every identity but a cluster administrator is refused, whatever RBAC says.
    status, message = refusal(lambda: operator.create_namespaced_config_map(ns, {"metadata": {"name": "late"}}))
    assert status == 403 and "this workspace is suspended" in message
    assert refusal(lambda: operator.create_namespaced_config_map(bob.namespace, {"metadata": {"name": "ok"}}))[0] == 200
    assert refusal(lambda: alice.core.create_namespaced_config_map(ns, {"metadata": {"name": "late"}}))[0] in (401, 403)
    # (A ServiceAccount, which no quota counts: the racers may have used up the tier's ConfigMaps.)
    assert refusal(lambda: client.CoreV1Api(admin).create_namespaced_service_account(
        ns, {"metadata": {"name": "by-admin"}}))[0] == 200


async def test_a_tenant_cannot_pin_what_suspension_must_delete_with_a_finalizer(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    """A finalizer on a RoleBinding keeps it (and RBAC honours a binding being
    deleted) after suspension's delete: the suspension could never finish and
    the tenant's tokens would keep reading. On sa-tenant-admin it would keep
    the account whose tokens suspension means to kill."""
    alice = await onboard(gateway, tmp_path)
    ns = alice.namespace
    pin = {"metadata": {"finalizers": ["example.com/keep"]}}
    worker = own_account(alice, "worker")
    attempts = {
        "patch the gateway's binding": lambda: alice.rbac.patch_namespaced_role_binding(
            manifests.TENANT_ROLEBINDING, ns, pin),
        "create a pinned binding": lambda: alice.rbac.create_namespaced_role_binding(
            ns, {**binding("pinned", worker), "metadata": {"name": "pinned", **pin["metadata"]}}),
        "patch sa-tenant-admin": lambda: alice.core.patch_namespaced_service_account(
            manifests.TENANT_SERVICE_ACCOUNT, ns, pin),
    }
    for what, attempt in attempts.items():
        status, message = refusal(attempt)
        # The gateway's own objects are also the members' policy's to refuse, whichever says so first.
        assert status == 403 and ("may carry no finalizers" in message
                                  or "managed by the gateway" in message), (what, status, message)
    # Its own accounts and unpinned bindings stay its to manage.
    assert refusal(lambda: alice.core.patch_namespaced_service_account("worker", ns, pin))[0] == 200
    assert refusal(lambda: alice.rbac.create_namespaced_role_binding(ns, binding("plain", worker)))[0] == 200


def pinned_by_a_dependent(tenant: Tenant, owner: Any, kind: str, api_version: str) -> None:
    """What the tenant can do to any object it may delete: a dependent that
    blocks its owner's foreground deletion and never goes itself (a finalizer
    nobody removes), then a foreground delete. The owner stays, being
    deleted, for as long as the dependent does."""
    tenant.core.create_namespaced_config_map(tenant.namespace, {"metadata": {
        "name": f"pin-{owner.metadata.name}", "finalizers": ["example.com/pin"],
        "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": owner.metadata.name,
                             "uid": owner.metadata.uid, "blockOwnerDeletion": True}]}})


async def test_suspension_lets_go_of_what_a_tenant_pinned_with_a_foreground_delete(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    """A foreground delete (which the API server, not the tenant, marks with
    its finalizer) and a dependent that never goes keep a RoleBinding, and
    RBAC honours a binding being deleted. Suspension removes the finalizers
    of what it deletes, so it completes and the access ends."""
    alice = await onboard(gateway, tmp_path)
    ns = alice.namespace
    worker = own_account(alice, "worker")
    keep = alice.rbac.create_namespaced_role_binding(ns, binding("keep", worker))
    pinned_by_a_dependent(alice, keep, "RoleBinding", f"{RBAC_GROUP}/v1")
    alice.rbac.delete_namespaced_role_binding("keep", ns, propagation_policy="Foreground")
    account = alice.core.read_namespaced_service_account(manifests.TENANT_SERVICE_ACCOUNT, ns)
    pinned_by_a_dependent(alice, account, "ServiceAccount", "v1")
    admin = kubeclients.from_kubeconfig(cluster.admin_kubeconfig)
    token = client.CoreV1Api(admin).create_namespaced_service_account_token(
        "worker", ns, {"spec": {"expirationSeconds": 3600}}).status.token
    as_worker = client.CoreV1Api(kubeclients.from_token(cluster, token))
    await asyncio.sleep(2)  # the garbage collector takes up the foreground delete
    held = client.RbacAuthorizationV1Api(admin).read_namespaced_role_binding("keep", ns)
    assert held.metadata.deletion_timestamp is not None and "foregroundDeletion" in held.metadata.finalizers
    assert refusal(lambda: as_worker.list_namespaced_secret(ns))[0] == 200  # a binding being deleted still binds
    # sa-tenant-admin: no foreground delete of its own (the member-accounts policy keeps it the gateway's).
    status, message = refusal(lambda: alice.core.delete_namespaced_service_account(
        manifests.TENANT_SERVICE_ACCOUNT, ns, propagation_policy="Foreground"))
    assert status == 403 and "managed by the gateway" in message, message

    root = await admin_session(gateway, database_url)
    suspended = await root.call("POST", f"/api/v1/workspaces/{alice.workspace_id}/suspend")
    assert suspended.status == 200, await suspended.text()
    assert client.RbacAuthorizationV1Api(admin).list_namespaced_role_binding(ns).items == []
    replaced = client.CoreV1Api(admin).read_namespaced_service_account(manifests.TENANT_SERVICE_ACCOUNT, ns)
    assert replaced.metadata.uid != account.metadata.uid and replaced.metadata.deletion_timestamp is None
    for _ in range(60):  # RBAC's view of the bindings catches up
        if refusal(lambda: as_worker.list_namespaced_secret(ns))[0] == 403:
            break
        await asyncio.sleep(0.5)
    assert refusal(lambda: as_worker.list_namespaced_secret(ns))[0] == 403


# -- 3. no gateway-grade token outside the gateway ------------------------------

def pod(name: str, **spec: Any) -> dict[str, Any]:
    """A pod Pod Security `restricted` admits, so the wall under test is what refuses."""
    return restricted({"metadata": {"name": name},
                       "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}], **spec}})


def projected_token(seconds: int) -> list[dict[str, Any]]:
    return [{"name": "token", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": seconds, "audience": "anything"}}]}}]


async def test_pods_cannot_carry_a_gateway_grade_token_but_own_accounts_work(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    for name, spec in (("as-gateway-sa", {"serviceAccountName": manifests.TENANT_SERVICE_ACCOUNT}),
                       ("as-gateway-sa-old-field", {"serviceAccount": manifests.TENANT_SERVICE_ACCOUNT})):
        status, message = refusal(lambda: core.create_namespaced_pod(ns, pod(name, **spec)))
        assert status == 403 and "may not run as sa-tenant-admin" in message, (name, status, message)
    own_account(alice, "worker")
    status, message = refusal(lambda: core.create_namespaced_pod(
        ns, pod("year-long", serviceAccountName="worker", volumes=projected_token(365 * 24 * 3600))))
    assert status == 403 and "at most 7200 s" in message
    # A ServiceAccount named like the gateway's would pass as it where policies go by name.
    assert refusal(lambda: core.create_namespaced_service_account(ns, {"metadata": {"name": "tenant-gateway"}}))[0] == 403

    # The tenant's own workloads keep their own accounts and tokens (pods stay Pending: admission is the point).
    assert core.create_namespaced_pod(ns, pod("worker", serviceAccountName="worker")).spec.service_account_name == "worker"
    core.create_namespaced_pod(ns, pod("two-hours", serviceAccountName="worker", volumes=projected_token(7200)))
    core.create_namespaced_pod(ns, pod("default-account"))


# -- storage and nodes the tenant reaches past Pod Security -------------------------

async def test_pods_reach_storage_only_through_allowed_volumes_and_unnamed_claims(
        cluster: LocalCluster, make_gateway: Any, tmp_path: Path) -> None:
    """In-tree network volumes are mounted by the kubelet as root from the
    node's address; a claim naming a PersistentVolume binds whatever
    Available volume it names, an administrator's hostPath one included.
    On a `baseline` tier: `restricted` Pod Security refuses those volume
    kinds itself, before this wall is reached."""
    alice = await onboard(await make_gateway(tiers=BASELINE_TIERS), tmp_path, tier="relaxed")
    ns, core = alice.namespace, alice.core
    for source in ({"nfs": {"server": "nfs.example.test", "path": "/exports/other-tenant"}},
                   {"iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2001-04.com.example:x", "lun": 0}},
                   {"flexVolume": {"driver": "example.com/x"}}):
        status, message = refusal(lambda: core.create_namespaced_pod(ns, pod("mounts", volumes=[{"name": "v", **source}])))
        assert status == 403 and "csi volumes only" in message, (source, status, message)
    # Through a controller too: the ReplicaSet's pods are refused alike.
    template = pod("nfs", volumes=[{"name": "v", "nfs": {"server": "nfs.example.test", "path": "/"}}])
    client.AppsV1Api(alice.api).create_namespaced_deployment(ns, {
        "metadata": {"name": "nfs"}, "spec": {"selector": {"matchLabels": {"app": "nfs"}}, "template": {
            "metadata": {"labels": {"app": "nfs"}}, "spec": template["spec"]}}})
    failure = ""
    for _ in range(60):
        for replica_set in client.AppsV1Api(alice.api).list_namespaced_replica_set(ns).items:
            failure += " ".join(c.message or "" for c in replica_set.status.conditions or [] if c.type == "ReplicaFailure")
        if failure:
            break
        await asyncio.sleep(0.5)
    assert "csi volumes only" in failure
    assert core.list_namespaced_pod(ns, label_selector="app=nfs").items == []
    # What workloads use stays theirs.
    core.create_namespaced_pod(ns, pod("ordinary", volumes=[
        {"name": "scratch", "emptyDir": {}}, {"name": "config", "configMap": {"name": "kube-root-ca.crt"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]))

    claim = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
                                                    "resources": {"requests": {"storage": "1Gi"}}}}
    named = {**claim, "metadata": {"name": "named"}, "spec": {**claim["spec"], "volumeName": "admins-hostpath"}}
    status, message = refusal(lambda: core.create_namespaced_persistent_volume_claim(ns, named))
    assert status == 403 and "may not name a PersistentVolume" in message
    core.create_namespaced_persistent_volume_claim(ns, claim)
    # A pending claim's volume may be named once, by an update: not by the tenant.
    status, message = refusal(lambda: core.patch_namespaced_persistent_volume_claim(
        "data", ns, {"spec": {"volumeName": "admins-hostpath"}}))
    assert status == 403 and "may not name a PersistentVolume" in message


def claim(name: str, storage_class: str | None = "standard", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec}
    if storage_class is not None:
        body["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": body}


def ephemeral(template: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod's ephemeral volume with `template` as its claim (named after the pod and volume)."""
    metadata = {k: v for k, v in template["metadata"].items() if k != "name"}
    return [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"metadata": metadata, "spec": template["spec"]}}}]


BETA_CLASS = "volume.beta.kubernetes.io/storage-class"  # read before storageClassName by the volume binder


async def test_claims_cannot_bind_an_administrators_volume_without_naming_it(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    """Static binding needs no volumeName: a claim of the empty class binds
    any Available class-less PersistentVolume, and so does one with no class
    where no default StorageClass fills one in; a selector picks volumes by
    their labels. An administrator's hostPath or local volume is Pod
    Security's blind spot either way."""
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    storage = client.StorageV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    default = "storageclass.kubernetes.io/is-default-class"
    assert not [c for c in storage.list_storage_class().items if (c.metadata.annotations or {}).get(default) == "true"]
    class_less = claim("class-less", "")
    beta_class_less = claim("beta-class-less")
    beta_class_less["metadata"]["annotations"] = {BETA_CLASS: ""}
    attempts = {
        "the empty class": (class_less, "must name a storage class"),
        "no class, none by default": (claim("no-class", None), "must name a storage class"),
        "the empty class by annotation": (beta_class_less, "must name a storage class"),
        "a selector": (claim("selected", selector={"matchLabels": {"owner": "platform"}}), "by label"),
    }
    for what, (body, reason) in attempts.items():
        status, message = refusal(lambda: core.create_namespaced_persistent_volume_claim(ns, body))
        assert status == 403 and reason in message, (what, status, message)
        # The claim a pod's ephemeral volume would have a controller make.
        if what != "no class, none by default":  # its class may yet come from a default
            status, message = refusal(lambda: core.create_namespaced_pod(ns, pod("eph", volumes=ephemeral(body))))
            assert status == 403 and "ephemeral volumes" in message, (what, status, message)
    named = claim("named", volumeName="admins-hostpath")
    status, message = refusal(lambda: core.create_namespaced_pod(ns, pod("eph", volumes=ephemeral(named))))
    assert status == 403 and "ephemeral volumes" in message, (status, message)

    # A class of the platform's is what storage comes through; the claim stays the tenant's to label ...
    core.create_namespaced_persistent_volume_claim(ns, claim("data"))
    core.patch_namespaced_persistent_volume_claim("data", ns, {"metadata": {"labels": {"app": "db"}}})
    # ... but not to empty its class afterwards (the API server lets the annotation be added).
    status, message = refusal(lambda: core.patch_namespaced_persistent_volume_claim(
        "data", ns, {"metadata": {"annotations": {BETA_CLASS: ""}}}))
    assert status == 403 and "must name a storage class" in message, (status, message)
    core.create_namespaced_pod(ns, pod("eph-classed", volumes=ephemeral(claim("t"))))
    core.create_namespaced_pod(ns, pod("eph-default", volumes=ephemeral(claim("t", None))))


async def test_pods_cannot_pick_their_node_or_tolerate_the_control_plane(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    placements = {
        "named node": {"nodeName": "control-plane-1"},
        "every taint": {"tolerations": [{"operator": "Exists"}]},
        "every NoSchedule taint": {"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]},
        "the control plane": {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
                              "nodeSelector": {"node-role.kubernetes.io/control-plane": ""}},
    }
    for what, spec in placements.items():
        status, message = refusal(lambda: core.create_namespaced_pod(ns, pod("placed", **spec)))
        assert status == 403 and ("may not name their node" in message or "may not tolerate" in message), what
    # A taint of the platform's own making (a GPU pool's) may still be tolerated.
    core.create_namespaced_pod(ns, pod("gpu", tolerations=[
        {"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]))


async def test_a_pending_pod_cannot_be_let_onto_the_control_plane_by_an_update(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    """Kubernetes lets a pod's tolerations grow after it is created: a
    Pending pod aimed at the control plane (nodeSelector), patched to
    tolerate its taint, would be scheduled next to etcd."""
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core

    def tolerating(name: str, *more: dict[str, Any]) -> dict[str, Any]:
        """What it already tolerates (the API server lets a pod's tolerations only grow) and more."""
        had = alice.api.sanitize_for_serialization(core.read_namespaced_pod(name, ns).spec.tolerations or [])
        return {"spec": {"tolerations": [*had, *more]}}

    core.create_namespaced_pod(ns, pod("aimed", nodeSelector={"node-role.kubernetes.io/control-plane": ""}))
    for what, toleration in {
        "the control plane": {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
        "every taint": {"operator": "Exists"},
        "every NoSchedule taint": {"operator": "Exists", "effect": "NoSchedule"},
    }.items():
        status, message = refusal(lambda: core.patch_namespaced_pod("aimed", ns, tolerating("aimed", toleration)))
        assert status == 403 and "may not tolerate" in message, (what, status, message)
    aimed = core.read_namespaced_pod("aimed", ns)
    assert all(t.key and not t.key.startswith("node-role.") for t in aimed.spec.tolerations or [])
    # Nor can an update name the node (the API server refuses that too).
    assert refusal(lambda: core.patch_namespaced_pod("aimed", ns, {"spec": {"nodeName": NODE_NAME}}))[0] != 200
    core.delete_namespaced_pod("aimed", ns, grace_period_seconds=0)

    # What the scheduler and the kubelet do to a pod still happens (pods/binding,
    # pods/status), and the tenant can still change what is its own.
    core.create_namespaced_pod(ns, pod_manifest("runs", "sleep 3600"))
    try:
        for _ in range(180):
            running = core.read_namespaced_pod("runs", ns)
            if running.status.phase == "Running":
                break
            await asyncio.sleep(0.5)
        assert running.status.phase == "Running" and running.spec.node_name == NODE_NAME, running.status
        core.patch_namespaced_pod("runs", ns, {"metadata": {"labels": {"tier": "web"}}})
        gpu = {"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        core.patch_namespaced_pod("runs", ns, tolerating("runs", gpu))
        status, message = refusal(lambda: core.patch_namespaced_pod("runs", ns, tolerating("runs", {"operator": "Exists"})))
        assert status == 403 and "may not tolerate" in message, (status, message)
        shown = core.read_namespaced_pod("runs", ns)
        assert shown.metadata.labels["tier"] == "web" and shown.status.phase == "Running"
        assert shown.spec.node_name == NODE_NAME and shown.spec.tolerations[-1].key == "example.com/gpu"
    finally:
        core.delete_namespaced_pod("runs", ns, grace_period_seconds=0)


# -- priority -------------------------------------------------------------------

async def test_pods_cannot_take_a_system_priority_class(cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    """The built-in critical classes outrank every workload: a tenant's pod
    of one would preempt other tenants' pods from a full node."""
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    for name in ("system-node-critical", "system-cluster-critical"):
        status, message = refusal(lambda: core.create_namespaced_pod(ns, pod("critical", priorityClassName=name)))
        assert status == 403 and "system- priority classes" in message, (name, status, message)
    # A bare priority no class gave is the Priority admission plugin's to refuse.
    assert refusal(lambda: core.create_namespaced_pod(ns, pod("bare", priority=2_000_001_000)))[0] == 403
    # The platform's own classes stay the tenant's to name.
    scheduling = client.SchedulingV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    batch = f"batch-{uuid.uuid4().hex[:8]}"
    scheduling.create_priority_class({"metadata": {"name": batch}, "value": 1000})
    try:
        # The Priority admission plugin reads classes from its informer, which
        # hears of a new one a moment after it is made ("no PriorityClass with
        # name ... was found" until then).
        for _ in range(50):
            status, message = refusal(lambda: core.create_namespaced_pod(ns, pod("batch", priorityClassName=batch)))
            if not (status == 403 and "no PriorityClass with name" in message):
                break
            await asyncio.sleep(0.1)
        assert status == 200, message
        assert core.read_namespaced_pod("batch", ns).spec.priority == 1000
    finally:
        scheduling.delete_priority_class(batch)


# -- finalizers on pods -------------------------------------------------------------

async def test_pods_cannot_be_kept_in_etcd_past_their_count_with_a_finalizer(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    """A deleted pod stops counting against the quota's `pods` once its grace
    period is over, while a finalizer keeps it stored: delete and re-create
    without end and etcd fills. Only Kubernetes' own finalizer goes on a pod."""
    alice = await onboard(gateway, tmp_path)
    ns, core = alice.namespace, alice.core
    # Names under kubernetes.io are free text: one that no controller owns would never come off.
    for finalizers in (["example.com/keep"], ["kubernetes.io.example.com/keep"], ["foregroundDeletion"],
                       ["kubernetes.io/keep"], ["keep.kubernetes.io/forever"],
                       ["batch.kubernetes.io/job-tracking", "example.com/keep"]):
        held = {**pod("held"), "metadata": {"name": "held", "finalizers": finalizers}}
        status, message = refusal(lambda: core.create_namespaced_pod(ns, held))
        assert status == 403 and "only Kubernetes' own" in message, (finalizers, status, message)
    # Nor added afterwards, to a pod that was created without one.
    core.create_namespaced_pod(ns, pod("plain"))
    status, message = refusal(lambda: core.patch_namespaced_pod(
        "plain", ns, {"metadata": {"finalizers": ["example.com/keep"]}}))
    assert status == 403 and "only Kubernetes' own" in message, message
    # Kubernetes' own (the Job controller's: the local cluster runs no Job
    # controller, so the tenant plays it) go on, stay through an update, and
    # come off as before.
    tracked = {**pod("tracked"), "metadata": {"name": "tracked", "finalizers": ["batch.kubernetes.io/job-tracking"]}}
    core.create_namespaced_pod(ns, tracked)
    core.patch_namespaced_pod("tracked", ns, {"metadata": {"labels": {"seen": "yes"}}})
    core.patch_namespaced_pod("tracked", ns, {"metadata": {"finalizers": None}})
    assert not core.read_namespaced_pod("tracked", ns).metadata.finalizers
    for name in ("plain", "tracked"):
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


# -- 5. ExternalName ----------------------------------------------------------------

async def test_external_name_services_are_refused(cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    alice, bob = await onboard(gateway, tmp_path), await onboard(gateway, tmp_path)
    alias = {"metadata": {"name": "alias"},
             "spec": {"type": "ExternalName", "externalName": f"web.{bob.namespace}.svc.cluster.local"}}
    status, message = refusal(lambda: alice.core.create_namespaced_service(alice.namespace, alias))
    assert status == 403 and "ExternalName" in message
    plain = {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}
    alice.core.create_namespaced_service(alice.namespace, plain)
    turned = {"spec": {"type": "ExternalName", "externalName": "kubernetes.default.svc.cluster.local"}}
    assert refusal(lambda: alice.core.patch_namespaced_service("web", alice.namespace, turned))[0] == 403
    assert alice.core.read_namespaced_service("web", alice.namespace).spec.type == "ClusterIP"


# -- 6. the gateway's credential and the garbage collector -----------------------

async def test_the_gateway_credential_cannot_delete_orphan_or_reparent_a_tenant_namespace(
        cluster: LocalCluster, gateway: Any, tmp_path: Path) -> None:
    alice = await onboard(gateway, tmp_path)
    ns = alice.namespace
    thief = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.gateway_kubeconfig))
    # An owner that does not exist: the garbage collector would delete the
    # namespace, and everything in it, at once.
    owner = {"apiVersion": "v1", "kind": "Namespace", "name": "gone", "uid": str(uuid.uuid4())}
    born_owned = manifests.namespace(f"tenant-{uuid.uuid4()}", "x")
    born_owned["metadata"]["ownerReferences"] = [owner]
    moves: dict[str, Callable[[], object]] = {
        "re-parent": lambda: thief.patch_namespace(ns, {"metadata": {"ownerReferences": [owner]}}),
        "finalizer": lambda: thief.patch_namespace(ns, {"metadata": {"finalizers": ["example.com/never"]}}),
        "finalize": lambda: thief.replace_namespace_finalize(ns, {"metadata": {"name": ns}, "spec": {"finalizers": []}}),
        "status": lambda: thief.patch_namespace_status(ns, {"status": {"phase": "Terminating"}}),
        "delete": lambda: thief.delete_namespace(ns),
        "orphaning delete": lambda: thief.delete_namespace(ns, propagation_policy="Orphan"),
        "born owned": lambda: thief.create_namespace(born_owned),
        "born undeletable": lambda: thief.create_namespace(
            {**manifests.namespace(f"tenant-{uuid.uuid4()}", "x"), "spec": {"finalizers": ["example.com/never"]}}),
        # Its patch on RoleBindings and ServiceAccounts lets go of one being deleted, and nothing else.
        "open a binding": lambda: client.RbacAuthorizationV1Api(thief.api_client).patch_namespaced_role_binding(
            manifests.TENANT_ROLEBINDING, ns, {"subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group",
                                                             "name": "system:authenticated"}]}),
        "pin a binding": lambda: client.RbacAuthorizationV1Api(thief.api_client).patch_namespaced_role_binding(
            manifests.TENANT_ROLEBINDING, ns, {"metadata": {"finalizers": ["example.com/never"]}}),
        "change an account": lambda: thief.patch_namespaced_service_account(
            manifests.TENANT_SERVICE_ACCOUNT, ns, {"automountServiceAccountToken": True}),
    }
    for what, move in moves.items():
        assert refusal(move)[0] == 403, what
    shown = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig)).read_namespace(ns)
    assert not shown.metadata.owner_references and not shown.metadata.finalizers
    assert shown.metadata.deletion_timestamp is None
    # What the gateway does itself still works.
    thief.patch_namespace(ns, manifests.suspended_label_patch(True))
    thief.patch_namespace(ns, manifests.suspended_label_patch(False))
