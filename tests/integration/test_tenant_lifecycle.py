"""The whole tenant lifecycle through the gateway, with the real kubectl:
register -> login -> init -> kubeconfig -> kubectl -> suspend -> resume."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from devstack.cluster import LocalCluster
from provisioning import manifests
from tests.support import kubeclients
from tests.support.gatewayclient import Session, admin_session, register_and_login

pytestmark = pytest.mark.cluster


def kubectl(cluster: LocalCluster, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cluster.kubectl), f"--kubeconfig={kubeconfig}", "--request-timeout=10s", *args],
                          capture_output=True, text=True, timeout=30)


def save(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


async def wait_until_refused(cluster: LocalCluster, kubeconfig: Path, namespace: str) -> str:
    """Poll until kubectl is refused; the API server caches token checks ~10 s."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        result = await asyncio.to_thread(kubectl, cluster, kubeconfig, "-n", namespace, "get", "configmaps")
        if result.returncode != 0:
            return result.stderr
        await asyncio.sleep(0.5)
    raise AssertionError("the old kubeconfig still works 20 s after suspension")


async def test_full_lifecycle_with_real_kubectl(cluster: LocalCluster, gateway: Any, database_url: str,
                                                tmp_path: Path) -> None:
    alice = await register_and_login(gateway)
    workspace = await alice.init()
    assert workspace["namespace"] == f"tenant-{alice.user_id}"
    assert workspace["status"] == "provisioned"
    assert workspace["quota"] == {"cpu": "4", "memory": "8Gi"}
    ns = workspace["namespace"]

    text = await alice.kubeconfig()
    config = yaml.safe_load(text)
    assert config["current-context"] == "tenant-context"
    assert config["contexts"][0]["context"] == {"cluster": "internal-cluster", "namespace": ns, "user": "sa-tenant-admin"}
    token = config["users"][0]["user"]["token"]
    claims = kubeclients.claims(token)
    assert int(claims["exp"]) - int(claims["iat"]) == 7200  # type: ignore[call-overload]
    first = save(tmp_path, "alice.kubeconfig", text)

    # kubectl works in its namespace (the context pins it) ...
    made = kubectl(cluster, first, "create", "configmap", "hello", "--from-literal=a=b")
    assert made.returncode == 0, made.stderr
    assert kubectl(cluster, first, "get", "configmap", "hello", "-o", "name").stdout.strip() == "configmap/hello"
    # ... and is refused in another tenant's namespace and on cluster-scoped resources.
    bob = await register_and_login(gateway)
    bob_ns = (await bob.init())["namespace"]
    assert "forbidden" in kubectl(cluster, first, "-n", bob_ns, "get", "configmaps").stderr.lower()
    assert "forbidden" in kubectl(cluster, first, "get", "nodes").stderr.lower()
    assert "forbidden" in kubectl(cluster, first, "get", "namespaces").stderr.lower()
    assert "forbidden" in kubectl(cluster, first, "create", "clusterrolebinding", "x",
                                  "--clusterrole=cluster-admin", "--user=x").stderr.lower()

    # The tenant makes its own RoleBinding: suspension must not leave it as a back door.
    # (Its own account's: the members' accounts are bound by the gateway alone.)
    assert kubectl(cluster, first, "create", "serviceaccount", "worker").returncode == 0
    backdoor = kubectl(cluster, first, "create", "rolebinding", "backdoor", "--clusterrole=tenant-admin",
                       f"--serviceaccount={ns}:worker")
    assert backdoor.returncode == 0, backdoor.stderr

    root = await admin_session(gateway, database_url)
    suspended = await root.call("POST", f"/api/v1/workspaces/{workspace['id']}/suspend")
    assert suspended.status == 200
    assert await suspended.json() == {"id": workspace["id"], "status": "suspended"}
    refused = await wait_until_refused(cluster, first, ns)
    assert "unauthorized" in refused.lower() or "forbidden" in refused.lower()
    bindings = cluster.kubectl_run("-n", ns, "get", "rolebindings", "-o", "name").stdout.split()
    assert bindings == []
    again = await alice.call("GET", "/api/v1/workspaces/credentials/kubeconfig")
    assert again.status == 403
    assert (await again.json())["error"]["code"] == "workspace_suspended"

    # A workspace onboarded before the isolation policy existed gets it at
    # its next resume (played here by an operator deleting it).
    cluster.kubectl_run("-n", ns, "delete", "networkpolicy", "tenant-isolation")
    resumed = await root.call("POST", f"/api/v1/workspaces/{workspace['id']}/resume")
    assert await resumed.json() == {"id": workspace["id"], "status": "provisioned"}
    assert cluster.kubectl_run("-n", ns, "get", "networkpolicy", "-o", "name").stdout.split() == [
        "networkpolicy.networking.k8s.io/tenant-isolation"]
    fresh = save(tmp_path, "alice-2.kubeconfig", await alice.kubeconfig())
    listed = kubectl(cluster, fresh, "get", "configmap", "hello", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    stale = kubectl(cluster, first, "get", "configmaps")
    assert stale.returncode != 0 and "unauthorized" in stale.stderr.lower()

    # Every issuance and every suspension step is in the audit log, newest first.
    audit = await (await root.call("GET", f"/api/v1/audit?workspace_id={workspace['id']}")).json()
    actions = [row["action"] for row in audit]
    assert actions.count("IssueKubeconfig") == 2
    assert actions.count("SuspendWorkspace") == 3 and actions.count("ResumeWorkspace") == 1
    assert actions[0] == "IssueKubeconfig" and actions[-1] == "InitWorkspace"
    issued = [row for row in audit if row["action"] == "IssueKubeconfig"]
    assert issued[-1]["details"]["credential_id"] == claims.get("jti")
    assert all(row["ip_address"] == "127.0.0.1" for row in issued)
    assert all(row["user_id"] == alice.user_id for row in issued)

    await assert_no_token_in_database(database_url, [token, yaml.safe_load(fresh.read_text())["users"][0]["user"]["token"]])


async def assert_no_token_in_database(database_url: str, tokens: list[str]) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        tables = [r["tablename"] for r in await connection.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:
            for row in await connection.fetch(f"SELECT row_to_json(t)::text AS j FROM {table} t"):
                for token in tokens:
                    assert token not in row["j"], f"a token was stored in {table}"
                    assert token.split(".")[2] not in row["j"]
    finally:
        await connection.close()


async def test_init_is_idempotent_and_concurrent_inits_make_one_workspace(cluster: LocalCluster, gateway: Any,
                                                                          database_url: str) -> None:
    carol = await register_and_login(gateway)
    events: list[dict[str, Any]] = []
    listener = await asyncpg.connect(database_url)
    await listener.add_listener("tenant_gateway_events", lambda *args: events.append(json.loads(args[3])))
    try:
        answers = await asyncio.gather(*(carol.call("POST", "/api/v1/workspaces/init", json={}) for _ in range(6)))
        # Notifications arrive after the commit, so shortly after the answers.
        for _ in range(50):
            if any(e.get("status") == "provisioned" for e in events):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)
    finally:
        await listener.close()
    statuses = sorted(a.status for a in answers)
    bodies = [await a.json() for a in answers]
    assert statuses.count(201) == 1 and statuses.count(200) == 5, statuses
    assert len({b["id"] for b in bodies}) == 1
    # Only the call that completed the workspace audits it and tells the replicas.
    assert events.count({"kind": "workspace_changed", "id": bodies[0]["id"], "status": "provisioned",
                         "namespace": f"tenant-{carol.user_id}"}) == 1, events
    root = await admin_session(gateway, database_url)
    audit = await (await root.call("GET", f"/api/v1/audit?workspace_id={bodies[0]['id']}")).json()
    assert [row["action"] for row in audit] == ["InitWorkspace"]
    again = await carol.init()
    assert again["id"] == bodies[0]["id"]
    listed = await (await carol.call("GET", "/api/v1/workspaces")).json()
    assert [w["id"] for w in listed] == [bodies[0]["id"]]
    labelled = cluster.kubectl_run("get", "namespaces", "-l", f"tenant-gateway.io/workspace-id={bodies[0]['id']}",
                                   "-o", "name").stdout.split()
    assert labelled == [f"namespace/tenant-{carol.user_id}"]
    for kind in ("serviceaccount/sa-tenant-admin", "rolebinding/tenant-admin", "resourcequota/tenant-quota",
                 "limitrange/tenant-defaults", "networkpolicy/tenant-isolation"):
        shown = cluster.kubectl_run("-n", f"tenant-{carol.user_id}", "get", kind, "-o",
                                    "jsonpath={.metadata.labels.tenant-gateway\\.io/workspace-id}")
        assert shown.stdout == bodies[0]["id"], kind


class FaultAfterCreates:
    """A FAKE FAULT around the real client: the connection to the API server
    is lost after `allowed` successful creates. A real API server cannot be
    made to die between two particular requests on cue."""

    def __init__(self, real: Any, allowed: int) -> None:
        self._real, self._allowed = real, allowed
        self.endpoint, self.ca_base64 = real.endpoint, real.ca_base64

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        from provisioning.errors import ClusterUnavailable

        if self._allowed <= 0:
            raise ClusterUnavailable()
        self._allowed -= 1
        return dict(await self._real.create(path, body))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


async def test_onboarding_interrupted_after_two_objects_completes_on_retry(
        cluster: LocalCluster, make_gateway: Any) -> None:
    from provisioning.kube.client import KubeClient

    real = await KubeClient.from_kubeconfig(cluster.gateway_kubeconfig)
    try:
        broken = await make_gateway(kube=FaultAfterCreates(real, allowed=2))
        dave = await register_and_login(broken)
        failed = await dave.call("POST", "/api/v1/workspaces/init", json={})
        assert failed.status == 503
        assert (await failed.json())["error"]["code"] == "cluster_unavailable"
        ns = f"tenant-{dave.user_id}"
        assert cluster.kubectl_run("get", "namespace", ns, check=False).returncode == 0
        assert cluster.kubectl_run("-n", ns, "get", "serviceaccount", "sa-tenant-admin", check=False).returncode != 0
        # Half-made is not usable: no kubeconfig for it.
        not_ready = await dave.call("GET", "/api/v1/workspaces/credentials/kubeconfig")
        assert not_ready.status == 409
        listed = await (await dave.call("GET", "/api/v1/workspaces")).json()
        assert listed[0]["status"] == "provisioning"

        healthy = await make_gateway()
        dave_again = Session(healthy, dave.user_id, dave.email, dave.token, dave.csrf)
        done = await dave_again.call("POST", "/api/v1/workspaces/init", json={})
        assert done.status == 201
        assert (await done.json())["status"] == "provisioned"
        for kind in ("serviceaccount/sa-tenant-admin", "rolebinding/tenant-admin"):
            assert cluster.kubectl_run("-n", ns, "get", kind, check=False).returncode == 0
        assert await dave_again.kubeconfig()
    finally:
        await real.close()


async def test_unreachable_api_server_is_503_and_leaves_nothing_usable(
        cluster: LocalCluster, make_gateway: Any, tmp_path: Path) -> None:
    dead = yaml.safe_load(cluster.gateway_kubeconfig.read_text())
    dead["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"  # discard port: nothing listens
    dead_path = save(tmp_path, "dead.kubeconfig", yaml.safe_dump(dead))
    client = await make_gateway(GATEWAY_KUBECONFIG=str(dead_path))
    erin = await register_and_login(client)
    answer = await erin.call("POST", "/api/v1/workspaces/init", json={})
    assert answer.status == 503
    assert (await answer.json())["error"]["code"] == "cluster_unavailable"
    assert cluster.kubectl_run("get", "namespace", f"tenant-{erin.user_id}", check=False).returncode != 0
    ready = await client.get("/readyz")
    assert ready.status == 503
    assert (await ready.json())["checks"]["kubernetes"] == "unavailable"


async def test_suspending_a_workspace_whose_namespace_never_came_is_clean(
        cluster: LocalCluster, make_gateway: Any, database_url: str) -> None:
    from provisioning.kube.client import KubeClient

    real = await KubeClient.from_kubeconfig(cluster.gateway_kubeconfig)
    try:
        broken = await make_gateway(kube=FaultAfterCreates(real, allowed=0))
        frank = await register_and_login(broken)
        assert (await frank.call("POST", "/api/v1/workspaces/init", json={})).status == 503
        workspace_id = (await (await frank.call("GET", "/api/v1/workspaces")).json())[0]["id"]
        root = await admin_session(broken, database_url)
        answer = await root.call("POST", f"/api/v1/workspaces/{workspace_id}/suspend")
        assert answer.status == 200 and (await answer.json())["status"] == "suspended"
    finally:
        await real.close()


async def test_the_suspension_label_refuses_the_tenants_own_writes(cluster: LocalCluster, gateway: Any,
                                                                   tmp_path: Path) -> None:
    """deploy/kubernetes/admission.yaml, as the test cluster applies it: while
    the label is on, a tenant workload holding a token cannot recreate the
    RoleBindings suspension is deleting (or change anything else)."""
    carol = await register_and_login(gateway)
    ns = (await carol.init())["namespace"]
    config = save(tmp_path, "carol.kubeconfig", await carol.kubeconfig())
    assert kubectl(cluster, config, "create", "serviceaccount", "worker").returncode == 0
    cluster.kubectl_run("label", "namespace", ns, f"{manifests.SUSPENDED_LABEL}=true")
    try:
        deadline = time.monotonic() + 10  # the label reaches admission through an informer
        while True:
            made = await asyncio.to_thread(kubectl, cluster, config, "create", "rolebinding", f"again-{time.time_ns()}",
                                           "--clusterrole=tenant-admin", f"--serviceaccount={ns}:worker")
            if made.returncode != 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert "this workspace is suspended" in made.stderr, made.stderr
        assert "this workspace is suspended" in kubectl(cluster, config, "create", "configmap", "x").stderr
        # Reads are RBAC's to end: suspension deletes the bindings.
        assert kubectl(cluster, config, "get", "configmaps").returncode == 0
    finally:
        cluster.kubectl_run("label", "namespace", ns, f"{manifests.SUSPENDED_LABEL}-")


async def test_resume_after_a_cut_short_suspension_leaves_old_kubeconfigs_dead(
        cluster: LocalCluster, gateway: Any, database_url: str, tmp_path: Path) -> None:
    dave = await register_and_login(gateway)
    workspace = await dave.init()
    path = f"/api/v1/workspaces/{workspace['id']}"
    old = save(tmp_path, "dave.kubeconfig", await dave.kubeconfig())
    assert kubectl(cluster, old, "get", "configmaps").returncode == 0
    root = await admin_session(gateway, database_url)
    # Resuming what is not suspended is the contract's 200, and touches nothing: the kubeconfig still works.
    not_suspended = await root.call("POST", f"{path}/resume")
    assert await not_suspended.json() == {"id": workspace["id"], "status": "provisioned"}
    assert kubectl(cluster, old, "get", "configmaps").returncode == 0

    # The gateway died right after a suspension's first step: the row says
    # suspended; the bindings and the ServiceAccount are untouched.
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute("UPDATE workspaces SET status = 'suspended' WHERE id = $1", uuid.UUID(workspace["id"]))
    finally:
        await connection.close()
    resuming = asyncio.create_task(root.call("POST", f"{path}/resume"))
    await asyncio.sleep(1)
    meanwhile = await root.call("POST", f"{path}/resume")
    assert meanwhile.status == 409 and (await meanwhile.json())["error"]["code"] == "operation_in_progress"
    resumed = await resuming
    assert await resumed.json() == {"id": workspace["id"], "status": "provisioned"}

    stale = kubectl(cluster, old, "get", "configmaps")
    assert stale.returncode != 0 and "unauthorized" in stale.stderr.lower()
    fresh = save(tmp_path, "dave-2.kubeconfig", await dave.kubeconfig())
    assert kubectl(cluster, fresh, "get", "configmaps").returncode == 0


async def test_a_suspension_during_a_resume_waits_for_it_and_wins(cluster: LocalCluster, gateway: Any,
                                                                 database_url: str, tmp_path: Path) -> None:
    """The kill switch is never refused: an administrator who suspends while
    a resume is under way (its 15 s wait for the token cache) gets a 200 once
    the resume is done, and the workspace ends suspended, with nothing issued
    in between still working."""
    erin = await register_and_login(gateway)
    workspace = await erin.init()
    path = f"/api/v1/workspaces/{workspace['id']}"
    root = await admin_session(gateway, database_url)
    assert (await root.call("POST", f"{path}/suspend")).status == 200
    resuming = asyncio.create_task(root.call("POST", f"{path}/resume"))
    await asyncio.sleep(1)
    suspended = await root.call("POST", f"{path}/suspend")
    assert suspended.status == 200, await suspended.text()
    assert await suspended.json() == {"id": workspace["id"], "status": "suspended"}
    assert (await resuming).status == 200  # it finished first: the suspension waited for it
    assert (await (await root.call("GET", path)).json())["status"] == "suspended"
    kubeconfig = await erin.call("GET", "/api/v1/workspaces/credentials/kubeconfig")
    assert kubeconfig.status == 403


async def test_an_onboarding_retried_during_a_suspension_makes_nothing_in_the_suspended_namespace(
        cluster: LocalCluster, gateway: Any, database_url: str) -> None:
    """A workspace whose onboarding was cut short (still `provisioning`) is
    suspended while its owner calls init again. The suspension deletes the
    RoleBindings and replaces the ServiceAccount; an onboarding running
    beside it would make them again. It waits for the suspension's lock
    instead, and then finds nothing left to onboard."""
    from provisioning.db import repositories as repo
    from provisioning.db.pool import Database

    frank = await register_and_login(gateway)
    namespace = manifests.namespace_for(frank.user_id)
    db = await Database.connect(database_url)
    try:
        workspace, _ = await repo.claim_workspace(db, uuid.UUID(frank.user_id), namespace,
                                                  manifests.TENANT_SERVICE_ACCOUNT, "basic")
        async with repo.workspace_status_lock(db, workspace.id):  # a suspension under way ...
            retried = asyncio.create_task(frank.call("POST", "/api/v1/workspaces/init", json={}))
            await asyncio.sleep(2)
            assert not retried.done()
            assert cluster.kubectl_run("get", "namespace", namespace, check=False).returncode != 0
            async with db.connection() as connection:  # ... which marks it first
                await repo.set_workspace_state(connection, workspace.id, "suspended")
        answer = await retried
        assert answer.status == 200, await answer.text()
        assert (await answer.json())["status"] == "suspended"
    finally:
        await db.close()
    listed = cluster.kubectl_run("-n", namespace, "get", "rolebindings,serviceaccounts", "-o", "name", check=False)
    assert "tenant-admin" not in listed.stdout and manifests.TENANT_SERVICE_ACCOUNT not in listed.stdout


async def suspended_workspace(gateway: Any, database_url: str) -> tuple[dict[str, Any], Session]:
    """A new tenant's workspace, suspended by an admin; and the admin's session."""
    workspace = await (await register_and_login(gateway)).init()
    root = await admin_session(gateway, database_url)
    assert (await root.call("POST", f"/api/v1/workspaces/{workspace['id']}/suspend")).status == 200
    return workspace, root


async def test_a_resume_whose_commit_fails_leaves_the_namespace_suspended(
        cluster: LocalCluster, gateway: Any, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The resume's last step, marking the workspace provisioned with its
    audit row, fails (the real PostgreSQL, its audit table locked by another
    session past the gateway's database timeout). The cluster had already
    been opened again: it is closed again, so the namespace is exactly as
    suspended as the database, the console and the audit log say."""
    from provisioning import suspension

    monkeypatch.setattr(suspension, "TOKEN_CACHE_GRACE_SECONDS", 0.0)
    workspace, root = await suspended_workspace(gateway, database_url)
    namespace, path = workspace["namespace"], f"/api/v1/workspaces/{workspace['id']}"

    locker = await asyncpg.connect(database_url)
    try:
        async with locker.transaction():
            await locker.execute("LOCK TABLE audit_logs IN EXCLUSIVE MODE")  # reads pass, inserts wait
            resumed = await root.call("POST", f"{path}/resume")
            assert resumed.status == 503, await resumed.text()
    finally:
        await locker.close()

    labels = json.loads(cluster.kubectl_run("get", "namespace", namespace, "-o", "json").stdout)["metadata"]["labels"]
    assert labels.get(manifests.SUSPENDED_LABEL) == "true"
    bindings = json.loads(cluster.kubectl_run("get", "rolebindings", "-n", namespace, "-o", "json").stdout)["items"]
    assert bindings == []
    assert (await (await root.call("GET", path)).json())["status"] == "suspended"
    # Repeating the call finishes it.
    again = await root.call("POST", f"{path}/resume")
    assert await again.json() == {"id": workspace["id"], "status": "provisioned"}


async def test_a_resume_whose_commit_answer_was_lost_is_not_undone(
        cluster: LocalCluster, gateway: Any, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A FAKE fault, which a real PostgreSQL cannot be made to show on cue:
    the commit happens, and its answer is lost (the connection goes during
    it). The workspace is provisioned in the database, so the cluster must
    stay open: undoing it would leave a provisioned tenant whom the cluster
    refuses, which a repeated resume (a 200 that touches nothing) would not
    put right."""
    from provisioning import suspension
    from provisioning.errors import DatabaseUnavailable

    committed = suspension._change_status

    async def commit_then_lose_the_answer(*args: Any, **kwargs: Any) -> Any:
        await committed(*args, **kwargs)
        raise DatabaseUnavailable()

    monkeypatch.setattr(suspension, "TOKEN_CACHE_GRACE_SECONDS", 0.0)
    workspace, root = await suspended_workspace(gateway, database_url)
    namespace, path = workspace["namespace"], f"/api/v1/workspaces/{workspace['id']}"
    monkeypatch.setattr(suspension, "_change_status", commit_then_lose_the_answer)
    assert (await root.call("POST", f"{path}/resume")).status == 503
    monkeypatch.undo()

    labels = json.loads(cluster.kubectl_run("get", "namespace", namespace, "-o", "json").stdout)["metadata"]["labels"]
    assert manifests.SUSPENDED_LABEL not in labels
    cluster.kubectl_run("get", "rolebinding", manifests.TENANT_ROLEBINDING, "-n", namespace)
    assert (await (await root.call("GET", path)).json())["status"] == "provisioned"
