"""The Helm chart against the real API server: every object it renders, with
every value set (tests/data/chart/everything.yaml) and with the local
cluster's values, passes a server-side dry run (schema, defaulting, CEL of
the admission policies, Pod Security warnings), and helm's own install path
(`helm install --dry-run=server`) accepts the release.

Nothing is installed for real: the cluster-wide objects (ClusterRoles,
admission policies, FlowSchemas) are the ones the local cluster already runs
from deploy/kubernetes, and the image is not on the node. Only a namespace
of the test's own is made, and deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devstack import chart
from devstack.cluster import LocalCluster

pytestmark = pytest.mark.cluster

EVERYTHING = chart.REPO_ROOT / "tests" / "data" / "chart" / "everything.yaml"
LOCAL_CLUSTER = chart.REPO_ROOT / "deploy" / "helm" / "local-cluster.values.yaml"
CLUSTER_WIDE = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                "FlowSchema", "PriorityLevelConfiguration", "Namespace"}


@pytest.fixture(scope="module")
def helm() -> Path:
    return chart.helm_binary()


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    """A namespace as the README has operators make it: Pod Security restricted."""
    name = f"chart-{uuid.uuid4().hex[:8]}"
    cluster.kubectl_run("create", "namespace", name)
    cluster.kubectl_run("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted",
                        "pod-security.kubernetes.io/warn=restricted")
    try:
        yield name
    finally:
        cluster.kubectl_run("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize("values", [EVERYTHING, LOCAL_CLUSTER], ids=["everything", "local"])
def test_the_api_server_accepts_every_rendered_object(cluster: LocalCluster, helm: Path, namespace: str,
                                                      values: Path, tmp_path: Path) -> None:
    # namespace.create off: the namespace is the test's, made above.
    rendered = chart.render(helm, values_files=[values], set_values=["namespace.create=false"], namespace=namespace)
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(rendered)
    result = cluster.kubectl_run("apply", "--dry-run=server", "-f", str(manifest), check=False)
    assert result.returncode == 0, result.stderr
    assert "violate PodSecurity" not in result.stderr, result.stderr
    applied = result.stdout.splitlines()
    assert len(applied) == len(documents), result.stdout
    namespaced = [d for d in documents if d["kind"] not in CLUSTER_WIDE]
    assert {"Deployment", "Service", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "ServiceAccount"} <= {
        d["kind"] for d in namespaced}
    assert all(d["metadata"]["namespace"] == namespace for d in namespaced)


def test_helm_install_dry_run_against_the_server(cluster: LocalCluster, helm: Path, namespace: str) -> None:
    """With the local cluster's values: its cluster-wide objects are the ones
    devstack applied, which helm would refuse to take over (no release owns
    them), so the release leaves them out as those values say."""
    result = chart.helm(helm, "install", chart.RELEASE, str(chart.CHART), "--namespace", namespace,
                        f"--kubeconfig={cluster.admin_kubeconfig}", "--dry-run=server",
                        "--values", str(LOCAL_CLUSTER), check=False)
    assert result.returncode == 0, result.stderr
    assert "STATUS: pending-install" in result.stdout, result.stdout
    assert "tenant-gateway user create --email" in result.stdout, result.stdout  # NOTES.txt
    assert "kind: ClusterRole" not in result.stdout and "kind: Deployment" in result.stdout


def test_helm_refuses_to_take_over_objects_it_did_not_make(cluster: LocalCluster, helm: Path, namespace: str) -> None:
    """What an operator moving from `kubectl apply -k` meets (README, "Installing with Helm")."""
    result = chart.helm(helm, "install", chart.RELEASE, str(chart.CHART), "--namespace", namespace,
                        f"--kubeconfig={cluster.admin_kubeconfig}", "--dry-run=server", check=False)
    assert result.returncode != 0
    assert "exists and cannot be imported into the current release" in result.stderr, result.stderr
