"""Operating the gateway: manifests, metrics, the OpenAPI document, the README."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.cluster import CLUSTERROLES, REPO_ROOT, LocalCluster
from proxy import openapi
from tests.gatewayclient import register_and_login
from tests.integration.test_proxy import metrics_text

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


def test_the_manifests_say_how_prometheus_reaches_the_metrics_and_keep_tenants_out() -> None:
    pod = yaml.safe_load((DEPLOY / "deployment.yaml").read_text())["spec"]["template"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GATEWAY_METRICS_LISTEN"] == f"0.0.0.0:{ports['metrics']}"
    assert env["GATEWAY_LISTEN"] == f"0.0.0.0:{ports['http']}" and ports["http"] != ports["metrics"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
    services = {d["metadata"]["name"]: d for d in yaml.safe_load_all((DEPLOY / "service.yaml").read_text())}
    assert [p["targetPort"] for p in services["tenant-gateway"]["spec"]["ports"]] == ["http"]
    assert [p["targetPort"] for p in services["tenant-gateway-metrics"]["spec"]["ports"]] == ["metrics"]
    policy = yaml.safe_load((DEPLOY / "networkpolicy.yaml").read_text())["spec"]
    (metrics_rule,) = [r for r in policy["ingress"] if {"protocol": "TCP", "port": ports["metrics"]} in r["ports"]]
    (source,) = metrics_rule["from"]  # one named namespace, never a tenant's
    selector = source["namespaceSelector"]
    assert set(selector["matchLabels"]) == {"kubernetes.io/metadata.name"} and "podSelector" not in source
    assert {"key": "tenant-gateway.io/workspace-id", "operator": "DoesNotExist"} in selector["matchExpressions"]


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


async def test_openapi_document_matches_the_routes(gateway: Any) -> None:
    document = await (await gateway.get("/api/v1/openapi.json")).json()
    documented = {(path, method.upper()) for path, ops in document["paths"].items() for method in ops}
    registered = set()
    for route in gateway.app.router.routes():
        path = route.resource.canonical
        if path.startswith("/k8s/"):
            path = "/k8s/{workspace_id}/{path}"
            methods = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} if route.method == "*" else {route.method}
        else:
            methods = {route.method} - {"HEAD"}
        registered |= {(path, m) for m in methods}
    assert documented == registered
    # What this deployment accepts, so a client (or a fuzzer) is not told any string is a tier.
    assert document["components"]["schemas"]["InitRequest"]["properties"]["tier"]["enum"] == ["basic"]
    assert openapi.document(["gold", "basic"])["components"]["schemas"]["InitRequest"]["properties"]["tier"]["enum"] \
        == ["basic", "gold"]
    assert {"200", "201", "400"} <= set(document["paths"]["/api/v1/workspaces/init"]["post"]["responses"])


def test_readme_opens_with_the_commands_ci_runs() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    first_block = re.search(r"```(?:sh|bash)?\n(.*?)```", readme, re.S)
    assert first_block and readme.index("```") < 300
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["make run", "make test"]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert Path(REPO_ROOT / "Dockerfile").read_text().count("FROM ") == 2
