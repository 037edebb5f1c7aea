"""The Helm chart (deploy/helm/tenant-gateway), rendered by the real helm
client: it lints strictly, its schema refuses bad values, every value lands
where the gateway reads it, and deploy/kubernetes is exactly its rendering
with the default values (devstack.chart).

No cluster: `helm template` and `helm lint` run offline. In this ring, not the
pure one, because they need the helm binary, which `make test` builds in the
background while the pure ring runs (Makefile). The cluster ring's
tests/integration/test_helm_chart_install.py shows the API server accepts
what these render.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack import chart
from devstack.image import image_name
from proxy.settings.loading import load_settings
from proxy.settings.model import VARIABLES

EVERYTHING = chart.REPO_ROOT / "tests" / "data" / "chart" / "everything.yaml"
LOCAL_CLUSTER = chart.REPO_ROOT / "deploy" / "helm" / "local-cluster.values.yaml"
SCHEMA = chart.CHART / "values.schema.json"
PUBLIC_ENDPOINT = ("publicServer=https://k8s.example.org:6443", "publicCA.secretName=public-ca")
"""What everything.yaml leaves out: clusters excludes them."""


@pytest.fixture(scope="module")
def helm() -> Path:
    return chart.helm_binary()


def objects(rendered: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered) if d]


def by_kind(rendered: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in objects(rendered)}


def template(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return chart.helm(helm, "template", chart.RELEASE, str(chart.CHART), "--namespace", chart.NAMESPACE,
                      "--kube-version", chart.KUBE_VERSION, *args, check=False)


# -- the kustomize tree is the chart's -----------------------------------------------------------

def test_deploy_kubernetes_is_the_chart_rendered_with_its_defaults(helm: Path) -> None:
    expected = chart.expected_tree(helm)
    stale = sorted(name for name, text in expected.items()
                   if not (chart.KUSTOMIZE_TREE / name).exists() or (chart.KUSTOMIZE_TREE / name).read_text() != text)
    assert not stale, f"deploy/kubernetes differs from the chart in {stale}: run `python -m devstack.chart`"
    kustomization = yaml.safe_load((chart.KUSTOMIZE_TREE / "kustomization.yaml").read_text())
    assert set(kustomization["resources"]) == set(expected) | chart.included_files()
    on_disk = {p.name for p in chart.KUSTOMIZE_TREE.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == set(kustomization["resources"])


def test_the_hand_written_files_are_the_charts_own(helm: Path) -> None:
    """admission.yaml and clusterroles.yaml stay where `check` and the local
    cluster read them; the chart links to them, so it ships the same objects."""
    for name in chart.included_files():
        link = chart.CHART / "files" / name
        assert link.is_symlink() and link.resolve() == (chart.KUSTOMIZE_TREE / name).resolve(), name
    rendered = by_kind(chart.render(helm))
    for name in chart.included_files():
        for shipped in objects((chart.KUSTOMIZE_TREE / name).read_text()):
            assert rendered[(shipped["kind"], shipped["metadata"]["name"])] == shipped


def test_app_version_is_the_packages() -> None:
    version = tomllib.loads((chart.REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2" and meta["appVersion"] == version


# -- lint and render ------------------------------------------------------------------------------

@pytest.mark.parametrize("values", [None, EVERYTHING, LOCAL_CLUSTER], ids=["defaults", "everything", "local"])
def test_lints_strictly(helm: Path, values: Path | None) -> None:
    args = ["lint", "--strict", str(chart.CHART), "--kube-version", chart.KUBE_VERSION]
    if values:
        args += ["--values", str(values)]
    result = chart.helm(helm, *args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_every_value_lands_where_the_gateway_reads_it(helm: Path) -> None:
    rendered = by_kind(chart.render(helm, values_files=[EVERYTHING]))
    for obj in rendered.values():
        assert obj["apiVersion"] and obj["metadata"]["labels"]["app.kubernetes.io/name"] == "tenant-gateway"
        if obj["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                               "ValidatingAdmissionPolicyBinding", "FlowSchema", "PriorityLevelConfiguration"}:
            assert obj["metadata"]["namespace"] == chart.NAMESPACE, obj["metadata"]
    deployment = rendered[("Deployment", "tenant-gateway")]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 3
    assert container["image"] == "registry.example.com/tenant-gateway:0.2.0-rc1"
    assert container["imagePullPolicy"] == "Never"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"} and pod["tolerations"][0]["key"] == "dedicated"
    assert pod["affinity"]["nodeAffinity"] and pod["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "1Gi"}
    assert pod["terminationGracePeriodSeconds"] == 10 + 30 + 5
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == 10
    assert container["startupProbe"]["failureThreshold"] == 120
    assert deployment["spec"]["template"]["metadata"]["annotations"]["example.org/owner"] == "platform"
    # tls.secretName: the public listener serves HTTPS, and the probes and the Service follow.
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"https": 8080, "metrics": 9100, "audit": 9443}
    assert all(container[probe]["httpGet"]["scheme"] == "HTTPS" and container[probe]["httpGet"]["port"] == "https"
               for probe in ("startupProbe", "livenessProbe", "readinessProbe"))
    service = rendered[("Service", "tenant-gateway")]["spec"]
    assert service["clusterIP"] == "10.96.0.50" and service["ports"][0]["targetPort"] == "https"

    # Every file a variable names lies in a mounted volume, and every mount has its volume.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(mounts.values()) <= set(volumes)
    env = {e["name"]: e for e in container["env"]}
    for name in ("GATEWAY_TIERS_FILE", "GATEWAY_OIDC_PROVIDERS", "GATEWAY_CLUSTERS", "GATEWAY_AUDIT_TLS_CERT_FILE",
                 "GATEWAY_AUDIT_TLS_KEY_FILE", "GATEWAY_AUDIT_CLIENT_CA", "GATEWAY_TLS_CERT_FILE", "GATEWAY_TLS_KEY_FILE"):
        path = env[name]["value"]
        assert any(path.startswith(mount + "/") for mount in mounts), (name, path)
    assert volumes["audit-ca"]["secret"]["secretName"] == "apiserver-audit-client-ca"
    assert volumes["audit-tls"]["secret"]["secretName"] == "tenant-gateway-audit-tls"
    assert volumes["tls"]["secret"]["secretName"] == "gateway-tls"

    # The Secret the chart made holds what its env points at.
    secret = rendered[("Secret", "tenant-gateway-settings")]["stringData"]
    assert env["GATEWAY_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "tenant-gateway-settings",
                                                                         "key": "database-url"}
    assert secret["database-url"].startswith("postgresql://gateway:secret@")
    clusters = yaml.safe_load(rendered[("Secret", "tenant-gateway-clusters")]["stringData"]["clusters.yaml"])
    assert [c["name"] for c in clusters] == ["east", "west"]

    # The gateway's own settings loader takes the rendered env and files as they are.
    files = {"GATEWAY_TIERS_FILE": rendered[("ConfigMap", "tenant-gateway-tiers")]["data"]["tiers.yaml"],
             "GATEWAY_OIDC_PROVIDERS": rendered[("Secret", "tenant-gateway-oidc")]["stringData"]["providers.yaml"]}
    known = {v.name for v in VARIABLES}
    plain = {name: e["value"] for name, e in env.items() if "value" in e and name in known}
    plain |= {"GATEWAY_DATABASE_URL": secret["database-url"], "GATEWAY_SESSION_SECRET": secret["session-secret"]}
    settings = load_settings(plain, file_texts=files)
    assert settings.gateway_url == "https://gateway.example.org"
    assert settings.cors_origins == ("https://console.example.org", "https://admin.example.org")
    assert settings.trusted_proxies == frozenset({"10.0.0.10", "10.0.0.11"})
    assert list(settings.tiers) == ["small"] and settings.oidc_providers[0].name == "corp"
    assert settings.audit_retention_days == 90 and settings.log_level == "DEBUG"
    assert settings.database_pool_size == 20 and settings.registration_enabled is False
    assert (settings.shutdown_drain_seconds, settings.shutdown_timeout_seconds) == (8, 30)

    # Services and the NetworkPolicy follow the ports.
    assert rendered[("Service", "tenant-gateway")]["spec"]["type"] == "LoadBalancer"
    metrics_service = rendered[("Service", "tenant-gateway-metrics")]
    assert metrics_service["metadata"]["annotations"]["prometheus.io/port"] == "9100"
    assert rendered[("Service", "tenant-gateway-audit")]["spec"]["ports"][0]["port"] == 8443
    policy = rendered[("NetworkPolicy", "tenant-gateway")]["spec"]
    assert policy["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "ingress-nginx"}
    assert policy["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "observability"}
    assert [p["port"] for rule in policy["ingress"] for p in rule["ports"]] == [8080, 9100, 9443]
    assert [p["port"] for p in policy["egress"][2]["ports"]] == [443, 6443, 16443]
    assert rendered[("PodDisruptionBudget", "tenant-gateway")]["spec"]["minAvailable"] == 2


def test_defaults_take_the_database_and_session_from_secret_tenant_gateway(helm: Path) -> None:
    rendered = by_kind(chart.render(helm, values_files=[LOCAL_CLUSTER]))
    assert not [key for key in rendered if key[0] == "Secret"]
    deployment = rendered[("Deployment", "tenant-gateway")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["GATEWAY_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "tenant-gateway", "key": "database-url"}
    assert env["GATEWAY_SESSION_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "tenant-gateway",
                                                                           "key": "session-secret"}
    assert deployment["spec"]["replicas"] == 3 and container["imagePullPolicy"] == "Never"
    assert container["image"] == image_name(chart.REPO_ROOT)  # what `make image` builds and the node imports
    assert "GATEWAY_CLUSTERS" not in env and "GATEWAY_OIDC_PROVIDERS" not in env
    # The local cluster applies the cluster-wide objects itself (clusterResources.create: false).
    assert {kind for kind, _ in rendered} == {"ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget",
                                              "Service", "ServiceAccount"}


def test_public_server_and_ca(helm: Path) -> None:
    rendered = by_kind(chart.render(helm, set_values=PUBLIC_ENDPOINT))
    pod = rendered[("Deployment", "tenant-gateway")]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["GATEWAY_PUBLIC_SERVER"] == "https://k8s.example.org:6443"
    assert env["GATEWAY_PUBLIC_CA_FILE"] == "/etc/tenant-gateway-public-ca/ca.crt"
    assert {"name": "public-ca", "secret": {"secretName": "public-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}} \
        in pod["volumes"]


def test_a_config_change_rolls_the_pods(helm: Path) -> None:
    """Tiers and files are read at start-up: the pod template changes with them."""
    def checksum(*values: str) -> str:
        deployment = by_kind(chart.render(helm, set_values=values))[("Deployment", "tenant-gateway")]
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum() != checksum("tiers=gold: {requests.cpu: '2'}")
    assert checksum() == checksum()


# -- the schema ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args, where", [
    (["--set", "replicas=two"], "/replicas"),
    (["--set", "replicas=-1"], "/replicas"),
    (["--set", "unknown=1"], "'unknown'"),
    (["--set", "image.pull=Always"], "'pull'"),
    (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
    (["--set", "publicUrl=gateway.example.com"], "/publicUrl"),
    (["--set", "sessionSecret.value=short"], "/sessionSecret/value"),
    (["--set", "database.url=mysql://x"], "/database/url"),
    (["--set", "corsOrigins[0]=https://console.example.com/path"], "/corsOrigins/0"),
    (["--set", "settings.GATEWAY_NO_SUCH_THING=1"], "'GATEWAY_NO_SUCH_THING'"),
    (["--set", "settings.GATEWAY_DATABASE_URL=postgresql://x"], "invalid propertyName 'GATEWAY_DATABASE_URL'"),
    (["--set", ("oidcProviders[0].name=corp,oidcProviders[0].issuer=https://sso,oidcProviders[0].client_id=x,"
              "oidcProviders[0].clientSecret=y")], "'clientSecret'"),
    (["--set", "oidcProviders[0].name=corp"], "/oidcProviders/0"),
    (["--set", "clusters[0].name=east,clusters[0].kind=private"], "/clusters/0/kind"),
    (["--set", "networkPolicy.databasePort=70000"], "/networkPolicy/databasePort"),
    (["--set", "resources.requests=lots"], "/resources/requests"),
    (["--set", "auditWebhook.retentionDays=0"], "/auditWebhook/retentionDays"),
])
def test_the_schema_refuses_bad_values(helm: Path, args: list[str], where: str) -> None:
    result = template(helm, *args)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert where in result.stderr, result.stderr


@pytest.mark.parametrize("args, says", [
    (["--set", "clusters[0].name=east", "--set", "publicServer=https://k8s.example.org"], "leave publicServer"),
    (["--set", "auditWebhook.enabled=true"], "auditWebhook.tlsSecret"),
])
def test_contradictory_values_are_refused_at_render(helm: Path, args: list[str], says: str) -> None:
    result = template(helm, *args)
    assert result.returncode != 0 and says in result.stderr, result.stderr


def test_settings_names_every_variable_the_chart_leaves_open(helm: Path) -> None:
    """`settings` takes any GATEWAY_* variable the chart does not set itself,
    and no other: a new variable must be added to the schema (or owned by a value)."""
    everything = yaml.safe_load(EVERYTHING.read_text())
    set_by_values: set[str] = set()
    for rendered in (chart.render(helm, values_files=[EVERYTHING]), chart.render(helm, set_values=PUBLIC_ENDPOINT)):
        deployment = by_kind(rendered)[("Deployment", "tenant-gateway")]
        set_by_values |= {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    chart_owned = set_by_values - set(everything["settings"]) - {e["name"] for e in everything["extraEnv"]}
    schema = json.loads(SCHEMA.read_text())
    open_names = set(schema["properties"]["settings"]["propertyNames"]["enum"])
    assert open_names == {v.name for v in VARIABLES} - chart_owned
    assert {"GATEWAY_CLUSTERS", "GATEWAY_PUBLIC_SERVER", "GATEWAY_PUBLIC_CA_FILE"} & open_names == set()
