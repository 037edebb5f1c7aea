"""The foundation the gateway stands on, proven against the real control plane
with the gateway's restricted identity (deploy/kubernetes/clusterroles.yaml)."""

from __future__ import annotations

import time
import uuid

import asyncpg
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.cluster import LocalCluster
from provisioning import manifests, workload_rules
from provisioning.tiers import DEFAULT_TIERS
from tests.support import kubeclients
from tests.support.pods import restricted

pytestmark = pytest.mark.cluster


def _status(call: object) -> int:
    try:
        call()  # type: ignore[operator]
    except ApiException as error:
        return int(error.status)
    return 200


@pytest.fixture
def gateway_api(cluster: LocalCluster) -> client.ApiClient:
    return kubeclients.from_kubeconfig(cluster.gateway_kubeconfig)


@pytest.fixture
def tenant_namespace(gateway_api: client.ApiClient) -> str:
    """A tenant namespace made by the gateway identity: all six objects."""
    ns = f"tenant-{uuid.uuid4()}"
    wid = str(uuid.uuid4())
    core, rbac = client.CoreV1Api(gateway_api), client.RbacAuthorizationV1Api(gateway_api)
    core.create_namespace(manifests.namespace(ns, wid))
    core.create_namespaced_resource_quota(ns, manifests.resource_quota(ns, wid, DEFAULT_TIERS["basic"]))
    core.create_namespaced_limit_range(ns, manifests.limit_range(ns, wid, DEFAULT_TIERS["basic"]))
    client.NetworkingV1Api(gateway_api).create_namespaced_network_policy(ns, manifests.network_isolation(ns, wid))
    core.create_namespaced_service_account(ns, manifests.service_account(ns, wid))
    rbac.create_namespaced_role_binding(ns, manifests.role_binding(ns, wid, "tenant-admin"))
    return ns


def _token(gateway_api: client.ApiClient, ns: str, seconds: int = 7200) -> str:
    answer = client.CoreV1Api(gateway_api).create_namespaced_service_account_token(
        manifests.TENANT_SERVICE_ACCOUNT, ns, {"spec": {"expirationSeconds": seconds}})
    return str(answer.status.token)


def test_gateway_identity_creates_all_six_tenant_objects(gateway_api: client.ApiClient, tenant_namespace: str) -> None:
    core = client.CoreV1Api(gateway_api)
    assert core.read_namespace(tenant_namespace).metadata.labels[manifests.WORKSPACE_LABEL]
    assert core.read_namespaced_service_account(manifests.TENANT_SERVICE_ACCOUNT, tenant_namespace)
    assert core.read_namespaced_resource_quota(manifests.QUOTA_NAME, tenant_namespace).spec.hard["requests.cpu"] == "4"
    assert core.read_namespaced_limit_range(manifests.LIMITRANGE_NAME, tenant_namespace)
    isolation = client.NetworkingV1Api(gateway_api).read_namespaced_network_policy(manifests.ISOLATION_NAME, tenant_namespace)
    assert isolation.spec.policy_types == ["Ingress"]
    binding = client.RbacAuthorizationV1Api(gateway_api).read_namespaced_role_binding(manifests.TENANT_ROLEBINDING, tenant_namespace)
    assert binding.role_ref.name == "tenant-admin"


def test_gateway_identity_is_refused_what_it_must_never_do(
        cluster: LocalCluster, gateway_api: client.ApiClient, tenant_namespace: str) -> None:
    core, rbac = client.CoreV1Api(gateway_api), client.RbacAuthorizationV1Api(gateway_api)
    assert _status(lambda: core.read_namespaced_secret("anything", "kube-system")) == 403
    assert _status(lambda: core.list_namespaced_secret("kube-system")) == 403
    assert _status(lambda: core.list_pod_for_all_namespaces()) == 403
    assert _status(lambda: core.list_namespaced_pod(tenant_namespace)) == 403
    assert _status(lambda: client.AppsV1Api(gateway_api).list_namespaced_deployment(tenant_namespace)) == 403
    assert _status(lambda: core.delete_namespace("kube-system")) == 403
    # Binding cluster-admin is an escalation: no `bind` on it, and it does not hold its rights.
    escalation = manifests.role_binding(tenant_namespace, "x", "cluster-admin")
    escalation["metadata"]["name"] = "escalate"
    assert _status(lambda: rbac.create_namespaced_role_binding(tenant_namespace, escalation)) == 403
    # Impersonation: the API server refuses the request as a whole.
    impersonating = kubeclients.from_kubeconfig(cluster.gateway_kubeconfig)
    impersonating.default_headers["Impersonate-User"] = "system:admin"
    assert _status(lambda: client.CoreV1Api(impersonating).list_namespace()) == 403


def test_gateway_identity_is_confined_to_namespaces_it_made(
        cluster: LocalCluster, gateway_api: client.ApiClient, tenant_namespace: str) -> None:
    """The `tenant-gateway-confined` admission policy, as shipped. RBAC alone
    would let this credential act in every namespace; these are the moves a
    thief would make with it."""
    core, rbac = client.CoreV1Api(gateway_api), client.RbacAuthorizationV1Api(gateway_api)
    # A token for any ServiceAccount outside the tenant namespaces (on most
    # clusters kube-system holds controllers' accounts that lead to cluster-admin).
    assert _status(lambda: core.create_namespaced_service_account_token("default", "kube-system", {"spec": {}})) == 403
    core.create_namespaced_service_account(tenant_namespace, {"metadata": {"name": "other"}})
    assert _status(lambda: core.create_namespaced_service_account_token("other", tenant_namespace, {"spec": {}})) == 403
    assert _status(lambda: _token(gateway_api, tenant_namespace, seconds=7201)) == 403
    assert _status(lambda: core.create_namespaced_service_account("kube-system", {"metadata": {"name": "x"}})) == 403
    # tenant-admin bound where it could read someone else's Secrets, or to everyone.
    into_kube_system = manifests.role_binding("kube-system", "x", "tenant-admin")
    assert _status(lambda: rbac.create_namespaced_role_binding("kube-system", into_kube_system)) == 403
    to_everyone = manifests.role_binding(tenant_namespace, "x", "tenant-admin")
    to_everyone["metadata"]["name"] = "everyone"
    to_everyone["subjects"] = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]
    assert _status(lambda: rbac.create_namespaced_role_binding(tenant_namespace, to_everyone)) == 403
    system_binding = rbac.list_namespaced_role_binding("kube-system").items[0].metadata.name
    assert _status(lambda: rbac.delete_namespaced_role_binding(system_binding, "kube-system")) == 403
    # Pulling kube-system into scope, or loosening a tenant namespace.
    workspace_label = {"metadata": {"labels": {manifests.WORKSPACE_LABEL: "x"}}}
    assert _status(lambda: core.patch_namespace("kube-system", workspace_label)) == 403
    assert _status(lambda: core.patch_namespace(tenant_namespace, workspace_label)) == 403
    assert _status(lambda: core.create_namespace({"metadata": {"name": f"tenant-{uuid.uuid4()}"}})) == 403
    assert _status(lambda: core.create_namespace(manifests.namespace("not-a-tenant", "x"))) == 403
    without_pod_security = manifests.namespace(f"tenant-{uuid.uuid4()}", "x")
    without_pod_security["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
    assert _status(lambda: core.create_namespace(without_pod_security)) == 403
    loosened = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}
    assert _status(lambda: core.patch_namespace(tenant_namespace, loosened)) == 403
    # Its tier's Pod Security level and caps (reconcile), and nothing else of the namespace.
    enforce, cap = workload_rules.POD_SECURITY_ENFORCE, workload_rules.CONFIG_MAP_BYTES
    core.patch_namespace(tenant_namespace, {"metadata": {"labels": {enforce: "baseline"}, "annotations": {cap: "1024"}}})
    core.patch_namespace(tenant_namespace, {"metadata": {"labels": {enforce: "restricted"}, "annotations": {cap: None}}})
    assert _status(lambda: core.patch_namespace(tenant_namespace, {"metadata": {"labels": {enforce: None}}})) == 403
    assert _status(lambda: core.patch_namespace(tenant_namespace, {"metadata": {"annotations": {"example.test/x": "y"}}})) == 403
    # The tier's annotations only as workload_rules writes them: a cap that is
    # no number would make every write in the namespace fail admission, one
    # past the API server's object limit is none, a bare name matches a registry.
    images = workload_rules.SHARED_IMAGES
    for wrong in ({cap: "lots"}, {cap: "-1"}, {cap: "1572865"}, {cap: "1e9"}, {images: "registry"},
                  {images: "docker.io/"}, {images: "docker.io/library/nginx,registry"},
                  {workload_rules.ANNOTATION_PREFIX + "other": "1"}):
        assert _status(lambda: core.patch_namespace(tenant_namespace, {"metadata": {"annotations": wrong}})) == 403, wrong
    core.patch_namespace(tenant_namespace, {"metadata": {"annotations": {
        cap: "1572864", images: "docker.io/library/nginx,localhost/tenant-gateway/"}}})
    core.patch_namespace(tenant_namespace, {"metadata": {"annotations": {cap: None, images: None}}})
    # A bare entry an older gateway wrote (here the administrator) never
    # keeps the gateway from suspending the namespace.
    admin = client.CoreV1Api(kubeclients.from_kubeconfig(cluster.admin_kubeconfig))
    admin.patch_namespace(tenant_namespace, {"metadata": {"annotations": {images: "busybox"}}})
    core.patch_namespace(tenant_namespace, manifests.suspended_label_patch(True))
    core.patch_namespace(tenant_namespace, manifests.suspended_label_patch(False))
    assert _status(lambda: core.patch_namespace(tenant_namespace, {"metadata": {"annotations": {images: "nginx"}}})) == 403
    core.patch_namespace(tenant_namespace, {"metadata": {"annotations": {images: None}}})
    # What the gateway itself does is untouched.
    core.patch_namespace(tenant_namespace, manifests.suspended_label_patch(True))
    core.patch_namespace(tenant_namespace, manifests.suspended_label_patch(False))
    assert _status(lambda: _token(gateway_api, tenant_namespace, seconds=7200)) == 200


def test_token_request_lives_exactly_7200_seconds_and_is_walled_in(
        cluster: LocalCluster, gateway_api: client.ApiClient, tenant_namespace: str) -> None:
    token = _token(gateway_api, tenant_namespace)
    claims = kubeclients.claims(token)
    assert int(claims["exp"]) - int(claims["iat"]) == 7200  # type: ignore[call-overload]
    tenant_api = client.CoreV1Api(kubeclients.from_token(cluster, token))
    tenant_api.create_namespaced_config_map(tenant_namespace, {"metadata": {"name": "hello"}, "data": {"a": "b"}})
    assert tenant_api.read_namespaced_config_map("hello", tenant_namespace).data == {"a": "b"}
    assert _status(lambda: tenant_api.create_namespaced_config_map("default", {"metadata": {"name": "x"}})) == 403
    assert _status(lambda: tenant_api.list_namespace()) == 403
    assert _status(lambda: tenant_api.list_node()) == 403
    assert _status(lambda: client.RbacAuthorizationV1Api(kubeclients.from_token(cluster, token))
                   .create_cluster_role_binding({"metadata": {"name": "x"},
                                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                                                 "subjects": [{"kind": "User", "name": "x"}]})) == 403


def test_tenant_cannot_mint_tokens_or_long_lived_token_secrets(
        cluster: LocalCluster, gateway_api: client.ApiClient, tenant_namespace: str) -> None:
    tenant_api = client.CoreV1Api(kubeclients.from_token(cluster, _token(gateway_api, tenant_namespace)))
    assert _status(lambda: tenant_api.create_namespaced_service_account_token(
        manifests.TENANT_SERVICE_ACCOUNT, tenant_namespace, {"spec": {"expirationSeconds": 3600}})) == 403
    legacy = {"metadata": {"name": "forever", "annotations": {"kubernetes.io/service-account.name": manifests.TENANT_SERVICE_ACCOUNT}},
              "type": "kubernetes.io/service-account-token"}
    assert _status(lambda: tenant_api.create_namespaced_secret(tenant_namespace, legacy)) in (403, 422)
    # An ordinary Secret is fine.
    tenant_api.create_namespaced_secret(tenant_namespace, {"metadata": {"name": "app"}, "stringData": {"k": "v"}})


def test_tenant_cannot_redirect_traffic_it_does_not_own(
        cluster: LocalCluster, gateway_api: client.ApiClient, tenant_namespace: str) -> None:
    """Service externalIPs (CVE-2020-8554) and hand-written Endpoints
    (CVE-2021-25740) would let a tenant capture other people's traffic."""
    tenant_api = client.CoreV1Api(kubeclients.from_token(cluster, _token(gateway_api, tenant_namespace)))
    service = {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}
    hijack = {**service, "spec": {**service["spec"], "externalIPs": ["8.8.8.8"]}}
    assert _status(lambda: tenant_api.create_namespaced_service(tenant_namespace, hijack)) == 403
    tenant_api.create_namespaced_service(tenant_namespace, service)
    assert _status(lambda: tenant_api.patch_namespaced_service("web", tenant_namespace, {"spec": {"externalIPs": ["8.8.8.8"]}})) == 403
    endpoints = {"metadata": {"name": "manual"}, "subsets": [{"addresses": [{"ip": "10.96.0.1"}], "ports": [{"port": 443}]}]}
    assert _status(lambda: tenant_api.create_namespaced_endpoints(tenant_namespace, endpoints)) == 403
    assert _status(lambda: tenant_api.list_namespaced_endpoints(tenant_namespace)) == 200


def test_replacing_the_service_account_kills_old_tokens(
        cluster: LocalCluster, gateway_api: client.ApiClient, tenant_namespace: str) -> None:
    token = _token(gateway_api, tenant_namespace)
    tenant_api = client.CoreV1Api(kubeclients.from_token(cluster, token))
    tenant_api.list_namespaced_config_map(tenant_namespace)
    core = client.CoreV1Api(gateway_api)
    core.delete_namespaced_service_account(manifests.TENANT_SERVICE_ACCOUNT, tenant_namespace)
    core.create_namespaced_service_account(tenant_namespace, manifests.service_account(tenant_namespace, "x"))
    deadline = time.monotonic() + 20
    status = 200
    while time.monotonic() < deadline:
        status = _status(lambda: tenant_api.list_namespaced_config_map(tenant_namespace))
        if status == 401:
            break
        time.sleep(0.5)
    assert status == 401


def test_resource_quota_rejects_an_over_quota_pod(
        cluster: LocalCluster, gateway_api: client.ApiClient, tenant_namespace: str) -> None:
    tenant_api = client.CoreV1Api(kubeclients.from_token(cluster, _token(gateway_api, tenant_namespace)))
    greedy = restricted({"metadata": {"name": "greedy"}, "spec": {"containers": [{
        "name": "c", "image": "registry.invalid/none",
        "resources": {"requests": {"cpu": "5"}, "limits": {"cpu": "5", "memory": "1Gi"}}}]}})
    with pytest.raises(ApiException) as refused:
        tenant_api.create_namespaced_pod(tenant_namespace, greedy)
    assert refused.value.status == 403 and "exceeded quota" in str(refused.value.body)
    # A pod that states nothing gets the LimitRange defaults and fits.
    modest = restricted({"metadata": {"name": "modest"},
                         "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}})
    created = tenant_api.create_namespaced_pod(tenant_namespace, modest)
    assert created.spec.containers[0].resources.requests["cpu"] == "100m"


@pytest.mark.parametrize("escape", [
    {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]},
    {"containers": [{"name": "c", "image": "x"}], "volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
    {"containers": [{"name": "c", "image": "x"}], "hostPID": True},
    {"containers": [{"name": "c", "image": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]},
])
def test_pod_security_refuses_a_pod_that_could_take_the_node(
        cluster: LocalCluster, gateway_api: client.ApiClient, tenant_namespace: str, escape: dict[str, object]) -> None:
    tenant_api = client.CoreV1Api(kubeclients.from_token(cluster, _token(gateway_api, tenant_namespace)))
    with pytest.raises(ApiException) as refused:
        tenant_api.create_namespaced_pod(tenant_namespace, {"metadata": {"name": "escape"}, "spec": escape})
    assert refused.value.status == 403 and "violates PodSecurity" in str(refused.value.body)


async def test_postgres_round_trip(database_url: str) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute("CREATE TEMP TABLE t (v text)")
        await connection.execute("INSERT INTO t VALUES ($1)", "hello")
        assert await connection.fetchval("SELECT v FROM t") == "hello"
        assert await connection.fetchval("SELECT count(*) FROM schema_migrations") >= 1
    finally:
        await connection.close()
