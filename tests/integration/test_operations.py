"""Operating the gateway: manifests, metrics, the OpenAPI document, the README."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from devstack.cluster import CLUSTERROLES, REPO_ROOT, LocalCluster
from tests.support.gatewayclient import register_and_login
from tests.support.gatewayclient import metrics_text

pytestmark = pytest.mark.cluster
DEPLOY = REPO_ROOT / "deploy" / "kubernetes"


def test_manifests_pass_a_server_side_dry_run(cluster: LocalCluster) -> None:
    cluster.kubectl_run("apply", "-f", str(DEPLOY / "namespace.yaml"))
    result = cluster.kubectl_run("apply", "-k", str(DEPLOY), "--dry-run=server", check=False)
    assert result.returncode == 0, result.stderr
    applied = result.stdout
    for kind in ("deployment.apps/tenant-gateway", "poddisruptionbudget.policy/tenant-gateway",
                 "service/tenant-gateway", "service/tenant-gateway-metrics",
                 "networkpolicy.networking.k8s.io/tenant-gateway",
                 "clusterrole.rbac.authorization.k8s.io/tenant-gateway",
                 "clusterrolebinding.rbac.authorization.k8s.io/tenant-gateway"):
        assert kind in applied, applied


def test_the_suite_runs_on_the_clusterrole_the_manifests_ship(cluster: LocalCluster) -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert "clusterroles.yaml" in kustomization["resources"]
    shipped = next(d for d in yaml.safe_load_all(CLUSTERROLES.read_text()) if d["metadata"]["name"] == "tenant-gateway")
    live = yaml.safe_load(cluster.kubectl_run("get", "clusterrole", "tenant-gateway", "-o", "yaml").stdout)

    def normal(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(({k: sorted(v) for k, v in r.items()} for r in rules), key=repr)

    assert normal(live["rules"]) == normal(shipped["rules"])
    binding = yaml.safe_load(cluster.kubectl_run("get", "clusterrolebinding", "tenant-gateway", "-o", "yaml").stdout)
    assert binding["roleRef"]["name"] == "tenant-gateway"
    deployed = yaml.safe_load((DEPLOY / "deployment.yaml").read_text())
    assert deployed["spec"]["replicas"] >= 2
    container = deployed["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


async def test_metrics_expose_the_named_series(gateway: Any) -> None:
    user = await register_and_login(gateway)
    workspace = await user.init()
    await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps")
    await user.call("GET", f"/k8s/{workspace['id']}/api/v1/namespaces/{workspace['namespace']}/configmaps")
    text = await metrics_text(gateway)
    for name in ("tenant_gateway_requests_total", "tenant_gateway_token_requests_total",
                 "tenant_gateway_token_cache_hits_total", "tenant_gateway_proxy_open_streams",
                 "tenant_gateway_request_duration_seconds_bucket", "tenant_gateway_suspensions_total",
                 "tenant_gateway_rate_limited_total"):
        assert f"\n{name}" in text or f"# TYPE {name.removesuffix('_bucket')}" in text, name
    assert re.search(r'tenant_gateway_requests_total\{route="/api/v1/workspaces/init",status="201"\} 1\.0', text)
    assert 'tenant_gateway_token_requests_total{result="success"} 1.0' in text
